# compile_object(RESULT OUTPUT): compiles OBJECT's source as the build would, and sets RESULT to
# the compiler's exit status and OUTPUT to what it printed. The caller's -D variables say what:
# BUILD_DIR, MAKE_PROGRAM, OBJECT (its path in the build tree), COMPILER_ID, and for generators
# other than Ninja TARGET and PREREQUISITE. Used by the compile-fail cases and docs.snippets.
#
# With Ninja, the compile command is read from the build manifest and run here, so that checks
# run in parallel (two ninja processes in one build tree would write the same logs); the
# precompiled header it uses is built with everything else, before the tests. With another
# generator TARGET is built, one at a time (RESOURCE_LOCK in tests/CMakeLists.txt).
function(compile_object result_var output_var)
  if(MAKE_PROGRAM MATCHES "ninja" AND OBJECT)
    execute_process(COMMAND "${MAKE_PROGRAM}" -C "${BUILD_DIR}" -t commands "${OBJECT}"
                    RESULT_VARIABLE result OUTPUT_VARIABLE commands ERROR_VARIABLE commands)
    string(REGEX MATCH "[^\n]+\n?$" command "${commands}")  # the last is the object's own compile
    if(NOT result EQUAL 0 OR NOT command)
      message(FATAL_ERROR "cannot read the compile command of ${OBJECT} from the build manifest:\n${commands}")
    endif()
    string(STRIP "${command}" command)
    # Only the diagnostic matters: g++ stops after checking (templates instantiated, no code
    # made), about 1 s of a compile-fail case's 14 (7 of them loading the precompiled header).
    if(COMPILER_ID STREQUAL "GNU")
      string(APPEND command " -fsyntax-only")
    endif()
    execute_process(COMMAND sh -c "${command}" WORKING_DIRECTORY "${BUILD_DIR}"
                    RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE out)
  else()
    execute_process(COMMAND "${CMAKE_COMMAND}" --build "${BUILD_DIR}" --target "${PREREQUISITE}"
                    RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE out)
    if(NOT result EQUAL 0)
      message(FATAL_ERROR "${PREREQUISITE}, which ${TARGET} builds on, did not build:\n${out}")
    endif()
    execute_process(COMMAND "${CMAKE_COMMAND}" --build "${BUILD_DIR}" --target "${TARGET}"
                    RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE out)
  endif()
  set(${result_var} "${result}" PARENT_SCOPE)
  set(${output_var} "${out}" PARENT_SCOPE)
endfunction()
