# Builds TARGET in BUILD_DIR, expects the build to fail, and checks the compiler's diagnostic:
# - its first error line matches EXPECT, read from the first line of SOURCE ("// EXPECT: <regex>");
# - it is the only error, and the whole diagnostic has at most MAX_LINES lines (passed in, 30 if
#   not; twice that for compilers that quote more, see below), or fewer where the second line of
#   SOURCE says so ("// MAX_LINES: <n>"). Once a rule's
#   static_assert fails, nothing that depends on the rule may add errors or notes of its own: the
#   rule must not be buried under pages of them.
file(READ "${SOURCE}" head LIMIT 2000)
if(NOT head MATCHES "^// EXPECT: ([^\n]+)")
  message(FATAL_ERROR "${SOURCE} must start with a line \"// EXPECT: <regex>\"")
endif()
set(expect "${CMAKE_MATCH_1}")
if(NOT MAX_LINES)
  set(MAX_LINES 30)
endif()
set(max_lines ${MAX_LINES})
if(head MATCHES "^[^\n]*\n// MAX_LINES: ([0-9]+)\n" AND CMAKE_MATCH_1 LESS max_lines)
  set(max_lines ${CMAKE_MATCH_1})
endif()
# The bounds are g++ 12's. g++ 13 and later, and clang, quote the source line and a caret under
# every "required from" (clang: "in instantiation of") step of the same chain, so the same single
# error takes about twice the lines there.
if(NOT (COMPILER_ID STREQUAL "GNU" AND COMPILER_VERSION VERSION_LESS 13))
  math(EXPR max_lines "2 * ${max_lines}")
endif()

# With Ninja, the case's compile command is read from the build manifest and run here, so that
# cases run in parallel (two ninja processes in one build tree would write the same logs); the
# precompiled header it uses is built with everything else, before the tests. With another
# generator the case is built as a target, one at a time (RESOURCE_LOCK in CMakeLists.txt).
if(MAKE_PROGRAM MATCHES "ninja" AND OBJECT)
  execute_process(COMMAND "${MAKE_PROGRAM}" -C "${BUILD_DIR}" -t commands "${OBJECT}"
                  RESULT_VARIABLE result OUTPUT_VARIABLE commands ERROR_VARIABLE commands)
  string(REGEX MATCH "[^\n]+\n?$" command "${commands}")  # the last is the case's own compile
  if(NOT result EQUAL 0 OR NOT command)
    message(FATAL_ERROR "cannot read the compile command of ${OBJECT} from the build manifest:\n${commands}")
  endif()
  string(STRIP "${command}" command)
  # Only the diagnostic matters: g++ stops after checking (templates instantiated, no code made),
  # about 1 s of a case's 14 (7 of them loading the precompiled header), with the same messages.
  if(COMPILER_ID STREQUAL "GNU")
    string(APPEND command " -fsyntax-only")
  endif()
  execute_process(COMMAND sh -c "${command}" WORKING_DIRECTORY "${BUILD_DIR}"
                  RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE out)
else()
  execute_process(COMMAND "${CMAKE_COMMAND}" --build "${BUILD_DIR}" --target "${PREREQUISITE}"
                  RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "${PREREQUISITE}, which the case builds on, did not build:\n${out}")
  endif()
  execute_process(COMMAND "${CMAKE_COMMAND}" --build "${BUILD_DIR}" --target "${TARGET}"
                  RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE out)
endif()
if(result EQUAL 0)
  message(FATAL_ERROR "${SOURCE} compiled, but it breaks a tp rule and must not")
endif()
string(REGEX MATCH "[^\n]*error:[^\n]*" first_error "${out}")
if(NOT first_error)
  message(FATAL_ERROR "the build failed without a compiler error:\n${out}")
endif()
if(NOT first_error MATCHES "${expect}")
  message(FATAL_ERROR "the first error does not name the rule.\nexpected: ${expect}\nfirst error: ${first_error}")
endif()
message(STATUS "first error: ${first_error}")

# The compiler's lines only: not the build tool's progress, failure and command lines (ninja
# prints the failed command on the line after "FAILED:"; make prints none), nor CMake's own
# ("-- ..."), should it re-run all the same.
set(diagnostic "\n${out}")
string(REGEX REPLACE "\nFAILED: [^\n]*\n[^\n]*" "" diagnostic "${diagnostic}")
string(REGEX REPLACE "\n(-- |ninja: |g?make(\\[[0-9]+\\])?: |\\[[0-9]+/[0-9]+\\] |\\[ *[0-9]+%\\] )[^\n]*" "" diagnostic "${diagnostic}")
string(REGEX REPLACE "\n+$" "" diagnostic "${diagnostic}")
string(REGEX MATCHALL "\n" newlines "${diagnostic}")
list(LENGTH newlines lines)
string(REGEX MATCHALL "error:" errors "${diagnostic}")
list(LENGTH errors error_count)
message(STATUS "diagnostic: ${lines} lines (at most ${max_lines}), ${error_count} error(s)")
if(NOT error_count EQUAL 1)
  message(FATAL_ERROR "the rule's error is followed by others: the compiler went on instantiating "
                      "what depends on the rule.${diagnostic}")
endif()
if(lines GREATER max_lines)
  message(FATAL_ERROR "the diagnostic has ${lines} lines, more than ${max_lines}: after the rule's error, "
                      "the compiler went on instantiating what depends on the rule.${diagnostic}")
endif()
