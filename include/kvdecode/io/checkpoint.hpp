// Checkpoint files: reading and writing llama2.c model files as ModelWeights<T>.
//
// Two float32 layouts are understood, both little-endian:
//   * legacy (export.py "v0"): a 28-byte header of 7 int32
//       dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len
//     where a negative vocab_size means "classifier stored separately at the end";
//     then token embedding, per-kind layer tensors, final norm, two RoPE tables
//     (seq_len x head_dim/2 each, ignored on load) and the optional classifier.
//   * v1 (export.py version1_export): uint32 magic "ak42" (0x616b3432), int32
//     version 1, the same 7 int32 (vocab_size always positive), a uint8
//     shared_classifier flag, zeros up to 256 bytes; then all norms first, the
//     embedding, per-kind layer tensors and the optional classifier. No RoPE tables.
// No legal legacy header can start with the magic (dim would exceed the 2^20
// limit of ModelConfig), so the first four bytes decide the format.
//
// A file is never trusted: the header is checked field by field, every size is
// computed in 64-bit arithmetic with overflow checks, the resulting ModelConfig
// is validated, and the file size must equal the size the header implies before
// a single tensor is allocated. So a corrupt or hostile file costs at most a
// 256-byte read and a FileError whose message names the path and the problem.
//
// Both formats fix rope_theta = 10000, norm_eps = 1e-5 and have no sliding
// window; head_dim is always dim / n_heads. Which tensors the files hold and in
// what order are lists of architecture.hpp's rows (kLlama2cLegacyOrder, kLlama2cV1Order).
#pragma once

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include "kvdecode/weights/architecture.hpp"
#include "kvdecode/io/bytes.hpp"
#include "kvdecode/io/file.hpp"
#include "kvdecode/core/config.hpp"
#include "kvdecode/core/exact_math.hpp"
#include "kvdecode/error.hpp"
#include "kvdecode/io/load_options.hpp"
#include "kvdecode/weights/model_weights.hpp"

