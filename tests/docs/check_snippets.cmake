# docs.snippets: writes the C++ blocks of PAGES (README.md and docs/guide/) into OUT with
# tools/doc_snippets.py, then compiles OUT as the build compiles the object library
# doc_snippets (the tests' flags and precompiled header, warnings as errors). A compiler error
# names the page and line of the snippet (#line).
execute_process(COMMAND "${PYTHON}" "${SOURCE_DIR}/tools/doc_snippets.py" --root "${SOURCE_DIR}" --out "${OUT}" ${PAGES}
                RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "${out}")
endif()
message(STATUS "${out}")
include(${CMAKE_CURRENT_LIST_DIR}/../compile_object.cmake)
compile_object(result out)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "a snippet of the documents does not compile against the headers: fix the page, "
                      "or the prelude (tests/docs/snippet_prelude.hpp) if its marker's given names changed.\n${out}")
endif()
