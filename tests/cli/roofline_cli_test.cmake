# kvdecode-roofline --quality-model reads a model of any format (kvd::read_model_info),
# Hugging Face folders included, and checks it before minutes of measuring.
#   -DEXE=path/to/kvdecode-roofline -DSHARED=path/to/shared -DWORK_DIR=scratch folder
function(expect_rc want)
  execute_process(COMMAND ${EXE} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL want)
    message(FATAL_ERROR "kvdecode-roofline ${ARGN}: exit ${rc}, expected ${want}\n${out}\n${err}")
  endif()
  set(OUT "${out}" PARENT_SCOPE)
  set(ERR "${err}" PARENT_SCOPE)
endfunction()
function(expect_in text what)
  string(FIND "${text}" "${what}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "expected '${what}' in:\n${text}")
  endif()
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR}/empty)
# A folder without config.json is no model: exit 1 naming it, before any measurement.
expect_rc(1 --weight-types Q8_0 --quality-model ${WORK_DIR}/empty --out-dir ${WORK_DIR}/out)
expect_in("${ERR}" "empty' is a folder without config.json")

set(HF ${SHARED}/models/hf/stories260K)
if(NOT EXISTS ${HF}/config.json)
  message(STATUS "SKIP: ${HF} is absent; only the empty-folder check ran")
  return()
endif()
# The shared folder with one change: max_position_embeddings 256, fewer than the 320
# positions the quality figures need. Refused with exit 2 after reading the folder.
file(READ ${HF}/config.json cfg)
string(REGEX REPLACE "\"max_position_embeddings\": *512" "\"max_position_embeddings\": 256" cfg "${cfg}")
file(MAKE_DIRECTORY ${WORK_DIR}/short)
file(WRITE ${WORK_DIR}/short/config.json "${cfg}")
file(CREATE_LINK ${HF}/model.safetensors ${WORK_DIR}/short/model.safetensors SYMBOLIC)
expect_rc(2 --weight-types Q8_0 --quality-model ${WORK_DIR}/short --out-dir ${WORK_DIR}/out)
expect_in("${ERR}" "(Hugging Face LlamaForCausalLM) holds 256 positions; the quality figures need 320")
file(REMOVE_RECURSE ${WORK_DIR})
message(STATUS "kvdecode-roofline --quality-model checks passed")