namespace kvd {

/// Options for loading a checkpoint (load_options.hpp; the old name is kept). Only
/// max_seq_len applies: a checkpoint's tensors have no names, so none is unused.
using CheckpointLoadOptions = WeightLoadOptions;

/// The on-disk layouts load_checkpoint() and save_checkpoint() understand.
enum class CheckpointFormat {
  kLlama2cLegacy,  ///< llama2.c legacy / export.py v0: 28-byte header, RoPE tables, sign of vocab_size = shared flag
  kLlama2cV1,      ///< llama2.c export.py version1_export: 256-byte header with magic "ak42", float32 tensors
};

/// What a checkpoint's header says, after every check load_checkpoint() makes.
struct CheckpointInfo {
  CheckpointFormat format = CheckpointFormat::kLlama2cLegacy;
  ModelConfig config;              ///< validated; rope_theta 10000, norm_eps 1e-5, no sliding window
  std::uint64_t file_bytes = 0;    ///< size of the file, equal to what the header implies
  std::uint64_t weight_bytes = 0;  ///< float32 bytes of the weight tensors = 4 * config.n_params()
                                   ///< (no header, no RoPE tables); ModelWeights<T> needs n_params * sizeof(T)
};

/// "llama2.c legacy" or "llama2.c v1". Never fails.
inline const char* checkpoint_format_name(CheckpointFormat f) {
  switch (f) {
    case CheckpointFormat::kLlama2cLegacy: return "llama2.c legacy";
    case CheckpointFormat::kLlama2cV1: return "llama2.c v1";
  }
  return "?";
}

namespace detail {

inline constexpr std::uint32_t kCheckpointMagic = 0x616b3432;  // "ak42" read as a little-endian uint32
inline constexpr std::int32_t kCheckpointVersion = 1;
inline constexpr std::uint64_t kLegacyHeaderBytes = 7 * 4;
inline constexpr std::uint64_t kV1HeaderBytes = 256;
inline constexpr double kCheckpointRopeTheta = 10000.0;
inline constexpr double kCheckpointNormEps = 1e-5;
// Floats converted per chunk when T is not float (keeps the staging buffer at 64 KiB).
inline constexpr std::size_t kCheckpointChunkFloats = 16384;
// What a header may make the model and a default cache allocate in proportion to
// seq_len (RoPE tables + a float32 KV cache of max_seq_len positions): at most
// max(kCheckpointSeqBytesFileFactor x the file size, kCheckpointSeqBytesFloor).
// v1 files carry no RoPE tables, so nothing else bounds seq_len by the file size.
inline constexpr std::uint64_t kCheckpointSeqBytesFileFactor = 2;
inline constexpr std::uint64_t kCheckpointSeqBytesFloor = std::uint64_t{64} << 20;  // 64 MiB

/// Throws FileError("checkpoint '<path>': <parts...>").
template <class... Parts>
[[noreturn]] void checkpoint_fail(const std::string& path, Parts&&... parts) {
  throw FileError(msg("checkpoint '", path, "': ", std::forward<Parts>(parts)...));
}

/// Tensors are copied byte for byte between the file (little-endian float32) and
/// memory, so the host must be little-endian with IEEE binary32 floats. Checked at
/// run time rather than by static_assert so that merely including kvdecode.hpp
/// still compiles on other hosts; there, every checkpoint call throws FileError.
inline void require_little_endian(const std::string& path) {
  static_assert(std::numeric_limits<float>::is_iec559 && sizeof(float) == 4, "float must be IEEE binary32");
  if (!host_is_little_endian())
    checkpoint_fail(path, "llama2.c checkpoints are little-endian and this host is not (unsupported)");
}


/// The seven int32 fields both headers share, as stored (vocab_size may be negative in legacy files).
struct CheckpointHeader {
  CheckpointFormat format = CheckpointFormat::kLlama2cLegacy;
  std::int32_t dim = 0, hidden_dim = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0, vocab_size = 0, seq_len = 0;
  bool shared_classifier = true;
  std::uint64_t header_bytes = 0;
};

/// Counts of float32 values in a checkpoint, computed with overflow checks.
struct CheckpointSizes {
  std::uint64_t weight_floats = 0;  // all weight tensors (= ModelConfig::n_params())
  std::uint64_t rope_floats = 0;    // legacy only: 2 * seq_len * head_dim/2
  std::uint64_t file_bytes = 0;     // header + 4 * (weight_floats + rope_floats)
};

/// a * b and a + b on element/byte counts; throw FileError naming `what` on 64-bit overflow.
class CheckedCount {
 public:
  CheckedCount(const std::string& path, const CheckpointHeader& h) : path_(path), h_(h) {}
  std::uint64_t mul(std::uint64_t a, std::uint64_t b, const char* what) const {
    if (a != 0 && b > std::numeric_limits<std::uint64_t>::max() / a) overflow(what);
    return a * b;
  }
  std::uint64_t add(std::uint64_t a, std::uint64_t b, const char* what) const {
    if (b > std::numeric_limits<std::uint64_t>::max() - a) overflow(what);
    return a + b;
  }

