// GGUF files (llama.cpp's model format): a hardened reader and a writer.
//
// Layout (little-endian, versions 2 and 3; version 1 used u32 counts and is refused):
//   u32 magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
//   n_kv x  { string key | u32 value type | value }
//   n_tensors x { string name | u32 n_dims | u64 ne[n_dims] | u32 ggml type | u64 offset }
//   padding to general.alignment (default 32) | data section
// A string is a u64 length and that many bytes (no terminator); an array is a u32
// element type, a u64 count and the elements. ne[0] is the row length (the fastest
// dimension); a tensor's offset is relative to the data section.
//
// Files from the internet are hostile (llama.cpp's parser has had a series of heap
// overflows from counts, lengths and sizes taken on trust), so every number is
// checked before it is used: counts and lengths against the bytes that remain,
// before allocating; shapes with checked multiplication; tensors against the
// alignment, the end of the file and each other. Each rejection is a FormatError
// "<file>: <field> at offset <o>: <value and limit>".
// Arrays of arrays (allowed by the spec, used by no llama.cpp model) are refused.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kvdecode/io/file.hpp"
#include "kvdecode/error.hpp"
#include "kvdecode/weights/weight_type.hpp"

namespace kvd {

/// GGUF metadata value types. Frozen on-disk values (gguf.md `gguf_metadata_value_type`).
enum class GGUFType : std::uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

/// "u32", "string", "array", ... or "type<code>" for a code GGUF does not define. Never throws.
inline std::string gguf_type_name(GGUFType t) {
  static const char* const kNames[] = {"u8",  "i8",   "u16",    "i16",   "u32", "i32", "f32",
                                       "bool", "string", "array", "u64", "i64", "f64"};
  const auto c = static_cast<std::uint32_t>(t);
  return c < 13 ? std::string(kNames[c]) : "type" + std::to_string(c);
}

/// True for the integer types (u8..i64, not bool). Never throws.
inline bool gguf_type_is_integer(GGUFType t) {
  switch (t) {
    case GGUFType::kU8: case GGUFType::kI8: case GGUFType::kU16: case GGUFType::kI16:
    case GGUFType::kU32: case GGUFType::kI32: case GGUFType::kU64: case GGUFType::kI64: return true;
    default: return false;
  }
}
inline bool gguf_type_is_signed(GGUFType t) {
  return t == GGUFType::kI8 || t == GGUFType::kI16 || t == GGUFType::kI32 || t == GGUFType::kI64;
}

/// One metadata value. Scalars fill one of u (unsigned integers), i (signed integers),
/// f (f32/f64), b (bool), s (string). Arrays fill one of au (unsigned integers and
/// bools as 0/1), ai (signed integers), af (f32/f64), as (strings).
struct GGUFValue {
  GGUFType type = GGUFType::kU8;
  GGUFType elem_type = GGUFType::kU8;  ///< only for arrays
  std::uint64_t u = 0;
  std::int64_t i = 0;
  double f = 0;
  bool b = false;
  std::string s;
  std::vector<std::uint64_t> au;
  std::vector<std::int64_t> ai;
  std::vector<double> af;
  std::vector<std::string> as;
  std::uint64_t file_offset = 0;  ///< where the value starts in the file: its payload, after the u32 type code
                                  ///< (for arrays: the u32 element type)
  std::uint64_t key_offset = 0;   ///< where the key's string (its u64 length) starts

  /// Array length (1 for scalars).
  std::uint64_t size() const {
    if (type != GGUFType::kArray) return 1;
    return au.size() + ai.size() + af.size() + as.size();  // exactly one is non-empty
  }

