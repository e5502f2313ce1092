# Checks that every public header compiles on its own, as the first and only
# include of a file: a program may include any one of them (kvdecode/io/gguf.hpp,
# kvdecode/matmul/quant_kernels.hpp, ...) without the umbrella header, and the
# forwarding headers at the old flat paths too. The matmul headers that declare or
# define kernel instances are also compiled with KVDECODE_EXTERN_KERNELS.
# Variables: CXX, INCLUDES (|-separated; the first is the project's include/),
# FLAGS (space-separated), WORK_DIR; SHARD and SHARDS (optional) compile only the
# cases whose index is SHARD modulo SHARDS.
file(MAKE_DIRECTORY "${WORK_DIR}")
separate_arguments(FLAGS UNIX_COMMAND "${FLAGS}")
string(REPLACE "|" ";" INCLUDES "${INCLUDES}")
list(GET INCLUDES 0 _root)
set(_inc)
foreach(_d ${INCLUDES})
  list(APPEND _inc "-I${_d}")
endforeach()
file(GLOB_RECURSE _headers RELATIVE "${_root}" "${_root}/kvdecode/*.hpp")
list(SORT _headers)
set(_cases)
set(_forwarders 0)
foreach(_h ${_headers})
  # A forwarding header at a flat path of version 0.1 is checked, not compiled: it
  # includes exactly one header, which exists (that one is compiled on its own).
  file(READ "${_root}/${_h}" _text)
  if(_text MATCHES "^// Moved to <(kvdecode/[a-z0-9_/]+\\.hpp)>")
    set(_target ${CMAKE_MATCH_1})
    if(NOT EXISTS "${_root}/${_target}" OR NOT _text MATCHES "#include \"${_target}\"\n$")
      message(FATAL_ERROR "${_h} should forward to ${_target}, which must exist")
    endif()
    math(EXPR _forwarders "${_forwarders} + 1")
    continue()
  endif()
  if(_h STREQUAL "kvdecode/matmul/dispatch_level.hpp")  # a dispatch level's file: needs its id
    list(APPEND _cases "${_h}|-DKVDECODE_DISPATCH_LEVEL=x86_64_v3")
  else()
    list(APPEND _cases "${_h}|")
  endif()
endforeach()
if(CMAKE_HOST_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")  # a dispatch build's view of the kernels
  list(APPEND _cases "kvdecode/matmul/matmul.hpp|-DKVDECODE_DISPATCH" "kvdecode/matmul/build_info.hpp|-DKVDECODE_DISPATCH")
endif()
foreach(_h kvdecode/matmul/matmul.hpp kvdecode/matmul/dense_kernels.hpp kvdecode/matmul/quant_kernels.hpp
           kvdecode/matmul/quant_decode_avx512.hpp kvdecode/matmul/quant_decode_avx2.hpp kvdecode/matmul/quant_fused.hpp
           kvdecode/matmul/quant_matrix.hpp kvdecode/matmul/fast_int8.hpp kvdecode/matmul/fast_rows.hpp
           kvdecode/matmul/fast_tiles.hpp kvdecode/matmul/fast_tiles_512.hpp kvdecode/matmul/fast_planes.hpp
           kvdecode/matmul/fast_bf16.hpp
           kvdecode/matmul/instances_list.hpp)
  list(APPEND _cases "${_h}|-DKVDECODE_EXTERN_KERNELS")
endforeach()
list(LENGTH _cases _n)
if(_n LESS 20)
  message(FATAL_ERROR "found only ${_n} headers under ${_root}/kvdecode")
endif()
if(NOT DEFINED SHARDS)
  set(SHARDS 1)
  set(SHARD 0)
endif()
set(_failed "")
set(_i 0)
set(_compiled 0)
foreach(_case ${_cases})
  math(EXPR _i "${_i} + 1")
  math(EXPR _mine "(${_i} - 1) % ${SHARDS}")
  if(NOT _mine EQUAL SHARD)
    continue()
  endif()
  math(EXPR _compiled "${_compiled} + 1")
  string(REPLACE "|" ";" _parts "${_case}")
  list(GET _parts 0 _h)
  list(LENGTH _parts _np)
  set(_extra "")
  if(_np GREATER 1)
    list(GET _parts 1 _extra)
  endif()
  set(_src "${WORK_DIR}/header_${_i}.cpp")
  file(WRITE "${_src}" "#include \"${_h}\"\n")
  execute_process(COMMAND "${CXX}" -std=c++17 -fsyntax-only ${FLAGS} ${_extra} ${_inc} "${_src}"
    RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _out)
  if(NOT _rc EQUAL 0)
    string(REGEX MATCH "[^\n]*error:[^\n]*" _first "${_out}")
    string(APPEND _failed "  ${_h} ${_extra}: ${_first}\n")
  endif()
endforeach()
if(_failed)
  message(FATAL_ERROR "headers that do not compile on their own:\n${_failed}")
endif()
message(STATUS "${_compiled} of ${_n} header compilations (part ${SHARD} of ${SHARDS}), each header alone: all compile; "
               "${_forwarders} forwarding headers point to them")