 private:
  [[noreturn]] void overflow(const char* what) const {
    checkpoint_fail(path_, "header sizes overflow 64-bit arithmetic computing ", what, " (dim = ", h_.dim,
                    ", hidden_dim = ", h_.hidden_dim, ", n_layers = ", h_.n_layers, ", vocab_size = ", h_.vocab_size,
                    ", seq_len = ", h_.seq_len, "); the header is corrupt");
  }
  const std::string& path_;
  const CheckpointHeader& h_;
};

/// Checks the header fields one by one, then computes the file's expected size.
/// Throws FileError naming the path and the first bad field.
inline CheckpointSizes check_header_fields(const std::string& path, const CheckpointHeader& h) {
  auto positive = [&](const char* name, std::int32_t v) {
    if (v <= 0) checkpoint_fail(path, "header field ", name, " = ", v, " must be positive");
  };
  positive("dim", h.dim);
  positive("hidden_dim", h.hidden_dim);
  positive("n_layers", h.n_layers);
  positive("n_heads", h.n_heads);
  positive("n_kv_heads", h.n_kv_heads);
  positive("vocab_size", h.vocab_size);  // the caller has already folded a legacy sign into shared_classifier
  positive("seq_len", h.seq_len);
  if (h.dim % h.n_heads != 0)
    checkpoint_fail(path, "header field n_heads = ", h.n_heads, " does not divide dim = ", h.dim,
                    " (head_dim = dim / n_heads must be whole)");
  if (h.n_heads % h.n_kv_heads != 0)
    checkpoint_fail(path, "header field n_heads = ", h.n_heads, " is not a multiple of n_kv_heads = ", h.n_kv_heads);
  const std::uint64_t head_dim = static_cast<std::uint64_t>(h.dim / h.n_heads);
  if (head_dim % 2 != 0)
    checkpoint_fail(path, "head_dim = dim / n_heads = ", h.dim, " / ", h.n_heads, " = ", head_dim,
                    " must be even (RoPE rotates pairs)");

  // Every header value is below 2^31, so single products fit in 64 bits; sums of
  // products and the per-layer multiple may not, hence the checked arithmetic. The
  // tensors are the rows of the legacy order (v1 holds the same ones), their shapes
  // evaluated on the header's (not yet validated) dimensions.
  const CheckedCount c(path, h);
  ModelConfig dims;
  dims.d_model = h.dim;
  dims.hidden_dim = h.hidden_dim;
  dims.n_heads = h.n_heads;
  dims.n_kv_heads = h.n_kv_heads;
  dims.head_dim = h.dim / h.n_heads;
  dims.vocab_size = h.vocab_size;
  dims.shared_classifier = h.shared_classifier;
  const std::uint64_t L = h.n_layers, S = h.seq_len;
  std::uint64_t per_layer = 0, model = 0;
  for (TensorId id : kLlama2cLegacyOrder) {
    const TensorSpec& t = tensor_spec(id);
    if (!tensor_required(t, dims)) continue;  // the classifier when shared; the RoPE tables below
    const std::uint64_t n = c.mul(tensor_rows(t, dims), tensor_cols(t, dims), t.name);
    if (t.per_layer)
      per_layer = c.add(per_layer, n, "per-layer weights");
    else
      model = c.add(model, n, "total weights");
  }

  CheckpointSizes s;
  s.weight_floats = c.add(model, c.mul(L, per_layer, "n_layers x per-layer weights"), "total weights");
  if (h.format == CheckpointFormat::kLlama2cLegacy)  // freqs_cos and freqs_sin, each (S, Dh/2)
    s.rope_floats = c.mul(2, c.mul(S, head_dim / 2, "seq_len x head_dim/2"), "RoPE tables");
  const std::uint64_t floats = c.add(s.weight_floats, s.rope_floats, "total floats");
  s.file_bytes = c.add(h.header_bytes, c.mul(4, floats, "total float32 bytes"), "file size");
  return s;
}

/// The ModelConfig a validated header describes. Throws FileError (wrapping the
/// ConfigError, e.g. a dimension above ModelConfig's limits) naming the path.
inline ModelConfig config_from_header(const std::string& path, const CheckpointHeader& h) {
  ModelConfig c;
  c.vocab_size = h.vocab_size;
  c.d_model = h.dim;
  c.n_layers = h.n_layers;
  c.n_heads = h.n_heads;
  c.n_kv_heads = h.n_kv_heads;
  c.head_dim = h.dim / h.n_heads;
  c.hidden_dim = h.hidden_dim;
  c.max_seq_len = h.seq_len;
  c.rope_theta = kCheckpointRopeTheta;
  c.norm_eps = kCheckpointNormEps;
  c.shared_classifier = h.shared_classifier;
  c.sliding_window = 0;
  try {
    c.validate();
  } catch (const ConfigError& e) {
    checkpoint_fail(path, "header describes an invalid model: ", e.what());
  }
  return c;
}

/// Parses the first bytes of a file (`prefix`, min(file size, 256) bytes) into a header.
/// Throws FileError for an empty file, a short header, or an unknown version.
inline CheckpointHeader parse_header(const std::string& path, const unsigned char* prefix, std::uint64_t file_bytes) {
  if (file_bytes == 0)
    checkpoint_fail(path, "file is empty (0 bytes); a llama2.c checkpoint starts with a ", kLegacyHeaderBytes,
                    "-byte header");
  CheckpointHeader h;
  const unsigned char* fields = prefix;
  if (file_bytes >= 4 && load_u32_le(prefix) == kCheckpointMagic) {
    h.format = CheckpointFormat::kLlama2cV1;
    h.header_bytes = kV1HeaderBytes;
    if (file_bytes < kV1HeaderBytes)
      checkpoint_fail(path, "v1 header truncated: the file has ", file_bytes, " bytes, a v1 header needs ",
                      kV1HeaderBytes);
    const std::int32_t version = load_i32_le(prefix + 4);
    if (version != kCheckpointVersion)
      checkpoint_fail(path, "unsupported checkpoint version ", version, " (magic \"ak42\" found; kvdecode reads ",
                      "version ", kCheckpointVersion, " float32 files and legacy files; version 2 is llama2.c's ",
                      "int8 q8_0 export: re-export with export.py --version 1 or --version 0)");
    fields = prefix + 8;
  } else {
    h.format = CheckpointFormat::kLlama2cLegacy;
    h.header_bytes = kLegacyHeaderBytes;
    if (file_bytes < kLegacyHeaderBytes)
      checkpoint_fail(path, "header truncated: the file has ", file_bytes, " bytes, the legacy llama2.c header needs ",
                      kLegacyHeaderBytes, " (7 int32)");
  }
  h.dim = load_i32_le(fields + 0);
  h.hidden_dim = load_i32_le(fields + 4);
  h.n_layers = load_i32_le(fields + 8);
  h.n_heads = load_i32_le(fields + 12);
  h.n_kv_heads = load_i32_le(fields + 16);
  h.vocab_size = load_i32_le(fields + 20);
  h.seq_len = load_i32_le(fields + 24);
  if (h.format == CheckpointFormat::kLlama2cV1) {
    const unsigned flag = fields[28];
    if (flag > 1) checkpoint_fail(path, "v1 header flag shared_classifier = ", flag, " must be 0 or 1");
    h.shared_classifier = flag == 1;
  } else {
    // Legacy files hide the classifier flag in the sign of vocab_size. -INT32_MIN does
    // not fit in int32; report it as the out-of-range count it is.
    if (h.vocab_size == std::numeric_limits<std::int32_t>::min())
      checkpoint_fail(path, "header field vocab_size = ", h.vocab_size, " is out of range");
    h.shared_classifier = h.vocab_size > 0;
    if (h.vocab_size < 0) h.vocab_size = -h.vocab_size;
  }
  return h;
}

/// Refuses a header whose seq_len would make the model and a default cache take more
/// than max(2 x the file size, 64 MiB) (issue 12: a 266 KB v1 file with seq_len 2^20 made
/// the model take 545 MB and its cache 1 GB). Throws FileError naming seq_len, the bytes
/// it demands and the limit.
inline void check_seq_len_demand(const std::string& path, const CheckpointHeader& h, const CheckpointInfo& info,
                                 std::uint64_t file_bytes, int max_seq_len = 0) {
  const ModelConfig& c = info.config;
  // Every factor is below 2^21 (ModelConfig's bounds) except the product, so use checked arithmetic.
  const CheckedCount k(path, h);
  const int planned = max_seq_len > 0 && max_seq_len < c.max_seq_len ? max_seq_len : c.max_seq_len;
  const std::uint64_t S = static_cast<std::uint64_t>(planned);
  const std::uint64_t rope = k.mul(S, k.mul(static_cast<std::uint64_t>(c.head_dim), 4, "RoPE table bytes"),
                                   "RoPE table bytes");  // cos and sin, (S, Dh/2) each, float32
  const std::uint64_t per_pos = k.mul(2ull * static_cast<std::uint64_t>(c.n_layers),
                                      k.mul(static_cast<std::uint64_t>(c.kv_dim()), 4, "KV bytes"), "KV bytes");
  const std::uint64_t demand = k.add(rope, k.mul(S, per_pos, "KV cache bytes"), "seq_len bytes");
  const std::uint64_t limit =
      std::max(kCheckpointSeqBytesFloor, file_bytes > ~std::uint64_t{0} / kCheckpointSeqBytesFileFactor
                                             ? ~std::uint64_t{0}
                                             : kCheckpointSeqBytesFileFactor * file_bytes);
  if (demand > limit)
    checkpoint_fail(path, "header field seq_len = ", c.max_seq_len,
                    planned != c.max_seq_len ? msg(" (capped at ", planned, ")") : std::string(), " demands ", demand,
                    " bytes of RoPE tables and float32 KV cache (", per_pos, " bytes per position), more than ",
                    "the limit of ", limit, " bytes a ", file_bytes, "-byte ", checkpoint_format_name(h.format),
                    " file may demand (the larger of ", kCheckpointSeqBytesFileFactor, " x its size and ",
                    kCheckpointSeqBytesFloor, "); ",
                    h.format == CheckpointFormat::kLlama2cV1 ? "v1 files carry no RoPE tables, so seq_len is not "
                                                               "bounded by the file; "
                                                             : "",
                    "the header is corrupt or seq_len is larger than the model supports");
}

/// A checkpoint mapped and validated short of reading tensors.
struct OpenCheckpoint {
  CheckpointInfo info;
  MappedFile file;
  std::uint64_t header_bytes = 0;  // the tensors start here
};

/// Maps `path` and validates everything short of reading tensors. Throws FileError
/// naming the path and the problem; nothing beyond the first 256 bytes is touched and
/// nothing is allocated in proportion to the header's numbers.
inline OpenCheckpoint open_checkpoint(const std::string& path, int max_seq_len = 0) {
  require_little_endian(path);
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(fs::path(path), ec);
  if (st.type() == fs::file_type::not_found) checkpoint_fail(path, "file does not exist");
  if (ec) checkpoint_fail(path, "cannot inspect the file: ", ec.message());
  if (st.type() == fs::file_type::directory) checkpoint_fail(path, "is a directory, not a checkpoint file");
  if (st.type() != fs::file_type::regular) checkpoint_fail(path, "is not a regular file");

  OpenCheckpoint out;
  try {
    out.file = MappedFile::open(path);  // sized from the opened file, not the name
  } catch (const FileError& e) {
    checkpoint_fail(path, "cannot be opened for reading: ", e.what());
  }
  const std::uint64_t file_bytes = out.file.size();
  std::array<unsigned char, kV1HeaderBytes> prefix{};
  const std::uint64_t want = std::min<std::uint64_t>(file_bytes, prefix.size());
  if (want > 0) std::memcpy(prefix.data(), out.file.data(), static_cast<std::size_t>(want));

  const CheckpointHeader h = parse_header(path, prefix.data(), file_bytes);
  CheckpointInfo info;
  info.format = h.format;
  info.file_bytes = file_bytes;
  try {
    const CheckpointSizes sizes = check_header_fields(path, h);
    info.config = config_from_header(path, h);
    info.weight_bytes = 4 * sizes.weight_floats;
    if (file_bytes != sizes.file_bytes) {
      const bool short_file = file_bytes < sizes.file_bytes;
      checkpoint_fail(path, "size mismatch: the file has ", file_bytes, " bytes but its ",
                      checkpoint_format_name(h.format), " header (", info.config.summary(), ", ",
                      info.config.shared_classifier ? "shared" : "separate", " classifier) implies ", sizes.file_bytes,
                      " bytes; ",
                      short_file ? msg("the file is truncated (", sizes.file_bytes - file_bytes, " bytes missing)")
                                 : msg("the file has ", file_bytes - sizes.file_bytes, " extra bytes at the end"));
    }
  } catch (const FileError& e) {
    // A legacy "header" whose first four bytes are printable text is most likely not a
    // legacy checkpoint at all: a v1 file with a damaged magic, or a text/HTML file.
    // (A real legacy file starts with dim < 2^20, whose high byte is zero, so never gets this hint.)
    const bool texty =
        std::all_of(prefix.begin(), prefix.begin() + 4, [](unsigned char b) { return b >= 0x20 && b < 0x7f; });
    if (h.format == CheckpointFormat::kLlama2cLegacy && texty)
      throw FileError(msg(e.what(), " (read as a legacy header because the file does not start with the v1 magic ",
                          "\"ak42\"; its first bytes \"", std::string(prefix.begin(), prefix.begin() + 4),
                          "\" look like text: is this a damaged v1 file or not a checkpoint?)"));
    throw;
  }
  check_seq_len_demand(path, h, info, file_bytes, max_seq_len);
  out.info = info;
  out.header_bytes = h.header_bytes;
  return out;
}

/// Calls `tensor(name, layer, data, count)` for every weight tensor of `w` in the
/// on-disk order of `format` (layer = -1 for model-level tensors), and `rope()`
/// where the legacy format stores its two RoPE tables. `W` is ModelWeights<T>,
/// possibly const; the reader and the writer share this one order.
template <class W, class TensorFn, class RopeFn>
void visit_checkpoint_tensors(W& w, CheckpointFormat format, TensorFn&& tensor, RopeFn&& rope) {
  using T = typename std::remove_const_t<W>::Scalar;
  // A vector's values, or a dense matrix's (f32/f64 storage of T; asserted).
  auto values = [](auto& t) {
    using U = std::remove_reference_t<decltype(t)>;
    if constexpr (std::is_same_v<std::remove_const_t<U>, WeightMatrix>) {
      if constexpr (std::is_const_v<U>) return reinterpret_cast<const T*>(t.data());
      else return t.template mutable_dense<T>();
    } else {
      return t.data();
    }
  };
  auto count = [](const auto& t) { return static_cast<std::uint64_t>(t.rows()) * static_cast<std::uint64_t>(t.cols()); };
  auto visit = [&](const TensorSpec& s, int layer, auto slot) {
    if (slot.matrix)
      tensor(s.name, layer, values(*slot.matrix), count(*slot.matrix));
    else
      tensor(s.name, layer, values(*slot.vector), count(*slot.vector));
  };
  auto walk = [&](const auto& order) {
    for (TensorId id : order) {
      const TensorSpec& s = tensor_spec(id);
      if (id == TensorId::kRopeFreqs) {
        rope();  // the legacy format's freqs_cos and freqs_sin, 2 x (S, Dh/2)
      } else if (s.per_layer) {
        for (std::size_t l = 0; l < w.layers.size(); ++l) visit(s, static_cast<int>(l), tensor_slot(w.layers[l], id));
      } else if (tensor_required(s, w.config)) {
        visit(s, -1, tensor_slot(w, id, -1));
      }
    }
  };
  if (format == CheckpointFormat::kLlama2cLegacy)
    walk(kLlama2cLegacyOrder);
  else
    walk(kLlama2cV1Order);
}

/// ModelWeights with every tensor allocated to the shapes of `c` (contents unset).
template <class T>
ModelWeights<T> allocate_weights(const ModelConfig& c) {
  ModelWeights<T> w;
  w.config = c;
  constexpr WeightType dense = std::is_same_v<T, float> ? WeightType::kF32 : WeightType::kF64;
  w.layers.resize(static_cast<std::size_t>(c.n_layers));
  for_each_tensor_spec(c, [&](const TensorSpec& s, int layer) {
    if (s.presence == Presence::kIfStored) return;
    const long rows = static_cast<long>(tensor_rows(s, c)), cols = static_cast<long>(tensor_cols(s, c));
    const auto slot = tensor_slot(w, s.id, layer);
    if (slot.matrix)
      *slot.matrix = WeightMatrix::zeros(dense, rows, cols);
    else
      slot.vector->resize(rows);
  });
  return w;
}

/// Reads `count` float32 values at the cursor into `dst`, converting to T. Throws
/// FileError naming the tensor if the file holds fewer (the header check rules that out).
template <class T>
void read_f32(ByteCursor& in, const std::string& path, const char* name, int layer, T* dst, std::uint64_t count) {
  if (count > in.remaining() / 4)
    checkpoint_fail(path, "unexpected end of file while reading tensor ", name,
                    layer >= 0 ? msg("[layer ", layer, "]") : std::string());
  const unsigned char* src = in.bytes(count * 4, name);
  if constexpr (std::is_same_v<T, float>) {
    std::memcpy(dst, src, static_cast<std::size_t>(count * 4));
  } else {
    for (std::uint64_t i = 0; i < count; ++i) {
      float v;
      std::memcpy(&v, src + 4 * i, 4);
      dst[i] = static_cast<T>(v);
    }
  }
}

/// T -> float32, rounding to nearest even. IEEE conversion is defined for every
/// double: magnitudes beyond float's range become +-inf, NaN stays NaN.
template <class T>
float to_f32(T v) {
  return static_cast<float>(v);
}

/// Converts values to float32 and writes them in chunks. Stream failures stick in
/// `out`'s state; the caller checks it once after closing.
class F32Writer {
 public:
  explicit F32Writer(std::ostream& out) : out_(out), buf_(kCheckpointChunkFloats) {}
  template <class T>
  void write(const T* src, std::uint64_t count) {
    for (std::uint64_t done = 0; done < count;) {
      const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(count - done, buf_.size()));
      for (std::size_t i = 0; i < n; ++i) buf_[i] = to_f32(src[done + i]);
      out_.write(reinterpret_cast<const char*>(buf_.data()), static_cast<std::streamsize>(n * 4));
      done += n;
    }
  }
  /// llama2.c's freqs_cos then freqs_sin, each (S, Dh/2): angle pos * theta^(-2i/Dh).
  /// Computed in double and rounded, so the last bit may differ from PyTorch's
  /// float32 tables; no reader uses them (llama2.c and kvdecode recompute RoPE).
  void write_rope_tables(const ModelConfig& c) {
    const int half = c.head_dim / 2;
    std::vector<float> row(static_cast<std::size_t>(half));
    for (int table = 0; table < 2; ++table) {
      for (int pos = 0; pos < c.max_seq_len; ++pos) {
        for (int i = 0; i < half; ++i) {
          const double freq = 1.0 / detail::exact_pow(c.rope_theta, 2.0 * i / c.head_dim);
          const double angle = pos * freq;
          double sin_a = 0, cos_a = 0;
          detail::exact_sincos(angle, &sin_a, &cos_a);
          row[static_cast<std::size_t>(i)] = static_cast<float>(table == 0 ? cos_a : sin_a);
        }
        write(row.data(), row.size());
      }
    }
  }