  // Builders for the writer.
  static GGUFValue of_u32(std::uint32_t v) { GGUFValue x; x.type = GGUFType::kU32; x.u = v; return x; }
  static GGUFValue of_i32(std::int32_t v) { GGUFValue x; x.type = GGUFType::kI32; x.i = v; return x; }
  static GGUFValue of_u64(std::uint64_t v) { GGUFValue x; x.type = GGUFType::kU64; x.u = v; return x; }
  static GGUFValue of_i64(std::int64_t v) { GGUFValue x; x.type = GGUFType::kI64; x.i = v; return x; }
  static GGUFValue of_f32(float v) { GGUFValue x; x.type = GGUFType::kF32; x.f = v; return x; }
  static GGUFValue of_f64(double v) { GGUFValue x; x.type = GGUFType::kF64; x.f = v; return x; }
  static GGUFValue of_bool(bool v) { GGUFValue x; x.type = GGUFType::kBool; x.b = v; return x; }
  static GGUFValue of_string(std::string v) { GGUFValue x; x.type = GGUFType::kString; x.s = std::move(v); return x; }
  static GGUFValue of_array(GGUFType elem) { GGUFValue x; x.type = GGUFType::kArray; x.elem_type = elem; return x; }
};

/// One entry of the tensor table, checked.
struct GGUFTensorInfo {
  std::string name;
  WeightType type = WeightType::kF32;
  int n_dims = 0;
  std::uint64_t ne[4] = {1, 1, 1, 1};  ///< ne[0] = row length (fastest); unused dims are 1
  std::uint64_t offset = 0;       ///< relative to the data section, as stored
  std::uint64_t file_offset = 0;  ///< absolute
  std::uint64_t n_bytes = 0;      ///< exact bytes of the tensor
  std::uint64_t info_offset = 0;  ///< where this tensor's record (its name) starts in the tensor table
  std::uint64_t rows() const { return ne[1] * ne[2] * ne[3]; }  ///< checked at load not to overflow
  std::uint64_t n_elements() const { return ne[0] * rows(); }
  std::string shape_string() const {
    std::string s = "[";
    for (int d = 0; d < n_dims; ++d) s += (d ? "," : "") + std::to_string(ne[d]);
    return s + "]";
  }
};

namespace detail {
inline constexpr std::uint32_t kGGUFMagic = 0x46554747;  // "GGUF" read as a little-endian u32
inline constexpr std::uint32_t kGGUFDefaultAlignment = 32;
inline constexpr int kGGUFMaxDims = 4;
// Smallest encodings, used to bound counts by the bytes that remain.
inline constexpr std::uint64_t kGGUFMinKvBytes = 8 + 4 + 1;               // empty key, type, u8 value
inline constexpr std::uint64_t kGGUFMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8; // empty name, n_dims, ne[0], type, offset

/// Bytes of one scalar of type t in the file (0 for string/array, whose size varies).
inline std::uint64_t gguf_scalar_bytes(GGUFType t) {
  switch (t) {
    case GGUFType::kU8: case GGUFType::kI8: case GGUFType::kBool: return 1;
    case GGUFType::kU16: case GGUFType::kI16: return 2;
    case GGUFType::kU32: case GGUFType::kI32: case GGUFType::kF32: return 4;
    case GGUFType::kU64: case GGUFType::kI64: case GGUFType::kF64: return 8;
    default: return 0;
  }
}
inline bool gguf_type_known(std::uint32_t code) { return code <= 12; }
}  // namespace detail

/// A GGUF file, parsed and checked; tensor data stays in the mapping.
class GGUFFile {
 public:
  /// Maps and parses the file. Failure: FileError naming the path if it is missing or
  /// unreadable; FormatError naming the field, its offset, the value and the limit for a
  /// file that breaks the format (see the header comment for every rule).
  static GGUFFile open(const std::string& path) { return GGUFFile(detail::MappedFile::open(path)); }
  /// Parses bytes held in memory; `name` appears in error messages. Failure: FormatError as for open().
  static GGUFFile from_bytes(std::vector<unsigned char> bytes, std::string name) {
    return GGUFFile(detail::MappedFile::from_bytes(std::move(bytes), std::move(name)));
  }

  GGUFFile(GGUFFile&&) noexcept = default;
  GGUFFile& operator=(GGUFFile&&) noexcept = default;
  GGUFFile(const GGUFFile&) = delete;
  GGUFFile& operator=(const GGUFFile&) = delete;

  std::uint32_t version() const { return version_; }
  const std::string& path() const { return file_.path(); }
  std::uint64_t file_size() const { return file_.size(); }
  const std::vector<std::pair<std::string, GGUFValue>>& metadata() const { return kv_; }  ///< file order
  /// The value of `key`, or nullptr when absent. Never throws.
  const GGUFValue* find(const std::string& key) const {
    const auto it = kv_index_.find(key);
    return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
  }

  // Typed getters: FormatError naming the key (and its offset) when absent or of the wrong type.
  // Integer getters accept any integer type whose value fits; float getters accept f32/f64.

  /// The string value of `key`. FormatError if absent or not a string.
  std::string get_string(const std::string& key) const { return as_string(key, require(key)); }
  /// The integer value of `key` as u64. FormatError if absent, not an integer, or negative.
  std::uint64_t get_u64(const std::string& key) const { return as_uint(key, require(key), ~std::uint64_t{0}); }
  /// The integer value of `key` as u32. FormatError if absent, not an integer, or outside [0, 2^32).
  std::uint32_t get_u32(const std::string& key) const {
    return static_cast<std::uint32_t>(as_uint(key, require(key), std::numeric_limits<std::uint32_t>::max()));
  }
  /// The integer value of `key` as i64. FormatError if absent, not an integer, or above 2^63-1.
  std::int64_t get_i64(const std::string& key) const { return as_int(key, require(key)); }
  /// The f32/f64 value of `key`. FormatError if absent or not a float.
  double get_f64(const std::string& key) const { return as_float(key, require(key)); }
  /// The bool value of `key`. FormatError if absent or not a bool.
  bool get_bool(const std::string& key) const { return as_bool(key, require(key)); }

  // As above, but `def` when the key is absent (still FormatError on a wrong type).
  std::string get_string_or(const std::string& key, const std::string& def) const {
    const auto* v = find(key);
    return v ? as_string(key, *v) : def;
  }
  std::uint64_t get_u64_or(const std::string& key, std::uint64_t def) const {
    const auto* v = find(key);
    return v ? as_uint(key, *v, ~std::uint64_t{0}) : def;
  }
  std::uint32_t get_u32_or(const std::string& key, std::uint32_t def) const {
    const auto* v = find(key);
    return v ? static_cast<std::uint32_t>(as_uint(key, *v, std::numeric_limits<std::uint32_t>::max())) : def;
  }
  std::int64_t get_i64_or(const std::string& key, std::int64_t def) const {
    const auto* v = find(key);
    return v ? as_int(key, *v) : def;
  }
  double get_f64_or(const std::string& key, double def) const {
    const auto* v = find(key);
    return v ? as_float(key, *v) : def;
  }
  bool get_bool_or(const std::string& key, bool def) const {
    const auto* v = find(key);
    return v ? as_bool(key, *v) : def;
  }

