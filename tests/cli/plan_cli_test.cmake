# kvdecode-plan reading model files: the shape and the exact weight bytes of GGUF files
# and Hugging Face folders.
#   -DEXE=path/to/kvdecode-plan -DSHARED=path/to/shared -DWORK_DIR=scratch
file(MAKE_DIRECTORY ${WORK_DIR})
function(expect_rc want)
  execute_process(COMMAND ${EXE} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL want)
    message(FATAL_ERROR "kvdecode-plan ${ARGN}: exit ${rc}, expected ${want}\n${out}\n${err}")
  endif()
  set(OUT "${out}" PARENT_SCOPE)
  set(ERR "${err}" PARENT_SCOPE)
endfunction()
# The JSON object on the last line must hold each "key":value given as pairs.
function(expect_json)
  string(REGEX MATCH "[^\n]*\n?$" last "${OUT}")
  set(args ${ARGN})
  while(args)
    list(POP_FRONT args key value)
    string(FIND "${last}" "\"${key}\":${value}," at)
    if(at EQUAL -1)
      message(FATAL_ERROR "expected \"${key}\":${value} in: ${last}")
    endif()
  endwhile()
endfunction()

expect_rc(0 --help)
foreach(opt --model --layers --kv-heads --head-dim --swa-pattern --local-window --weight-dtype --dtype --tokens
            --memory-gb --gpu --bandwidth-gb-s --weights-gb --json --list-gpus)
  string(FIND "${OUT}" "${opt}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "--help does not mention ${opt}")
  endif()
endforeach()
string(FIND "${OUT}" "GGUF" at)
if(at EQUAL -1)
  message(FATAL_ERROR "--help does not say that --model reads GGUF files")
endif()
expect_rc(2 --bogus)
expect_rc(2 --layers 80 --kv-heads 8 --head-dim 128 --tokens 0 --memory-gb 80)

# The 70B-class example of docs/memory.md: 327,680 bytes per token in f16, 30 sequences.
expect_rc(0 --layers 80 --kv-heads 8 --head-dim 128 -c 8000 --memory-gb 80 --json)
expect_json(bytes_per_token 327680 max_sequences 30)
# Gemma 3 27B at 32k (docs/memory.md): 10 global layers keep 32,768 positions, 52 local
# ones a ring of 1024 + 64 - 1 positions in blocks of 16, plus one: 69 x 16 = 1,104;
# 8,192 bytes per layer-position in f16. Every position in every layer: 16,642,998,272.
expect_rc(0 --layers 62 --kv-heads 16 --head-dim 128 --swa-pattern 6 --local-window 1024 -c 32768 --memory-gb 80 --json)
expect_json(bytes_per_token 507904 bytes_per_sequence 3154640896 window_layers 52 window_positions 1104)
expect_rc(0 --layers 62 --kv-heads 16 --head-dim 128 -c 32768 --memory-gb 80 --json)
expect_json(bytes_per_sequence 16642998272 window_layers 0)
expect_rc(2 --layers 62 --kv-heads 16 --head-dim 128 --swa-pattern 6 -c 32768 --memory-gb 80)
expect_rc(2 --layers 62 --kv-heads 16 --head-dim 128 --local-window 1024 -c 32768 --memory-gb 80)

set(G ${SHARED}/models/gguf)
if(NOT EXISTS ${G}/stories260K-F32.gguf)
  message(STATUS "SKIP: ${G} is absent; only the argument checks ran")
  return()
endif()
# stories260K: D=64, 5 layers, 8 heads / 4 KV heads of 8, hidden 172, vocab 512, untied
# output in the GGUF. Parameters: 2 x 512 x 64 (token_embd, output) + 64 (output_norm)
# + 5 x (2 x 64 norms + 64x64 q + 2 x 32x64 k,v + 64x64 o + 3 x 172x64 ffn) = 292,800,
# of which 5 x 128 + 64 = 704 are norm weights.
expect_rc(0 --model ${G}/stories260K-F32.gguf --memory-gb 1 --json)
expect_json(n_layers 5 n_kv_heads 4 head_dim 8 bytes_per_token 640 weight_bytes 1171200)  # 292,800 x 4
# F16 matrices, f32 norms: 292,096 x 2 + 704 x 4.
expect_rc(0 -m ${G}/stories260K-F16.gguf --memory-gb 1 --json)
expect_json(weight_bytes 587008)
expect_rc(0 -m ${G}/stories260K-BF16.gguf --memory-gb 1 --json)
expect_json(weight_bytes 587008)
# The context length comes from the file when --tokens is absent.
string(REGEX MATCH "\"tokens_per_sequence\":([0-9]+)" _ "${OUT}")
if(CMAKE_MATCH_1 LESS 1)
  message(FATAL_ERROR "no tokens_per_sequence from the file's context_length: ${OUT}")
endif()
# --weight-dtype gives the bytes kvdecode-quantize would store, tensor by tensor: f32 gives
# the F32 file's bytes, and each scheme applied to rand256-F32 gives exactly the bytes of
# the file llama-quantize wrote with that scheme (same per-tensor types and block sizes).
expect_rc(0 -m ${G}/stories260K-F16.gguf --memory-gb 1 --weight-dtype f32 --json)
expect_json(weight_bytes 1171200)
foreach(scheme F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K_M Q4_K_M Q5_K_M Q6_K)
  expect_rc(0 -m ${G}/rand256-${scheme}.gguf --memory-gb 1 --json)
  string(REGEX MATCH "\"weight_bytes\":([0-9]+)" _ "${OUT}")
  set(file_bytes ${CMAKE_MATCH_1})
  expect_rc(0 -m ${G}/rand256-F32.gguf --memory-gb 1 --weight-dtype ${scheme} --json)
  expect_json(weight_bytes ${file_bytes})
endforeach()
expect_rc(2 -m ${G}/rand256-F32.gguf --memory-gb 1 --weight-dtype Q7_K)
string(FIND "${ERR}" "unknown quantization type 'Q7_K'" at)
if(at EQUAL -1)
  message(FATAL_ERROR "--weight-dtype Q7_K: the error does not name the value: ${ERR}")
endif()
# qwen2 with biases is read too; its shape comes from the file.
expect_rc(0 -m ${G}/qwen2arch-F32.gguf --memory-gb 1 --json)
expect_json(n_layers 2 n_kv_heads 2 head_dim 32)
# A quantized file: the exact bytes are less than a quarter of f32's... and not zero.
expect_rc(0 -m ${G}/rand256-Q4_K_M.gguf --memory-gb 1 --json)
string(REGEX MATCH "\"weight_bytes\":([0-9]+)" _ "${OUT}")
set(q4 ${CMAKE_MATCH_1})
expect_rc(0 -m ${G}/rand256-F32.gguf --memory-gb 1 --json)
string(REGEX MATCH "\"weight_bytes\":([0-9]+)" _ "${OUT}")
math(EXPR quarter "${CMAKE_MATCH_1} / 4")
if(q4 LESS 1 OR NOT q4 LESS quarter)
  message(FATAL_ERROR "Q4_K_M weight bytes ${q4} should be in (0, ${quarter})")
endif()

# Hugging Face folders are read through kvd::read_model_info like every format: the
# tied stories260K has 260,032 parameters, f32 in one file, bf16 over two shards.
set(HF ${SHARED}/models/hf)
if(EXISTS ${HF}/stories260K/config.json)
  expect_rc(0 -m ${HF}/stories260K --memory-gb 1 --json)
  expect_json(n_layers 5 n_kv_heads 4 head_dim 8 tokens_per_sequence 512 model_format "\"Hugging Face LlamaForCausalLM\""
              weight_bytes 1040128)
  expect_rc(0 -m ${HF}/stories260K-bf16-sharded --memory-gb 1 --json)
  expect_json(weight_bytes 520064)
  # A folder without config.json is exit status 1, naming it.
  file(MAKE_DIRECTORY ${WORK_DIR}/empty-folder)
  expect_rc(1 -m ${WORK_DIR}/empty-folder --memory-gb 1)
  string(FIND "${ERR}" "empty-folder' is a folder without config.json" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "an empty folder: the error does not name it: ${ERR}")
  endif()
endif()
# Shape options cannot be combined with a model; a damaged GGUF file is exit status 1.
expect_rc(2 -m ${G}/stories260K-F32.gguf --layers 3 --memory-gb 1)
# GGUF magic followed by a truncated header: refused by the reader, not a crash.
execute_process(COMMAND ${CMAKE_COMMAND} -E echo_append "GGUF" OUTPUT_FILE ${WORK_DIR}/truncated.gguf)
expect_rc(1 -m ${WORK_DIR}/truncated.gguf --memory-gb 1)
expect_rc(1 -m ${WORK_DIR}/does-not-exist.gguf --memory-gb 1)
message(STATUS "kvdecode-plan model-file checks passed")