 private:
  std::ostream& out_;
  std::vector<float> buf_;
};

/// Throws ConfigError if `c` cannot be stored faithfully in a llama2.c file, which
/// fixes head_dim = d_model / n_heads, rope_theta, norm_eps, has no sliding window
/// and holds only the tensors of kLlama2cLegacyOrder (no biases, no q/k norms).
inline void require_llama2c_representable(const ModelConfig& c) {
  auto fail = [](auto&&... parts) {
    throw ConfigError(msg("save_checkpoint: ", parts..., " cannot be stored in a llama2.c checkpoint"));
  };
  if (c.q_dim() != c.d_model)
    fail("n_heads x head_dim = ", c.n_heads, " x ", c.head_dim, " != d_model = ", c.d_model,
         " (the format derives head_dim = d_model / n_heads)");
  if (c.rope_theta != kCheckpointRopeTheta) fail("rope_theta = ", c.rope_theta, " (the format fixes 10000)");
  if (c.norm_eps != kCheckpointNormEps) fail("norm_eps = ", c.norm_eps, " (the format fixes 1e-5)");
  if (c.sliding_window != 0) fail("sliding_window = ", c.sliding_window, " (the format has no window)");
  for (const TensorSpec& s : kTensors) {
    bool stored = false;
    for (TensorId id : kLlama2cLegacyOrder) stored = stored || (id == s.id && id != TensorId::kRopeFreqs);
    if (tensor_required(s, c) && !stored)
      fail("tensor ", s.name, " (config.",
           s.presence == Presence::kQkvBias ? "qkv_bias = true"
           : s.presence == Presence::kMoe   ? msg("n_experts = ", c.n_experts)
                                            : std::string("qk_norm = true"),
           "; the format has no such tensor)");
  }
}

}  // namespace detail