  /// The array of strings at `key`. FormatError if absent or not an array of strings.
  const std::vector<std::string>& get_string_array(const std::string& key) const {
    const auto& v = require_array(key, "string");
    if (v.elem_type != GGUFType::kString) wrong_type(key, v, "array of string");
    return v.as;
  }
  /// The array of f32/f64 at `key`. FormatError if absent or not an array of floats.
  std::vector<double> get_f64_array(const std::string& key) const {
    const auto& v = require_array(key, "f32/f64");
    if (v.elem_type != GGUFType::kF32 && v.elem_type != GGUFType::kF64) wrong_type(key, v, "array of f32/f64");
    return v.af;
  }
  /// The array of integers at `key` as i64. FormatError if absent, not an array of integers,
  /// or holding an unsigned value above 2^63-1.
  std::vector<std::int64_t> get_i64_array(const std::string& key) const {
    const auto& v = require_array(key, "integer");
    if (!gguf_type_is_integer(v.elem_type)) wrong_type(key, v, "array of integers");
    if (gguf_type_is_signed(v.elem_type)) return v.ai;
    std::vector<std::int64_t> out;
    out.reserve(v.au.size());
    for (std::size_t k = 0; k < v.au.size(); ++k) {
      if (v.au[k] > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        throw FormatError(detail::msg(path(), ": key '", key, "' at offset ", v.file_offset, ": element ", k, " = ",
                                      v.au[k], " exceeds the i64 limit ", std::numeric_limits<std::int64_t>::max()));
      out.push_back(static_cast<std::int64_t>(v.au[k]));
    }
    return out;
  }

  const std::vector<GGUFTensorInfo>& tensors() const { return tensors_; }  ///< file order
  /// The tensor called `name`, or nullptr. Never throws.
  const GGUFTensorInfo* find_tensor(const std::string& name) const {
    const auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
  }
  /// The tensor's n_bytes bytes, in the mapping (valid while this object lives). Never throws.
  const unsigned char* tensor_data(const GGUFTensorInfo& t) const { return file_.data() + t.file_offset; }
  /// Tells the OS the tensor's pages are not needed soon (they stay readable). Never throws.
  void release(const GGUFTensorInfo& t) const { file_.release(t.file_offset, t.n_bytes); }
  std::uint64_t alignment() const { return alignment_; }
  std::uint64_t data_offset() const { return data_offset_; }
  const detail::MappedFile& file() const { return file_; }

  /// A human listing: version, counts, every key with a short value (long strings cut,
  /// arrays as their type, length and first elements), and with_tensors, every tensor's
  /// type, shape and bytes. Never throws beyond std::bad_alloc.
  std::string describe(bool with_tensors) const {
    std::ostringstream os;
    os << "GGUF v" << version_ << " '" << path() << "': " << kv_.size() << " keys, " << tensors_.size()
       << " tensors, alignment " << alignment_ << ", data at offset " << data_offset_ << ", " << file_.size()
       << " bytes\n";
    for (const auto& [key, v] : kv_) os << "  " << key << ": " << short_value(v) << "\n";
    if (with_tensors) {
      std::uint64_t total = 0;
      for (const auto& t : tensors_) {
        os << "  tensor " << t.name << " " << weight_type_name(t.type) << " " << t.shape_string() << " " << t.n_bytes
           << " bytes at offset " << t.file_offset << "\n";
        total += t.n_bytes;
      }
      os << "  " << tensors_.size() << " tensors, " << total << " bytes of tensor data\n";
    }
    return os.str();
  }

 private:
  explicit GGUFFile(detail::MappedFile f) : file_(std::move(f)) { parse(); }

  void parse() {
    detail::ByteCursor c(file_);
    const std::uint32_t magic = c.u32("magic");
    if (magic != detail::kGGUFMagic)
      c.fail_at(0, "magic", detail::msg("0x", hex(magic), " is not \"GGUF\" (0x", hex(detail::kGGUFMagic),
                                        "); not a GGUF file"));
    version_ = c.u32("version");
    if (version_ != 2 && version_ != 3) {
      std::string hint = version_ == 1 ? " (GGUF v1, with 32-bit counts, is obsolete: re-convert the model)" : "";
      if (version_ == 0x02000000u || version_ == 0x03000000u) hint = " (this looks like a big-endian GGUF file)";
      c.fail_at(4, "version", detail::msg(version_, " is not supported (this reader reads versions 2 and 3)", hint));
    }
    const std::uint64_t n_tensors = c.count_u64("tensor count", detail::kGGUFMinTensorInfoBytes);
    const std::uint64_t n_kv = c.count_u64("metadata key count", detail::kGGUFMinKvBytes);

    kv_.reserve(static_cast<std::size_t>(n_kv));
    for (std::uint64_t k = 0; k < n_kv; ++k) {
      const std::uint64_t key_at = c.offset();
      std::string key = c.string_u64("metadata key");
      if (kv_index_.count(key))
        c.fail_at(key_at, "metadata key", detail::msg("'", key, "' appears twice (first at offset ",
                                                      kv_[kv_index_[key]].second.key_offset, ")"));
      const std::string field = "key '" + key + "'";
      const std::uint64_t type_at = c.offset();
      const std::uint32_t code = c.u32(field + " value type");
      if (!detail::gguf_type_known(code))
        c.fail_at(type_at, field + " value type", detail::msg(code, " is not a GGUF value type (0..12)"));
      GGUFValue v;
      v.type = static_cast<GGUFType>(code);
      v.key_offset = key_at;
      v.file_offset = c.offset();
      read_value(c, v, field);
      kv_index_.emplace(key, kv_.size());
      kv_.emplace_back(std::move(key), std::move(v));
    }

    alignment_ = detail::kGGUFDefaultAlignment;
    if (const GGUFValue* a = find("general.alignment")) {
      if (a->type != GGUFType::kU32)
        c.fail_at(a->file_offset, "key 'general.alignment'",
                  detail::msg("has type ", gguf_type_name(a->type), ", expected u32"));
      if (a->u == 0 || (a->u & (a->u - 1)) != 0)
        c.fail_at(a->file_offset, "key 'general.alignment'",
                  detail::msg("value ", a->u, " is not a power of two (must be a nonzero power of two, default 32)"));
      alignment_ = a->u;
    }

    tensors_.reserve(static_cast<std::size_t>(n_tensors));
    for (std::uint64_t k = 0; k < n_tensors; ++k) tensors_.push_back(read_tensor_info(c));

    // The data section starts at the next multiple of the alignment.
    const std::uint64_t end_of_table = c.offset();
    const std::uint64_t pad = (alignment_ - end_of_table % alignment_) % alignment_;
    data_offset_ = detail::checked_add(end_of_table, pad, "GGUF data section offset");
    check_tensor_ranges();
  }

  void read_value(detail::ByteCursor& c, GGUFValue& v, const std::string& field) {
    if (v.type != GGUFType::kArray) {
      read_scalar(c, v.type, field, v.u, v.i, v.f, v.b, v.s);
      return;
    }
    const std::uint64_t elem_at = c.offset();
    const std::uint32_t code = c.u32(field + " array element type");
    if (!detail::gguf_type_known(code))
      c.fail_at(elem_at, field + " array element type", detail::msg(code, " is not a GGUF value type (0..12)"));
    v.elem_type = static_cast<GGUFType>(code);
    if (v.elem_type == GGUFType::kArray)
      c.fail_at(elem_at, field + " array element type",
                "9 (array): arrays of arrays are not supported (no llama.cpp model uses them)");
    const std::uint64_t min_bytes = v.elem_type == GGUFType::kString ? 8 : detail::gguf_scalar_bytes(v.elem_type);
    const std::uint64_t n = c.count_u64(field + " array count", min_bytes);
    const std::string elem = field + " array element";
    const auto sz = static_cast<std::size_t>(n);
    std::uint64_t u = 0;
    std::int64_t i = 0;
    double f = 0;
    bool b = false;
    std::string s;
    switch (v.elem_type) {
      case GGUFType::kString:
        v.as.reserve(sz);
        for (std::uint64_t k = 0; k < n; ++k) v.as.push_back(c.string_u64(elem));
        break;
      case GGUFType::kF32: case GGUFType::kF64:
        v.af.reserve(sz);
        for (std::uint64_t k = 0; k < n; ++k) { read_scalar(c, v.elem_type, elem, u, i, f, b, s); v.af.push_back(f); }
        break;
      case GGUFType::kI8: case GGUFType::kI16: case GGUFType::kI32: case GGUFType::kI64:
        v.ai.reserve(sz);
        for (std::uint64_t k = 0; k < n; ++k) { read_scalar(c, v.elem_type, elem, u, i, f, b, s); v.ai.push_back(i); }
        break;
      default:  // unsigned integers and bools
        v.au.reserve(sz);
        for (std::uint64_t k = 0; k < n; ++k) {
          read_scalar(c, v.elem_type, elem, u, i, f, b, s);
          v.au.push_back(v.elem_type == GGUFType::kBool ? std::uint64_t(b) : u);
        }
        break;
    }
  }

  static void read_scalar(detail::ByteCursor& c, GGUFType t, const std::string& field, std::uint64_t& u,
                          std::int64_t& i, double& f, bool& b, std::string& s) {
    switch (t) {
      case GGUFType::kU8: u = c.u8(field); break;
      case GGUFType::kI8: i = c.i8(field); break;
      case GGUFType::kU16: u = c.u16(field); break;
      case GGUFType::kI16: i = c.i16(field); break;
      case GGUFType::kU32: u = c.u32(field); break;
      case GGUFType::kI32: i = c.i32(field); break;
      case GGUFType::kU64: u = c.u64(field); break;
      case GGUFType::kI64: i = c.i64(field); break;
      case GGUFType::kF32: f = c.f32(field); break;
      case GGUFType::kF64: f = c.f64(field); break;
      case GGUFType::kBool: {
        const std::uint64_t at = c.offset();
        const std::uint8_t x = c.u8(field);
        if (x > 1) c.fail_at(at, field, detail::msg("bool value ", unsigned(x), " is not 0 or 1"));
        b = x == 1;
        break;
      }
      case GGUFType::kString: s = c.string_u64(field); break;
      case GGUFType::kArray: break;  // handled by read_value
    }
  }

  GGUFTensorInfo read_tensor_info(detail::ByteCursor& c) {
    GGUFTensorInfo t;
    t.info_offset = c.offset();
    t.name = c.string_u64("tensor name");
    if (tensor_index_.count(t.name))
      c.fail_at(t.info_offset, "tensor name", detail::msg("'", t.name, "' appears twice (first at offset ",
                                                          tensors_[tensor_index_[t.name]].info_offset, ")"));
    const std::string field = "tensor '" + t.name + "'";
    const std::uint64_t dims_at = c.offset();
    const std::uint32_t n_dims = c.u32(field + " n_dims");
    if (n_dims < 1 || n_dims > static_cast<std::uint32_t>(detail::kGGUFMaxDims))
      c.fail_at(dims_at, field + " n_dims", detail::msg(n_dims, " is outside 1..", detail::kGGUFMaxDims));
    t.n_dims = static_cast<int>(n_dims);
    std::uint64_t elements = 1;
    for (int d = 0; d < t.n_dims; ++d) {
      const std::uint64_t at = c.offset();
      const std::string f = field + " ne[" + std::to_string(d) + "]";
      const std::uint64_t ne = c.u64(f);
      if (ne == 0) c.fail_at(at, f, "dimension 0 (every dimension must be at least 1)");
      if (ne > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        c.fail_at(at, f, detail::msg("dimension ", ne, " is negative as ggml's int64 (limit ",
                                     std::numeric_limits<std::int64_t>::max(), ")"));
      if (elements > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) / ne)
        c.fail_at(at, f, detail::msg("dimension ", ne, " makes the element count ", elements, " * ", ne,
                                     " overflow the int64 limit ", std::numeric_limits<std::int64_t>::max()));
      elements *= ne;
      t.ne[d] = ne;
    }
    const std::uint64_t type_at = c.offset();
    const std::uint32_t code = c.u32(field + " type");
    if (!is_known_weight_type(code))
      c.fail_at(type_at, field + " type", detail::msg(code, " is not a ggml tensor type"));
    t.type = static_cast<WeightType>(code);
    const auto tr = weight_type_traits(t.type);
    if (t.ne[0] % tr.block_size != 0)
      c.fail_at(dims_at + 4, field + " ne[0]", detail::msg("row length ", t.ne[0], " is not a multiple of ", tr.name,
                                                           "'s block size ", tr.block_size));
    const std::uint64_t row_bytes = weight_row_bytes(t.type, t.ne[0]);
    if (row_bytes != 0 && t.rows() > std::numeric_limits<std::uint64_t>::max() / row_bytes)
      c.fail_at(dims_at, field + " shape", detail::msg(t.shape_string(), " of ", tr.name, " needs ", t.rows(),
                                                      " rows * ", row_bytes, " bytes, which overflows 64 bits"));
    t.n_bytes = row_bytes * t.rows();
    const std::uint64_t off_at = c.offset();
    t.offset = c.u64(field + " offset");
    if (t.offset % alignment_ != 0)
      c.fail_at(off_at, field + " offset", detail::msg(t.offset, " is not a multiple of the alignment ", alignment_));
    tensor_index_.emplace(t.name, tensors_.size());
    return t;
  }

  // Every tensor inside the file after the data section, and no two overlapping.
  void check_tensor_ranges() {
    const std::uint64_t size = file_.size();
    detail::ByteCursor c(file_);  // only for messages
    const std::uint64_t data_bytes = data_offset_ <= size ? size - data_offset_ : 0;
    for (auto& t : tensors_) {
      const std::uint64_t off_at = offset_field_at(t);
      const std::string field = "tensor '" + t.name + "' offset";
      if (t.offset > data_bytes)
        c.fail_at(off_at, field, detail::msg(t.offset, " is past the end of the data section (", data_bytes,
                                             " bytes from offset ", data_offset_, " to the end of the file)"));
      if (t.n_bytes > data_bytes - t.offset)
        c.fail_at(off_at, field, detail::msg(t.offset, " + the tensor's ", t.n_bytes, " bytes (", weight_type_name(t.type),
                                             " ", t.shape_string(), ") exceeds the data section's ", data_bytes, " bytes"));
      t.file_offset = data_offset_ + t.offset;
    }
    std::vector<const GGUFTensorInfo*> order;
    order.reserve(tensors_.size());
    for (const auto& t : tensors_) order.push_back(&t);
    std::sort(order.begin(), order.end(), [](const GGUFTensorInfo* a, const GGUFTensorInfo* b) {
      return a->offset != b->offset ? a->offset < b->offset : a->info_offset < b->info_offset;
    });
    for (std::size_t k = 1; k < order.size(); ++k) {
      const auto* prev = order[k - 1];
      const auto* cur = order[k];
      if (cur->offset < prev->offset + prev->n_bytes)  // no overflow: checked above to fit in the file
        c.fail_at(offset_field_at(*cur), "tensor '" + cur->name + "' offset",
                  detail::msg(cur->offset, " overlaps tensor '", prev->name, "' (bytes ", prev->offset, "..",
                              prev->offset + prev->n_bytes, " of the data section)"));
    }
  }

  // File offset of a tensor record's offset field: name (8 + len), n_dims (4), ne (8 each), type (4).
  static std::uint64_t offset_field_at(const GGUFTensorInfo& t) {
    return t.info_offset + 8 + t.name.size() + 4 + 8 * static_cast<std::uint64_t>(t.n_dims) + 4;
  }

  static std::string hex(std::uint32_t v) {
    std::ostringstream os;
    os << std::hex << v;
    return os.str();
  }

  const GGUFValue& require(const std::string& key) const {
    const GGUFValue* v = find(key);
    if (!v) throw FormatError(detail::msg(path(), ": key '", key, "' is missing"));
    return *v;
  }
  const GGUFValue& require_array(const std::string& key, const char* elem) const {
    const GGUFValue& v = require(key);
    if (v.type != GGUFType::kArray) wrong_type(key, v, std::string("array of ") + elem);
    return v;
  }
  [[noreturn]] void wrong_type(const std::string& key, const GGUFValue& v, const std::string& expected) const {
    const std::string got = v.type == GGUFType::kArray ? "array of " + gguf_type_name(v.elem_type) : gguf_type_name(v.type);
    throw FormatError(detail::msg(path(), ": key '", key, "' at offset ", v.file_offset, ": has type ", got,
                                  ", expected ", expected));
  }
  std::string as_string(const std::string& key, const GGUFValue& v) const {
    if (v.type != GGUFType::kString) wrong_type(key, v, "string");
    return v.s;
  }
  std::uint64_t as_uint(const std::string& key, const GGUFValue& v, std::uint64_t max) const {
    if (!gguf_type_is_integer(v.type)) wrong_type(key, v, "an integer");
    if (gguf_type_is_signed(v.type) ? (v.i < 0 || static_cast<std::uint64_t>(v.i) > max) : v.u > max) {
      const std::string val = gguf_type_is_signed(v.type) ? std::to_string(v.i) : std::to_string(v.u);
      throw FormatError(detail::msg(path(), ": key '", key, "' at offset ", v.file_offset, ": value ", val,
                                    " is outside [0, ", max, "]"));
    }
    return gguf_type_is_signed(v.type) ? static_cast<std::uint64_t>(v.i) : v.u;
  }
  std::int64_t as_int(const std::string& key, const GGUFValue& v) const {
    if (!gguf_type_is_integer(v.type)) wrong_type(key, v, "an integer");
    if (gguf_type_is_signed(v.type)) return v.i;
    if (v.u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      throw FormatError(detail::msg(path(), ": key '", key, "' at offset ", v.file_offset, ": value ", v.u,
                                    " exceeds the i64 limit ", std::numeric_limits<std::int64_t>::max()));
    return static_cast<std::int64_t>(v.u);
  }
  double as_float(const std::string& key, const GGUFValue& v) const {
    if (v.type != GGUFType::kF32 && v.type != GGUFType::kF64) wrong_type(key, v, "f32 or f64");
    return v.f;
  }
  bool as_bool(const std::string& key, const GGUFValue& v) const {
    if (v.type != GGUFType::kBool) wrong_type(key, v, "bool");
    return v.b;
  }

  static std::string short_string(const std::string& s, std::size_t max = 60) {
    std::string out = "\"";
    for (std::size_t k = 0; k < s.size() && k < max; ++k) {
      const unsigned char ch = static_cast<unsigned char>(s[k]);
      if (ch == '\n') out += "\\n";
      else if (ch == '"') out += "\\\"";
      else if (ch < 0x20) out += "\\x" + hex(ch);
      else out += static_cast<char>(ch);
    }
    out += "\"";
    if (s.size() > max) out += "... (" + std::to_string(s.size()) + " bytes)";
    return out;
  }
  static std::string fmt_double(double d) {
    std::ostringstream os;
    os.precision(9);
    os << d;
    return os.str();
  }
  static std::string short_value(const GGUFValue& v) {
    const std::string t = gguf_type_name(v.type);
    switch (v.type) {
      case GGUFType::kString: return "string = " + short_string(v.s);
      case GGUFType::kBool: return std::string("bool = ") + (v.b ? "true" : "false");
      case GGUFType::kF32: case GGUFType::kF64: return t + " = " + fmt_double(v.f);
      case GGUFType::kArray: break;
      default: return t + " = " + (gguf_type_is_signed(v.type) ? std::to_string(v.i) : std::to_string(v.u));
    }
    constexpr std::size_t kShow = 4;
    const std::uint64_t n = v.size();
    std::string out = "array<" + gguf_type_name(v.elem_type) + ">[" + std::to_string(n) + "] = [";
    for (std::size_t k = 0; k < n && k < kShow; ++k) {
      if (k) out += ", ";
      if (!v.as.empty()) out += short_string(v.as[k], 24);
      else if (!v.af.empty()) out += fmt_double(v.af[k]);
      else if (!v.ai.empty()) out += std::to_string(v.ai[k]);
      else out += std::to_string(v.au[k]);
    }
    if (n > kShow) out += ", ...";
    return out + "]";
  }

  detail::MappedFile file_;
  std::uint32_t version_ = 0;
  std::vector<std::pair<std::string, GGUFValue>> kv_;
  std::unordered_map<std::string, std::size_t> kv_index_;
  std::vector<GGUFTensorInfo> tensors_;
  std::unordered_map<std::string, std::size_t> tensor_index_;
  std::uint64_t alignment_ = detail::kGGUFDefaultAlignment;
  std::uint64_t data_offset_ = 0;
};

/// Writes GGUF v3 files (kvdecode-quantize, tests that craft files): keys in insertion
/// order (setting a key again replaces its value in place), tensors in insertion order,
/// each at the next multiple of the alignment, and the file padded to the alignment.
/// Given a llama.cpp file's keys and tensors, it writes that file byte for byte.
class GGUFWriter {
 public:
  /// Sets `key` to v. Throws ArgumentError for an array of arrays or an undefined type.
  void set(const std::string& key, GGUFValue v) {
    if (static_cast<std::uint32_t>(v.type) > 12 ||
        (v.type == GGUFType::kArray && (v.elem_type == GGUFType::kArray || static_cast<std::uint32_t>(v.elem_type) > 12)))
      throw ArgumentError(detail::msg("GGUFWriter: key '", key, "': unsupported value type ", gguf_type_name(v.type),
                                      " / element type ", gguf_type_name(v.elem_type)));
    for (auto& kv : kv_)
      if (kv.first == key) {
        kv.second = std::move(v);
        return;
      }
    kv_.emplace_back(key, std::move(v));
  }
  void set_u8(const std::string& key, std::uint8_t v) { GGUFValue x; x.type = GGUFType::kU8; x.u = v; set(key, x); }
  void set_u32(const std::string& key, std::uint32_t v) { set(key, GGUFValue::of_u32(v)); }
  void set_i32(const std::string& key, std::int32_t v) { set(key, GGUFValue::of_i32(v)); }
  void set_u64(const std::string& key, std::uint64_t v) { set(key, GGUFValue::of_u64(v)); }
  void set_i64(const std::string& key, std::int64_t v) { set(key, GGUFValue::of_i64(v)); }
  void set_f32(const std::string& key, float v) { set(key, GGUFValue::of_f32(v)); }
  void set_f64(const std::string& key, double v) { set(key, GGUFValue::of_f64(v)); }
  void set_bool(const std::string& key, bool v) { set(key, GGUFValue::of_bool(v)); }
  void set_string(const std::string& key, std::string v) { set(key, GGUFValue::of_string(std::move(v))); }
  void set_string_array(const std::string& key, std::vector<std::string> v) {
    auto x = GGUFValue::of_array(GGUFType::kString);
    x.as = std::move(v);
    set(key, std::move(x));
  }
  void set_f32_array(const std::string& key, const std::vector<float>& v) {
    auto x = GGUFValue::of_array(GGUFType::kF32);
    x.af.assign(v.begin(), v.end());
    set(key, std::move(x));
  }
  void set_i32_array(const std::string& key, const std::vector<std::int32_t>& v) {
    auto x = GGUFValue::of_array(GGUFType::kI32);
    x.ai.assign(v.begin(), v.end());
    set(key, std::move(x));
  }
  void set_u32_array(const std::string& key, const std::vector<std::uint32_t>& v) {
    auto x = GGUFValue::of_array(GGUFType::kU32);
    x.au.assign(v.begin(), v.end());
    set(key, std::move(x));
  }

  /// Adds a tensor, copying its n_bytes bytes. ne[0] is the row length.
  /// Throws ArgumentError (writer unchanged) for a duplicate name, 0 or more than 4 dims,
  /// a zero dim, a row length not a multiple of the block size, or n_bytes != the tensor's size.
  void add_tensor(const std::string& name, WeightType type, std::vector<std::uint64_t> ne, const void* data,
                  std::uint64_t n_bytes) {
    Tensor t = make_tensor(name, type, std::move(ne), n_bytes);
    const auto* p = static_cast<const unsigned char*>(data);
    t.owned.assign(p, p + n_bytes);
    t.data = t.owned.data();
    tensors_.push_back(std::move(t));
  }
  /// As add_tensor, without copying: `data` must stay valid until the last write()/bytes().
  void add_tensor_ref(const std::string& name, WeightType type, std::vector<std::uint64_t> ne, const void* data,
                      std::uint64_t n_bytes) {
    Tensor t = make_tensor(name, type, std::move(ne), n_bytes);
    t.data = static_cast<const unsigned char*>(data);
    tensors_.push_back(std::move(t));
  }

  /// Writes a GGUF v3 file. general.alignment is written when alignment != 32.
  /// Throws ArgumentError if alignment is not a power of two or conflicts with a
  /// general.alignment key set by hand; FileError naming the path if it cannot be written
  /// or exists and is not a regular file. The file is written beside `path` and renamed
  /// over it when complete (detail::write_file_atomically): on failure `path` is untouched.
  void write(const std::string& path, std::uint32_t alignment = 32) const {
    detail::write_file_atomically(path, [&](std::ostream& out) {
      emit(alignment, [&](const unsigned char* p, std::uint64_t n) {
        out.write(reinterpret_cast<const char*>(p), static_cast<std::streamsize>(n));
      });
    });
  }
  /// The file's bytes. Throws as write() does (no FileError).
  std::vector<unsigned char> bytes(std::uint32_t alignment = 32) const {
    std::vector<unsigned char> out;
    emit(alignment, [&](const unsigned char* p, std::uint64_t n) { out.insert(out.end(), p, p + n); });
    return out;
  }

 private:
  struct Tensor {
    std::string name;
    WeightType type;
    std::vector<std::uint64_t> ne;
    std::uint64_t n_bytes = 0;
    const unsigned char* data = nullptr;
    std::vector<unsigned char> owned;
  };

  Tensor make_tensor(const std::string& name, WeightType type, std::vector<std::uint64_t> ne, std::uint64_t n_bytes) const {
    for (const auto& t : tensors_)
      if (t.name == name) throw ArgumentError(detail::msg("GGUFWriter: tensor '", name, "' added twice"));
    if (ne.empty() || ne.size() > 4)
      throw ArgumentError(detail::msg("GGUFWriter: tensor '", name, "' has ", ne.size(), " dims (expected 1..4)"));
    std::uint64_t rows = 1;
    for (std::size_t d = 0; d < ne.size(); ++d) {
      if (ne[d] == 0) throw ArgumentError(detail::msg("GGUFWriter: tensor '", name, "' has ne[", d, "] = 0"));
      if (d > 0) rows = detail::checked_mul(rows, ne[d], "GGUFWriter tensor rows");
    }
    if (!is_known_weight_type(static_cast<std::uint32_t>(type)) || ne[0] % weight_type_traits(type).block_size != 0)
      throw ArgumentError(detail::msg("GGUFWriter: tensor '", name, "': row length ", ne[0], " does not suit type ",
                                      weight_type_name(type)));
    const std::uint64_t want = detail::checked_mul(weight_row_bytes(type, ne[0]), rows, "GGUFWriter tensor bytes");
    if (want != n_bytes)
      throw ArgumentError(detail::msg("GGUFWriter: tensor '", name, "' (", weight_type_name(type), ") needs ", want,
                                      " bytes, got ", n_bytes));
    Tensor t;
    t.name = name;
    t.type = type;
    t.ne = std::move(ne);
    t.n_bytes = n_bytes;
    return t;
  }

  template <class Sink>
  void emit(std::uint32_t alignment, Sink&& sink) const {
    if (alignment == 0 || (alignment & (alignment - 1)) != 0)
      throw ArgumentError(detail::msg("GGUFWriter: alignment ", alignment, " is not a power of two"));
    std::vector<std::pair<std::string, GGUFValue>> kv = kv_;
    bool have_alignment = false;
    for (const auto& [k, v] : kv)
      if (k == "general.alignment") {
        if (v.type != GGUFType::kU32 || v.u != alignment)
          throw ArgumentError(detail::msg("GGUFWriter: general.alignment was set to ", v.u, " but write() was given ",
                                          alignment));
        have_alignment = true;
      }
    if (!have_alignment && alignment != detail::kGGUFDefaultAlignment)
      kv.emplace_back("general.alignment", GGUFValue::of_u32(alignment));

    std::vector<unsigned char> head;
    auto put = [&](std::uint64_t v, int n) {
      for (int k = 0; k < n; ++k) head.push_back(static_cast<unsigned char>(v >> (8 * k)));
    };
    auto put_str = [&](const std::string& s) {
      put(s.size(), 8);
      head.insert(head.end(), s.begin(), s.end());
    };
    auto put_f = [&](GGUFType t, double f) {
      if (t == GGUFType::kF32) {
        const float x = static_cast<float>(f);
        std::uint32_t b;
        std::memcpy(&b, &x, 4);
        put(b, 4);
      } else {
        std::uint64_t b;
        std::memcpy(&b, &f, 8);
        put(b, 8);
      }
    };
    auto put_scalar = [&](GGUFType t, std::uint64_t u, std::int64_t i, double f, bool b, const std::string& s) {
      switch (t) {
        case GGUFType::kString: put_str(s); break;
        case GGUFType::kBool: put(b ? 1 : 0, 1); break;
        case GGUFType::kF32: case GGUFType::kF64: put_f(t, f); break;
        default: {
          const int n = static_cast<int>(detail::gguf_scalar_bytes(t));
          put(gguf_type_is_signed(t) ? static_cast<std::uint64_t>(i) : u, n);
        }
      }
    };

    put(detail::kGGUFMagic, 4);
    put(3, 4);
    put(tensors_.size(), 8);
    put(kv.size(), 8);
    for (const auto& [k, v] : kv) {
      put_str(k);
      put(static_cast<std::uint32_t>(v.type), 4);
      if (v.type != GGUFType::kArray) {
        put_scalar(v.type, v.u, v.i, v.f, v.b, v.s);
        continue;
      }
      put(static_cast<std::uint32_t>(v.elem_type), 4);
      put(v.size(), 8);
      for (const auto& s : v.as) put_scalar(GGUFType::kString, 0, 0, 0, false, s);
      for (double f : v.af) put_scalar(v.elem_type, 0, 0, f, false, "");
      for (std::int64_t i : v.ai) put_scalar(v.elem_type, 0, i, 0, false, "");
      for (std::uint64_t u : v.au) put_scalar(v.elem_type, u, 0, 0, u != 0, "");
    }
    std::uint64_t off = 0;
    std::vector<std::uint64_t> offsets;
    for (const auto& t : tensors_) {
      put_str(t.name);
      put(t.ne.size(), 4);
      for (std::uint64_t d : t.ne) put(d, 8);
      put(static_cast<std::uint32_t>(t.type), 4);
      put(off, 8);
      offsets.push_back(off);
      off = detail::checked_add(off, t.n_bytes, "GGUFWriter data size");
      off = detail::checked_add(off, (alignment - off % alignment) % alignment, "GGUFWriter data size");
    }
    head.resize(head.size() + (alignment - head.size() % alignment) % alignment, 0);
    sink(head.data(), head.size());
    const std::vector<unsigned char> zeros(alignment, 0);
    std::uint64_t at = 0;
    for (std::size_t k = 0; k < tensors_.size(); ++k) {
      sink(tensors_[k].data, tensors_[k].n_bytes);
      at = offsets[k] + tensors_[k].n_bytes;
      const std::uint64_t pad = (alignment - at % alignment) % alignment;
      if (pad) sink(zeros.data(), pad);  // after the last tensor too, as llama.cpp and gguf-py do
    }
  }

  std::vector<std::pair<std::string, GGUFValue>> kv_;
  std::vector<Tensor> tensors_;
};

/// True if the file at path starts with "GGUF". Never throws: false for a missing or unreadable file.
inline bool is_gguf_file(const std::string& path) {
  try {
    std::ifstream in(path, std::ios::binary);
    if (!in) return false;
    char m[4] = {};
    if (!in.read(m, 4)) return false;
    return std::memcmp(m, "GGUF", 4) == 0;
  } catch (...) {
    return false;
  }
}

}  // namespace kvd
