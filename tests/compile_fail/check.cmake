# Builds TARGET in BUILD_DIR, expects the build to fail, and checks that the compiler's first
# error line matches EXPECT (read from the first line of SOURCE: "// EXPECT: <regex>").
file(STRINGS "${SOURCE}" first_line LIMIT_COUNT 1)
string(REGEX REPLACE "^// EXPECT: " "" expect "${first_line}")
execute_process(COMMAND "${CMAKE_COMMAND}" --build "${BUILD_DIR}" --target "${TARGET}"
                RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE out)
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