/// Reads and validates a checkpoint's header without loading tensors.
/// Precondition: none (any path is accepted).
/// Result: the format, the validated ModelConfig, the file size and the float32 weight bytes.
/// Failure: FileError naming the path and the problem if the file is missing, not a
/// regular file, unreadable, has a short/unknown/inconsistent header, describes a
/// model ModelConfig::validate() rejects, or its size differs from what the header
/// implies, or its seq_len demands more memory than the file may (see
/// check_seq_len_demand). Touches at most 256 bytes of the mapped file; nothing is left open.
inline CheckpointInfo read_checkpoint_info(const std::string& path) { return detail::open_checkpoint(path).info; }

/// Loads a llama2.c checkpoint (legacy or v1, detected by the "ak42" magic) and
/// converts its float32 values to T.
/// Precondition: T is float or double.
/// Result: weights whose config is read_checkpoint_info(path).config, with
/// max_seq_len capped at options.max_seq_len when that is smaller, and whose
/// tensors hold the file's values (exactly, since float32 -> T is exact).
/// Failure: FileError as for read_checkpoint_info(), checked before any tensor is
/// allocated, or a read error / early end of file (file changed while loading),
/// naming the tensor. Nothing is returned and no state is left behind.
template <class T>
ModelWeights<T> load_checkpoint(const std::string& path, const CheckpointLoadOptions& options = {}) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "load_checkpoint<T>: T must be float or double");
  const detail::OpenCheckpoint file = detail::open_checkpoint(path, options.max_seq_len);
  const CheckpointInfo& info = file.info;
  detail::ByteCursor in(file.file);
  in.skip(file.header_bytes, "header");
  ModelWeights<T> w = detail::allocate_weights<T>(info.config);
  detail::visit_checkpoint_tensors(
      w, info.format,
      [&](const char* name, int layer, T* data, std::uint64_t count) {
        detail::read_f32(in, path, name, layer, data, count);
      },
      [&]() {
        // The RoPE tables are recomputed at run time; skip 2 x (S, Dh/2) floats.
        const std::uint64_t skip = 2ull * static_cast<std::uint64_t>(info.config.max_seq_len) *
                                   static_cast<std::uint64_t>(info.config.head_dim / 2) * 4;
        if (skip > in.remaining()) detail::checkpoint_fail(path, "cannot seek past the RoPE tables");
        in.skip(skip, "RoPE tables");
      });
  if (options.max_seq_len > 0 && options.max_seq_len < w.config.max_seq_len) w.config.max_seq_len = options.max_seq_len;
  return w;
}

