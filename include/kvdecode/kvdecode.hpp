// kvdecode: header-only transformer decoding with an exact KV cache.
// Including this header brings in the whole library.
#pragma once

#include "kvdecode/version.hpp"
#include "kvdecode/error.hpp"
#include "kvdecode/dtype.hpp"
#include "kvdecode/config.hpp"
#include "kvdecode/weights.hpp"
#include "kvdecode/kernels.hpp"
#include "kvdecode/ops.hpp"
#include "kvdecode/kv_cache.hpp"
#include "kvdecode/workspace.hpp"
#include "kvdecode/attention.hpp"
#include "kvdecode/mlp.hpp"
#include "kvdecode/block.hpp"
#include "kvdecode/transformer.hpp"
#include "kvdecode/generate.hpp"
#include "kvdecode/checkpoint.hpp"
#include "kvdecode/tokenizer.hpp"
#include "kvdecode/sampler.hpp"
#include "kvdecode/batcher.hpp"
#include "kvdecode/planner.hpp"
