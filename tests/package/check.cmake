# Installs tp into a scratch prefix, then configures, builds and runs an outside project that
# finds it with find_package(tp).
file(REMOVE_RECURSE "${WORK_DIR}")
set(prefix "${WORK_DIR}/prefix")
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "failed: ${ARGN}\n${out}")
  endif()
endfunction()
run(${CMAKE_COMMAND} -S "${SOURCE_DIR}" -B "${WORK_DIR}/tp" -G "${GENERATOR}" -DCMAKE_INSTALL_PREFIX=${prefix}
    -DTP_BUILD_TESTS=OFF -DTP_BUILD_EXAMPLES=OFF -DTP_BUILD_BENCH=OFF)
run(${CMAKE_COMMAND} --build "${WORK_DIR}/tp")  # tp-run, the launcher, and tp-export
run(${CMAKE_COMMAND} --install "${WORK_DIR}/tp")
if(NOT EXISTS "${prefix}/include/tp/trainer.hpp")
  message(FATAL_ERROR "the install did not put the headers in ${prefix}/include")
endif()
foreach(tool tp-run tp-export)
  if(NOT EXISTS "${prefix}/bin/${tool}")
    message(FATAL_ERROR "the install did not put ${tool} in ${prefix}/bin")
  endif()
endforeach()
run(${CMAKE_COMMAND} -S "${SOURCE_DIR}/tests/package" -B "${WORK_DIR}/consumer" -G "${GENERATOR}"
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build "${WORK_DIR}/consumer")
run("${WORK_DIR}/consumer/consumer")
