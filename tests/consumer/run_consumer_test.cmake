# Builds and runs the consumer project in tests/consumer against kvdecode:
#   MODE=install       installs kvdecode into a scratch prefix and uses find_package(kvdecode)
#   MODE=subdirectory  uses add_subdirectory(<kvdecode source>)
# The consumer uses default compiler flags and no build type (no optimisation: it checks
# that a project finds, compiles and links kvdecode, which the release suite does not;
# unoptimised it builds in a quarter of a Release build's time), so it also exercises
# the portable (non-SIMD) kernels.
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "command failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
endfunction()
if(MODE STREQUAL "install")
  run(${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/lib-build -G ${GENERATOR}
      -DKVDECODE_BUILD_TESTS=OFF -DKVDECODE_BUILD_BENCHMARKS=OFF -DKVDECODE_BUILD_EXAMPLES=OFF
      -DCMAKE_INSTALL_PREFIX=${WORK_DIR}/prefix)
  run(${CMAKE_COMMAND} --install ${WORK_DIR}/lib-build)
  run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/consumer -B ${WORK_DIR}/app-build -G ${GENERATOR}
      -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DCMAKE_BUILD_TYPE=)
else()
  run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/consumer -B ${WORK_DIR}/app-build -G ${GENERATOR}
      -DKVDECODE_SOURCE=${SOURCE_DIR} -DCMAKE_BUILD_TYPE=)
endif()
run(${CMAKE_COMMAND} --build ${WORK_DIR}/app-build)
run(${WORK_DIR}/app-build/consumer)
run(${WORK_DIR}/app-build/consumer_core)
