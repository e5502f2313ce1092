# Compiles tests/flags/flag_probe.cpp with FLAGS (may be empty) and
# checks what happens:
#   EXPECT=refuse  the compiler stops with a "kvdecode refuses" #error, or the
#                  program stops before main with the run-time probe's message;
#   EXPECT=run     it builds and runs (the control: include paths and the probe
#                  itself are sound, so a refusal above is the flags' doing).
# Variables: CXX, SOURCE, INCLUDES (|-separated), FLAGS (space-separated), LIBS (link
# options, space-separated), EXPECT, WORK_DIR.
file(MAKE_DIRECTORY "${WORK_DIR}")
set(_exe "${WORK_DIR}/flag_probe")
file(REMOVE "${_exe}")
separate_arguments(FLAGS UNIX_COMMAND "${FLAGS}")
separate_arguments(LIBS UNIX_COMMAND "${LIBS}")
string(REPLACE "|" ";" INCLUDES "${INCLUDES}")
set(_inc)
foreach(_d ${INCLUDES})
  list(APPEND _inc "-I${_d}")
endforeach()
set(_build_rc 0)
if(EXPECT STREQUAL "refuse")
  # The #errors fire in the preprocessor: a quick first look.
  execute_process(COMMAND "${CXX}" -std=c++17 -O2 ${FLAGS} ${_inc} -E "${SOURCE}" -o "${WORK_DIR}/flag_probe.ii"
    RESULT_VARIABLE _build_rc OUTPUT_VARIABLE _build_out ERROR_VARIABLE _build_out)
endif()
if(_build_rc EQUAL 0)
  execute_process(
    COMMAND "${CXX}" -std=c++17 -O2 ${FLAGS} ${_inc} "${SOURCE}" -o "${_exe}" ${LIBS}
    RESULT_VARIABLE _build_rc OUTPUT_VARIABLE _build_out ERROR_VARIABLE _build_out)
endif()
if(_build_rc EQUAL 0)
  execute_process(COMMAND "${_exe}" RESULT_VARIABLE _run_rc OUTPUT_VARIABLE _run_out ERROR_VARIABLE _run_out)
endif()

if(EXPECT STREQUAL "run")
  if(NOT _build_rc EQUAL 0)
    message(FATAL_ERROR "control build with flags [${FLAGS}] failed:\n${_build_out}")
  endif()
  if(NOT _run_rc EQUAL 0 OR NOT _run_out MATCHES "keep their order: 1")
    message(FATAL_ERROR "control program with flags [${FLAGS}] did not run cleanly (exit ${_run_rc}):\n${_run_out}")
  endif()
  message(STATUS "flags [${FLAGS}]: builds and runs")
elseif(EXPECT STREQUAL "refuse")
  if(NOT _build_rc EQUAL 0)
    if(NOT _build_out MATCHES "kvdecode refuses")
      message(FATAL_ERROR "flags [${FLAGS}]: the build failed, but not with kvdecode's refusal:\n${_build_out}")
    endif()
    string(REGEX MATCH "kvdecode refuses[^\n\"]*" _why "${_build_out}")
    message(STATUS "flags [${FLAGS}]: refused at compile time: ${_why}")
  elseif(NOT _run_rc EQUAL 0 AND _run_out MATCHES "reorder floating-point sums")
    message(STATUS "flags [${FLAGS}]: compiled, refused at run time by the probe")
  else()
    message(FATAL_ERROR "flags [${FLAGS}] were accepted: the program built and ran (exit ${_run_rc}):\n${_run_out}")
  endif()
else()
  message(FATAL_ERROR "EXPECT must be refuse or run, not '${EXPECT}'")
endif()
