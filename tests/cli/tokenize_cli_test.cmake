# kvdecode-tokenize against llama.cpp's vocab reference files: every pairing's
# --cases output must equal its .out file byte for byte.
#   -DEXE=path/to/kvdecode-tokenize -DSHARED=path/to/shared
function(expect_rc want)
  execute_process(COMMAND ${EXE} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL want)
    message(FATAL_ERROR "kvdecode-tokenize ${ARGN}: exit ${rc}, expected ${want}\n${out}\n${err}")
  endif()
  set(OUT "${out}" PARENT_SCOPE)
endfunction()

expect_rc(0 --help)
foreach(opt --model --text --cases --pieces --no-bos --no-special --bench)
  string(FIND "${OUT}" "${opt}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "--help does not mention ${opt}")
  endif()
endforeach()
expect_rc(2 --no-such-option)
expect_rc(2 --model x)
expect_rc(1 --model ${SHARED}/does-not-exist --text hi)

set(REF ${SHARED}/reference/vocab)
if(NOT EXISTS ${REF})
  message(STATUS "SKIP: ${REF} is absent; only the argument checks ran")
  return()
endif()
# model (under models/) = reference case file (under reference/vocab/)
set(PAIRS
  "vocab/ggml-vocab-llama-spm.gguf=ggml-vocab-llama-spm.gguf"
  "vocab/ggml-vocab-gpt-2.gguf=ggml-vocab-gpt-2.gguf"
  "vocab/ggml-vocab-phi-3.gguf=ggml-vocab-phi-3.gguf"
  "vocab/vocab-llama3.gguf=ggml-vocab-llama-bpe.gguf"
  "vocab/vocab-qwen3.gguf=ggml-vocab-qwen2.gguf"
  "tokenizer-json/llama3=ggml-vocab-llama-bpe.gguf"
  "tokenizer-json/qwen3/tokenizer.json=ggml-vocab-qwen2.gguf"
  "tokenizer-json/mistral=mistral-tokenizer-json")
foreach(pair ${PAIRS})
  string(REPLACE "=" ";" parts "${pair}")
  list(GET parts 0 model)
  list(GET parts 1 ref)
  expect_rc(0 --model ${SHARED}/models/${model} --cases ${REF}/${ref}.inp)
  file(READ ${REF}/${ref}.out want)
  if(NOT OUT STREQUAL want)
    message(FATAL_ERROR "kvdecode-tokenize --model ${model} --cases ${ref}.inp differs from ${ref}.out")
  endif()
  message(STATUS "${model}: ${ref}.out reproduced")
endforeach()