/// Writes `w` as a float32 llama2.c checkpoint in format `fmt` (legacy: with
/// llama2.c's RoPE tables and the classifier flag in the sign of vocab_size;
/// v1: export.py's version1_export layout). double values are rounded to float32.
/// Precondition: w.validate() passes; w.config has n_heads * head_dim == d_model,
/// rope_theta 10000, norm_eps 1e-5 and sliding_window 0 (what the format can express).
/// Result: `path` holds the checkpoint; load_checkpoint(path) gives back w
/// (exactly for float, rounded to float32 for double).
/// Failure: ConfigError if the preconditions fail (nothing written); FileError naming
/// the path if it cannot be written or exists and is not a regular file. The file is
/// written beside `path` under a unique temporary name and renamed over it only when
/// complete and synced (detail::write_file_atomically), so on failure `path` is
/// untouched and no temporary file remains.
template <class T>
void save_checkpoint(const ModelWeights<T>& w, const std::string& path, CheckpointFormat fmt) {
  detail::require_little_endian(path);
  w.validate();
  const ModelConfig& c = w.config;
  detail::require_llama2c_representable(c);

  std::array<unsigned char, detail::kV1HeaderBytes> header{};  // zero padding included
  unsigned char* fields = header.data();
  std::size_t header_bytes = detail::kLegacyHeaderBytes;
  if (fmt == CheckpointFormat::kLlama2cV1) {
    detail::store_u32_le(header.data(), detail::kCheckpointMagic);
    detail::store_i32_le(header.data() + 4, detail::kCheckpointVersion);
    fields = header.data() + 8;
    fields[28] = c.shared_classifier ? 1 : 0;
    header_bytes = detail::kV1HeaderBytes;
  }
  // Legacy files flag a separate classifier by a negative vocab_size; v1 has a flag byte.
  const bool negate_vocab = fmt == CheckpointFormat::kLlama2cLegacy && !c.shared_classifier;
  const std::int32_t vocab = negate_vocab ? -c.vocab_size : c.vocab_size;
  const std::int32_t values[7] = {c.d_model, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, vocab, c.max_seq_len};
  for (int i = 0; i < 7; ++i) detail::store_i32_le(fields + 4 * i, values[i]);

  detail::write_file_atomically(path, [&](std::ostream& out) {
    out.write(reinterpret_cast<const char*>(header.data()), static_cast<std::streamsize>(header_bytes));
    detail::F32Writer writer(out);
    detail::visit_checkpoint_tensors(
        w, fmt, [&](const char*, int, const T* data, std::uint64_t count) { writer.write(data, count); },
        [&]() { writer.write_rope_tables(c); });
  });
}

}  // namespace kvd
