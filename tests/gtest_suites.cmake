# Lists a GoogleTest program's suites and writes OUT, a CTest file with one test per suite: the
# program run with --gtest_filter=SUITE.*, named SUITE, labelled `numerics` when SUITE is in
# NUMERICS (comma-separated) and `compile_time` when it is in COMPILE_TIME. Run after each build
# of the program (tests/CMakeLists.txt says why one test per suite).
#
#   cmake -DPROGRAM=... -DOUT=... -DNUMERICS=A,B -DCOMPILE_TIME=C -DTIMEOUT=300 -P gtest_suites.cmake
cmake_minimum_required(VERSION 3.22)  # for IN_LIST (a script run with -P sets no policies)
execute_process(COMMAND "${PROGRAM}" --gtest_list_tests RESULT_VARIABLE result OUTPUT_VARIABLE listing ERROR_VARIABLE errors)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "${PROGRAM} --gtest_list_tests failed (status ${result}):\n${errors}${listing}")
endif()
string(REPLACE "," ";" numerics "${NUMERICS}")
string(REPLACE "," ";" compile_time "${COMPILE_TIME}")
# A suite is a line "SUITE." at the margin (a typed suite's line goes on with "  # TypeParam"); its
# tests are the indented lines below it. Other lines (gtest_main's greeting) are not suites.
string(REPLACE "\n" ";" lines "${listing}")
set(content "# Written by tests/gtest_suites.cmake from ${PROGRAM} --gtest_list_tests\n")
foreach(line IN LISTS lines)
  if(NOT line MATCHES "^([A-Za-z_][A-Za-z0-9_/]*)\\.( |$)")
    continue()
  endif()
  set(suite "${CMAKE_MATCH_1}")
  list(APPEND suites "${suite}")
  set(labels "")
  if(suite IN_LIST numerics)
    list(APPEND labels numerics)
  endif()
  if(suite IN_LIST compile_time)
    list(APPEND labels compile_time)
  endif()
  string(APPEND content "add_test([=[${suite}]=] [=[${PROGRAM}]=] [=[--gtest_filter=${suite}.*]=] --gtest_brief=1)\n"
                        "set_tests_properties([=[${suite}]=] PROPERTIES TIMEOUT ${TIMEOUT} LABELS \"${labels}\")\n")
endforeach()
if(NOT suites)
  message(FATAL_ERROR "${PROGRAM} --gtest_list_tests listed no suite:\n${listing}")
endif()
foreach(name IN LISTS numerics compile_time)  # a renamed suite must not lose its label quietly
  if(NOT name IN_LIST suites)
    message(FATAL_ERROR "${PROGRAM} has no test suite ${name}, which tests/CMakeLists.txt labels; rename it there too")
  endif()
endforeach()
file(WRITE "${OUT}" "${content}")
