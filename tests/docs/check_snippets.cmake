# docs.snippets: writes the C++ blocks of PAGES (README.md and docs/guide/) with
# tools/doc_snippets.py: the fragments into OUT, each whole program into a unit beside it. Then
# compiles each unit in turn as the build compiles the object library doc_snippets, whose source
# is OUT (the tests' flags and precompiled header, warnings as errors): a program is copied into
# OUT to be compiled. A compiler error names the page and line of the snippet (#line).
execute_process(COMMAND "${PYTHON}" "${SOURCE_DIR}/tools/doc_snippets.py" --root "${SOURCE_DIR}" --out "${OUT}" ${PAGES}
                RESULT_VARIABLE result OUTPUT_VARIABLE listed ERROR_VARIABLE errors)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "${errors}")
endif()
string(REGEX REPLACE "\n$" "" listed "${listed}")
string(REPLACE "\n" ";" units "${listed}")
list(POP_FRONT units summary)
message(STATUS "${summary}")
get_filename_component(folder "${OUT}" DIRECTORY)
file(RENAME "${OUT}" "${folder}/doc_fragments.cpp")
include(${CMAKE_CURRENT_LIST_DIR}/../compile_object.cmake)
foreach(unit "${folder}/doc_fragments.cpp" ${units})
  configure_file("${unit}" "${OUT}" COPYONLY)
  compile_object(result out)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "a snippet of the documents does not compile against the headers: fix the page, or the "
                        "prelude (tests/docs/snippet_prelude.hpp) if what a fragment's marker gives has changed.\n${out}")
  endif()
endforeach()
list(LENGTH units programs)
message(STATUS "the fragments and ${programs} programs compile")
