# Installs tp from the suite's own build folder (BUILD_DIR: its tools are built already) into a
# scratch prefix, then configures, builds and runs an outside project that finds it with
# find_package(tp).
file(REMOVE_RECURSE "${WORK_DIR}")
set(prefix "${WORK_DIR}/prefix")
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "failed: ${ARGN}\n${out}")
  endif()
endfunction()
run(${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${prefix}")
if(NOT EXISTS "${prefix}/include/tp/trainer.hpp")
  message(FATAL_ERROR "the install did not put the headers in ${prefix}/include")
endif()
foreach(tool tp-run tp-export)
  if(NOT EXISTS "${prefix}/bin/${tool}")
    message(FATAL_ERROR "the install did not put ${tool} in ${prefix}/bin")
  endif()
endforeach()
# Unoptimized: nothing is inlined away, so the link must find every function the headers use
# (the stricter check), and the four files build faster than at -O3.
# Through ccache where the machine has it, as tp's own build (base_dir: another clone hits too).
find_program(ccache ccache)
set(launcher)
if(ccache)
  set(launcher -DCMAKE_CXX_COMPILER_LAUNCHER=${ccache})
endif()
run(${CMAKE_COMMAND} -S "${SOURCE_DIR}/tests/package" -B "${WORK_DIR}/consumer" -G "${GENERATOR}"
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE= ${launcher})
run(${CMAKE_COMMAND} -E env CCACHE_BASEDIR=${SOURCE_DIR} ${CMAKE_COMMAND} --build "${WORK_DIR}/consumer")
foreach(mode consumer consumer_compiled)
  run("${WORK_DIR}/consumer/${mode}" "${WORK_DIR}")
endforeach()
