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

include(${CMAKE_CURRENT_LIST_DIR}/../compile_object.cmake)
compile_object(result out)
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
