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
foreach(opt --model --text --cases --pieces --no-bos --no-special --bench --render-chat --chat-template)
  string(FIND "${OUT}" "${opt}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "--help does not mention ${opt}")
  endif()
endforeach()
expect_rc(2 --no-such-option)
expect_rc(2 --model x)
expect_rc(1 --model ${SHARED}/does-not-exist --text hi)

expect_rc(2 --model x --chat-template chatml)
expect_rc(2 --model x --render-chat y --text z)

# --render-chat against @huggingface/jinja's renderings of the reference conversations,
# byte for byte, with the template from a GGUF, a folder, a tokenizer.json and a
# tokenizer_config.json.
set(CHAT ${SHARED}/reference/chat)
if(EXISTS ${CHAT})
  set(CHAT_PAIRS
    "vocab/vocab-llama3.gguf=llama3"
    "vocab/vocab-qwen3.gguf=qwen3"
    "tokenizer-json/llama3/tokenizer.json=llama3"
    "tokenizer-json/qwen3=qwen3"
    "tokenizer-json/qwen3/tokenizer_config.json=qwen3")
  foreach(pair ${CHAT_PAIRS})
    string(REPLACE "=" ";" parts "${pair}")
    list(GET parts 0 model)
    list(GET parts 1 ref)
    expect_rc(0 --model ${SHARED}/models/${model} --render-chat ${CHAT}/conversations.json)
    file(READ ${CHAT}/${ref}.json want)
    if(NOT OUT STREQUAL want)
      message(FATAL_ERROR "kvdecode-tokenize --model ${model} --render-chat differs from ${ref}.json:\n${OUT}")
    endif()
    message(STATUS "${model}: reference/chat/${ref}.json reproduced")
  endforeach()
  # Mistral's config has no template: exit 1 naming it; a built-in renders instead.
  expect_rc(1 --model ${SHARED}/models/tokenizer-json/mistral --render-chat ${CHAT}/conversations.json)
  expect_rc(0 --model ${SHARED}/models/tokenizer-json/mistral --render-chat ${CHAT}/conversations.json
            --chat-template mistral)
  string(FIND "${OUT}" "\"<s>[INST] Hello! [/INST]\"" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "--chat-template mistral: unexpected rendering\n${OUT}")
  endif()
  expect_rc(2 --model ${SHARED}/models/tokenizer-json/mistral --render-chat ${CHAT}/conversations.json
            --chat-template vicuna)
else()
  message(STATUS "SKIP: ${CHAT} is absent; --render-chat not compared")
endif()

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
