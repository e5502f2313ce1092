// kvdecode: header-only transformer decoding with an exact KV cache.
// Including this header brings in the whole library. The folders, bottom up
// (a header includes only its own folder and lower floors; docs/development.md):
//   core/      configuration, storage types, vectors, threads
//   weights/   weight types, blocks, weight matrices, a model's tensors
//   matmul/    the packed matrices and every product kernel;  io/  files and model readers
//   cache/     KV caches and their files;                     text/  tokenizers
//   model/     the transformer;  chat/  chat templates;       convert/  quantizer and vocabulary writer
//   generate/  sampling, generation, conversations;           load/  open_model
//   serve/     the OpenAI-compatible server's requests, scheduler and endpoints
#pragma once

#include "kvdecode/version.hpp"
#include "kvdecode/error.hpp"

#include "kvdecode/core/config.hpp"
#include "kvdecode/core/dtype.hpp"
#include "kvdecode/core/parallel.hpp"

#include "kvdecode/weights/weight_type.hpp"
#include "kvdecode/weights/architecture.hpp"
#include "kvdecode/weights/model_weights.hpp"

#include "kvdecode/matmul/matmul.hpp"
#include "kvdecode/matmul/build_info.hpp"

#include "kvdecode/io/load_options.hpp"
#include "kvdecode/io/checkpoint.hpp"
#include "kvdecode/io/gguf.hpp"
#include "kvdecode/io/gguf_model.hpp"
#include "kvdecode/io/safetensors.hpp"
#include "kvdecode/io/hf_model.hpp"
#include "kvdecode/io/model_format.hpp"

#include "kvdecode/cache/cache_interface.hpp"
#include "kvdecode/cache/kv_cache.hpp"
#include "kvdecode/cache/paged_cache.hpp"
#include "kvdecode/cache/cache_io.hpp"
#include "kvdecode/cache/planner.hpp"

#include "kvdecode/text/llama2c_tokenizer.hpp"
#include "kvdecode/text/text_tokenizer.hpp"
#include "kvdecode/text/bpe_tokenizer.hpp"
#include "kvdecode/text/tokenizer_json.hpp"
#include "kvdecode/text/tokenizer_gguf.hpp"
#include "kvdecode/text/tokenizer_loader.hpp"

#include "kvdecode/model/ops.hpp"
#include "kvdecode/model/workspace.hpp"
#include "kvdecode/model/hadamard.hpp"
#include "kvdecode/model/attention.hpp"
#include "kvdecode/model/mlp.hpp"
#include "kvdecode/model/moe.hpp"
#include "kvdecode/model/block.hpp"
#include "kvdecode/model/model.hpp"
#include "kvdecode/model/transformer.hpp"

#include "kvdecode/chat/chat_template.hpp"

#include "kvdecode/convert/vocab_writer.hpp"
#include "kvdecode/convert/quantize.hpp"

#include "kvdecode/generate/sampler.hpp"
#include "kvdecode/generate/generate.hpp"
#include "kvdecode/generate/conversation.hpp"
#include "kvdecode/generate/prompt_cache.hpp"
#include "kvdecode/generate/batcher.hpp"
#include "kvdecode/generate/speculative.hpp"

#include "kvdecode/load/model_loader.hpp"

#include "kvdecode/serve/request_error.hpp"
#include "kvdecode/serve/openai_request.hpp"
#include "kvdecode/serve/stop_strings.hpp"
#include "kvdecode/serve/scheduler.hpp"
#include "kvdecode/serve/metrics.hpp"
#include "kvdecode/serve/engine.hpp"
#include "kvdecode/serve/api.hpp"
