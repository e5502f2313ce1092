// safetensors files (Hugging Face's weight format) and model folders, read-only.
//
// Layout: u64 N (little-endian) | N bytes of JSON header | data section.
// The header is an object: "__metadata__" (optional, string -> string) and, per
// tensor, {"dtype": "F32", "shape": [rows, cols], "data_offsets": [begin, end]}
// with offsets relative to the data section. shape is outermost first (row-major:
// the last dimension is the row length), the reverse of GGUF's ne[].
//
// A file is hostile until checked: N is capped at 100 MB and must fit in the file;
// the JSON is parsed with nlohmann/json (a tensor named twice is refused, not
// silently overwritten); dtypes F32, F16 and BF16 are read as weights and U8 as
// bytes (gpt-oss's MXFP4 blocks and scales: hf_model.hpp), every other one is
// refused by name; a shape's element count is formed with checked arithmetic and
// must equal the byte range; ranges lie inside the data section, begin <= end, and,
// as the reference reader requires, tile it exactly (no overlap, no gap, no tail). Failures are FormatError "<file>: <field> at offset <o>: <what>"
// (offsets of JSON errors are byte positions in the file).
//
// A folder holds model.safetensors, or shards listed by model.safetensors.index.json's
// weight_map (tensor -> shard file). A missing shard, a shard name that is not a
// plain file name, or a tensor named twice is an error naming it.
// Tensor data stays in the mapping; 16-bit weights stay 16-bit. Data pointers may be
// unaligned (the header length N need not be a multiple of 4): read with memcpy.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvdecode/io/file.hpp"
#include "kvdecode/io/json.hpp"
#include "kvdecode/error.hpp"
#include "kvdecode/weights/weight_type.hpp"

namespace kvd {

/// One tensor of a safetensors file, checked.
struct SafetensorsTensor {
  std::string name;
  WeightType type = WeightType::kF32;  ///< kF32, kF16 or kBF16; kI8 for dtype U8 (bytes, no weights: see `bytes`)
  bool bytes = false;                  ///< dtype U8: raw bytes, which only MXFP4 blocks and scales may be
  std::vector<std::uint64_t> shape;    ///< outermost first; shape.back() is the row length; empty for a scalar
  const unsigned char* data = nullptr; ///< n_bytes bytes in the mapping (possibly unaligned)
  std::uint64_t n_bytes = 0;
  std::uint64_t n_elements = 0;        ///< product of shape (1 for a scalar)
  std::uint64_t file_offset = 0;       ///< absolute offset of the data in the file
  std::string file;                    ///< the file holding it
  std::uint64_t header_offset = 0;     ///< where its entry's name appears in the JSON header (for messages)
  /// Elements per row: shape.back() (1 for a scalar).
  std::uint64_t row_length() const { return shape.empty() ? 1 : shape.back(); }
  /// Rows: n_elements / row_length (0 for an empty tensor).
  std::uint64_t rows() const { return row_length() ? n_elements / row_length() : 0; }
  std::string shape_string() const {
    std::string s = "[";
    for (std::size_t d = 0; d < shape.size(); ++d) s += (d ? "," : "") + std::to_string(shape[d]);
    return s + "]";
  }
};

namespace detail {
inline constexpr std::uint64_t kSafetensorsMaxHeader = 100'000'000;  // the format's own 100 MB cap

/// The dtypes safetensors defines ("F32" ...) -> bytes per element; 0 if unknown.
inline std::uint64_t safetensors_dtype_bytes(const std::string& d) {
  static const std::map<std::string, std::uint64_t> kSizes = {
      {"BOOL", 1}, {"U8", 1}, {"I8", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},
      {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4}, {"I64", 8}, {"U64", 8}, {"F64", 8}};
  const auto it = kSizes.find(d);
  return it == kSizes.end() ? 0 : it->second;
}

/// Parses JSON text; on a syntax error throws FormatError naming `what` and the byte
/// position (file offset = base + position). A key appearing twice in the object at
/// depth 1 (or, with `dup_parent`, in the object under that top-level key) is refused.
inline nlohmann::json parse_json_checked(const char* begin, const char* end, const std::string& file,
                                         std::uint64_t base, const char* what, const char* dup_parent = nullptr) {
  // Duplicates are found by a SAX pass, then the tree is built by a plain parse:
  // nlohmann's callback parser scans the parent object at the end of every
  // object, which made a header of 20,000 tensors take 39 s.
  struct DuplicateKeys : nlohmann::json_sax<nlohmann::json> {
    const std::string& file;
    const char* what;
    const char* dup_parent;
    int depth = 0;
    std::set<std::string> top, inner;
    std::string current_top;
    DuplicateKeys(const std::string& f, const char* w, const char* d) : file(f), what(w), dup_parent(d) {}
    bool null() override { return true; }
    bool boolean(bool) override { return true; }
    bool number_integer(number_integer_t) override { return true; }
    bool number_unsigned(number_unsigned_t) override { return true; }
    bool number_float(number_float_t, const string_t&) override { return true; }
    bool string(string_t&) override { return true; }
    bool binary(binary_t&) override { return true; }
    bool start_object(std::size_t) override { return ++depth, true; }
    bool end_object() override { return --depth, true; }
    bool start_array(std::size_t) override { return ++depth, true; }
    bool end_array() override { return --depth, true; }
    bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }
    bool key(string_t& key) override {
      if (depth == 1) {
        current_top = key;
        if (!top.insert(key).second) throw FormatError(msg(file, ": ", what, ": key '", key, "' appears twice"));
      } else if (depth == 2 && dup_parent && current_top == dup_parent) {
        if (!inner.insert(key).second)
          throw FormatError(msg(file, ": ", what, ": ", dup_parent, " names '", key, "' twice"));
      }
      return true;
    }
  };
  DuplicateKeys keys(file, what, dup_parent);
  try {
    nlohmann::json::sax_parse(begin, end, &keys);  // iterative: any depth; FormatError on a repeated key
  } catch (const nlohmann::json::exception&) {
    // a syntax error: parse_json_text() below reports it with its offset
  }
  return parse_json_text(begin, end, msg(file, ": ", what), JsonLimits{kSafetensorsMaxHeader}, base);
}
}  // namespace detail

/// One safetensors file, mapped and checked.
class SafetensorsFile {
 public:
  /// Maps and checks the file. Failure: FileError naming the path if it is missing or
  /// unreadable; FormatError naming the field, offset, value and limit for a file that
  /// breaks the format (see the header comment).
  static SafetensorsFile open(const std::string& path) { return SafetensorsFile(detail::MappedFile::open(path)); }
  /// Checks bytes held in memory; `name` appears in messages. Failure: FormatError as for open().
  static SafetensorsFile from_bytes(std::vector<unsigned char> bytes, std::string name) {
    return SafetensorsFile(detail::MappedFile::from_bytes(std::move(bytes), std::move(name)));
  }
  SafetensorsFile(SafetensorsFile&&) noexcept = default;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept = default;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return file_.path(); }
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }  ///< in data order
  /// The tensor called `name`, or nullptr. Never throws.
  const SafetensorsTensor* find(const std::string& name) const {
    const auto it = index_.find(name);
    return it == index_.end() ? nullptr : &tensors_[it->second];
  }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }  ///< "__metadata__"
  std::uint64_t header_bytes() const { return header_bytes_; }
  std::uint64_t data_offset() const { return 8 + header_bytes_; }
  /// Tells the OS a tensor's pages are not needed soon (they stay readable). Never throws.
  void release(const SafetensorsTensor& t) const { file_.release(t.file_offset, t.n_bytes); }

 private:
  explicit SafetensorsFile(detail::MappedFile f) : file_(std::move(f)) { parse(); }

  void parse() {
    detail::ByteCursor c(file_);
    const std::uint64_t n = c.u64("header length");
    if (n > detail::kSafetensorsMaxHeader)
      c.fail_at(0, "header length", detail::msg(n, " exceeds the format's limit of ", detail::kSafetensorsMaxHeader,
                                                " bytes"));
    if (n > c.remaining())
      c.fail_at(0, "header length", detail::msg(n, " exceeds the ", c.remaining(), " bytes after it"));
    if (n < 2) c.fail_at(0, "header length", detail::msg(n, " is too short for a JSON object"));
    header_bytes_ = n;
    const auto* text = reinterpret_cast<const char*>(c.bytes(n, "header"));
    if (text[0] != '{') c.fail_at(8, "header", "does not start with '{' (not a safetensors file)");
    const nlohmann::json h = detail::parse_json_checked(text, text + n, path(), 8, "header");
    if (!h.is_object()) c.fail_at(8, "header", "is not a JSON object");
    const std::uint64_t data_bytes = c.remaining();
    const std::uint64_t base = c.offset();
    const std::unordered_map<std::string, std::uint64_t> key_at = top_level_keys(text, static_cast<std::size_t>(n));

    for (auto it = h.begin(); it != h.end(); ++it) {
      const std::string& name = it.key();
      const auto& v = it.value();
      if (name == "__metadata__") {
        if (!v.is_object()) c.fail_at(8, "header __metadata__", "is not an object of strings");
        for (auto m = v.begin(); m != v.end(); ++m) {
          if (!m.value().is_string())
            c.fail_at(8, "header __metadata__", detail::msg("value of '", m.key(), "' is not a string"));
          metadata_[m.key()] = m.value().get<std::string>();
        }
        continue;
      }
      // The entry's position, for messages: where its quoted name appears in the header.
      const auto pos = key_at.find(name);
      const std::uint64_t at = 8 + (pos == key_at.end() ? 0 : pos->second);
      tensors_.push_back(read_entry(c, name, v, data_bytes, base, at));
    }
    std::sort(tensors_.begin(), tensors_.end(), [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
      return a.file_offset != b.file_offset ? a.file_offset < b.file_offset : a.n_bytes < b.n_bytes;
    });
    // As the reference reader requires: sorted by offset, the tensors tile the data
    // section exactly (no overlap, no gap, nothing after the last one).
    std::uint64_t end = 0;  // relative to the data section
    for (std::size_t k = 0; k < tensors_.size(); ++k) {
      const auto& cur = tensors_[k];
      const std::uint64_t begin = cur.file_offset - base;
      const std::string field = "tensor '" + cur.name + "' data_offsets";
      if (k > 0 && begin < end) {
        const auto& prev = tensors_[k - 1];
        c.fail_at(cur.header_offset, field,
                  detail::msg("[", begin, ", ", begin + cur.n_bytes, ") overlaps tensor '", prev.name, "' [",
                              prev.file_offset - base, ", ", end, ")"));
      }
      if (begin > end)
        c.fail_at(cur.header_offset, field,
                  detail::msg("[", begin, ", ", begin + cur.n_bytes, ") leaves bytes [", end, ", ", begin,
                              ") of the data section unused (tensors must tile the data section)"));
      end = begin + cur.n_bytes;
    }
    if (end != data_bytes)
      c.fail_at(base + end, "data section",
                detail::msg(data_bytes - end, " bytes after the last tensor (tensors end at ", end, " of ",
                            data_bytes, " data bytes; they must tile the data section)"));
    for (std::size_t k = 0; k < tensors_.size(); ++k) index_.emplace(tensors_[k].name, k);
  }

  SafetensorsTensor read_entry(const detail::ByteCursor& c, const std::string& name, const nlohmann::json& v,
                               std::uint64_t data_bytes, std::uint64_t base, std::uint64_t at) const {
    const std::string field = "tensor '" + name + "'";
    if (!v.is_object()) c.fail_at(at, field, "is not a JSON object");
    SafetensorsTensor t;
    t.name = name;
    t.file = path();
    t.header_offset = at;
    // dtype
    const auto d = v.find("dtype");
    if (d == v.end() || !d->is_string()) c.fail_at(at, field + " dtype", "is missing or not a string");
    const std::string dtype = d->get<std::string>();
    if (dtype == "F32") t.type = WeightType::kF32;
    else if (dtype == "F16") t.type = WeightType::kF16;
    else if (dtype == "BF16") t.type = WeightType::kBF16;
    else if (dtype == "U8") t.type = WeightType::kI8, t.bytes = true;
    else if (detail::safetensors_dtype_bytes(dtype) != 0)
      c.fail_at(at, field + " dtype", detail::msg("'", dtype, "' is not supported (kvdecode reads F32, F16, BF16 and U8)"));
    else
      c.fail_at(at, field + " dtype", detail::msg("'", dtype, "' is not a safetensors dtype"));
    const std::uint64_t elem = detail::safetensors_dtype_bytes(dtype);
    // shape
    const auto s = v.find("shape");
    if (s == v.end() || !s->is_array()) c.fail_at(at, field + " shape", "is missing or not an array");
    std::uint64_t count = 1;
    for (const auto& dim : *s) {
      if (!dim.is_number_unsigned() && !(dim.is_number_integer() && dim.get<std::int64_t>() >= 0))
        c.fail_at(at, field + " shape", detail::msg(detail::json_value_text(dim), " is not a non-negative integer"));
      const std::uint64_t x = dim.get<std::uint64_t>();
      if (x != 0 && count > std::numeric_limits<std::uint64_t>::max() / x) {
        std::string dims = "[";  // the dimensions read so far, never a dump of the file's value
        for (const std::uint64_t d : t.shape) dims += detail::msg(d, ",");
        dims += detail::msg(x, t.shape.size() + 1 < s->size() ? ",...]" : "]");
        c.fail_at(at, field + " shape", detail::msg(dims, ": the element count overflows 64 bits at dimension ", x));
      }
      count *= x;
      t.shape.push_back(x);
    }
    t.n_elements = count;
    // data_offsets
    const auto o = v.find("data_offsets");
    if (o == v.end() || !o->is_array() || o->size() != 2 || !(*o)[0].is_number_unsigned() ||
        !(*o)[1].is_number_unsigned())
      c.fail_at(at, field + " data_offsets", "is missing or not a pair of non-negative integers");
    const std::uint64_t begin = (*o)[0].get<std::uint64_t>(), end = (*o)[1].get<std::uint64_t>();
    if (begin > end)
      c.fail_at(at, field + " data_offsets", detail::msg("[", begin, ", ", end, "] has begin after end"));
    if (end > data_bytes)
      c.fail_at(at, field + " data_offsets", detail::msg("end ", end, " is past the data section's ", data_bytes,
                                                       " bytes (data starts at offset ", base, ")"));
    if (count > std::numeric_limits<std::uint64_t>::max() / elem || count * elem != end - begin)
      c.fail_at(at, field + " data_offsets",
                detail::msg("[", begin, ", ", end, ") holds ", end - begin, " bytes, but ", dtype, " ",
                            t.shape_string(), " needs ", count, " x ", elem,
                            count > std::numeric_limits<std::uint64_t>::max() / elem ? " (overflows 64 bits)" : ""));
    t.n_bytes = end - begin;
    t.file_offset = base + begin;
    t.data = file_.data() + t.file_offset;
    return t;
  }

  // Where each key of the (already parsed, valid) JSON object `text` starts, in
  // one pass: keys are the strings at depth 1 followed by ':'. A key with escapes
  // is decoded by nlohmann; the first position of a key wins.
  static std::unordered_map<std::string, std::uint64_t> top_level_keys(const char* text, std::size_t n) {
    std::unordered_map<std::string, std::uint64_t> at;
    int depth = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const char ch = text[i];
      if (ch == '{' || ch == '[') {
        ++depth;
      } else if (ch == '}' || ch == ']') {
        --depth;
      } else if (ch == '"') {
        const std::size_t open = i;
        bool escaped = false;
        for (++i; i < n && text[i] != '"'; ++i)
          if (text[i] == '\\') {
            escaped = true;
            ++i;
          }
        std::size_t k = i + 1;
        while (k < n && (text[k] == ' ' || text[k] == '\t' || text[k] == '\n' || text[k] == '\r')) ++k;
        if (depth != 1 || k >= n || text[k] != ':') continue;
        std::string key(text + open + 1, i - open - 1);
        if (escaped) {
          try {
            key = nlohmann::json::parse(text + open, text + i + 1).get<std::string>();
          } catch (const nlohmann::json::exception&) {
            continue;
          }
        }
        at.emplace(std::move(key), open);
      }
    }
    return at;
  }

  detail::MappedFile file_;
  std::uint64_t header_bytes_ = 0;
  std::vector<SafetensorsTensor> tensors_;
  std::unordered_map<std::string, std::size_t> index_;
  std::map<std::string, std::string> metadata_;
};

/// A Hugging Face model's weights: one safetensors file, or the shards an index lists.
class SafetensorsModel {
 public:
  /// Opens `path`: a .safetensors file, or a folder holding model.safetensors.index.json
  /// (sharded), model.safetensors, or exactly one *.safetensors file.
  /// Failure: FileError naming the path when it holds no weights or a listed shard is
  /// missing; FormatError naming the file and the problem for a malformed file or index,
  /// a shard name that is not a plain file name, a tensor the index maps to a shard that
  /// lacks it, or a tensor present twice (in two shards or twice in the index).
  static SafetensorsModel open(const std::string& path) {
    namespace fs = std::filesystem;
    SafetensorsModel m;
    std::error_code ec;
    if (!fs::exists(path, ec)) throw FileError(detail::msg("'", path, "' does not exist"));
    if (!fs::is_directory(path, ec)) {
      m.add_shard(path);
      m.finish();
      return m;
    }
    const fs::path dir(path);
    const fs::path index = dir / "model.safetensors.index.json";
    if (fs::exists(index, ec)) {
      m.open_index(dir, index.string());
      return m;
    }
    if (fs::exists(dir / "model.safetensors", ec)) {
      m.add_shard((dir / "model.safetensors").string());
      m.finish();
      return m;
    }
    std::vector<std::string> found;
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().extension() == ".safetensors") found.push_back(e.path().string());
    if (found.size() != 1)
      throw FileError(detail::msg("'", path, "' holds ", found.size(),
                                  " .safetensors files and no model.safetensors.index.json (expected "
                                  "model.safetensors, one .safetensors file, or an index)"));
    m.add_shard(found[0]);
    m.finish();
    return m;
  }

  SafetensorsModel(SafetensorsModel&&) noexcept = default;
  SafetensorsModel& operator=(SafetensorsModel&&) noexcept = default;
  SafetensorsModel(const SafetensorsModel&) = delete;
  SafetensorsModel& operator=(const SafetensorsModel&) = delete;

  /// The tensor called `name` in any shard, or nullptr. Never throws.
  const SafetensorsTensor* find(const std::string& name) const {
    const auto it = index_.find(name);
    return it == index_.end() ? nullptr : it->second;
  }
  /// The tensor called `name`. Failure: FormatError naming it and the model path when absent.
  const SafetensorsTensor& get(const std::string& name) const {
    if (const auto* t = find(name)) return *t;
    throw FormatError(detail::msg("safetensors model: tensor '", name, "' is missing (", files_.size(), " file",
                                  files_.size() == 1 ? "" : "s", ", ", index_.size(), " tensors)"));
  }
  /// Every tensor, by name. Never throws.
  std::vector<const SafetensorsTensor*> tensors() const {
    std::vector<const SafetensorsTensor*> out;
    for (const auto& f : files_)
      for (const auto& t : f->tensors()) out.push_back(&t);
    std::sort(out.begin(), out.end(), [](const auto* a, const auto* b) { return a->name < b->name; });
    return out;
  }
  std::size_t size() const { return index_.size(); }
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }
  /// The scalar members of the index's "metadata" object (such as total_size); nested
  /// values are left out. Empty without an index.
  const nlohmann::json& index_metadata() const { return index_metadata_; }

 private:
  SafetensorsModel() = default;

  SafetensorsFile& add_shard(const std::string& file) {
    files_.push_back(std::make_unique<SafetensorsFile>(SafetensorsFile::open(file)));
    return *files_.back();
  }
  // Indexes every tensor; a name in two files is an error.
  void finish() {
    for (const auto& f : files_)
      for (const auto& t : f->tensors()) {
        const auto [it, fresh] = index_.emplace(t.name, &t);
        if (!fresh)
          throw FormatError(detail::msg("safetensors model: tensor '", t.name, "' is in both '", it->second->file,
                                        "' and '", t.file, "'"));
      }
  }

  void open_index(const std::filesystem::path& dir, const std::string& index_path) {
    namespace fs = std::filesystem;
    const detail::MappedFile f = detail::MappedFile::open(index_path);
    if (f.size() > detail::kSafetensorsMaxHeader)
      throw FormatError(detail::msg(index_path, ": index of ", f.size(), " bytes exceeds the limit of ",
                                    detail::kSafetensorsMaxHeader));
    const auto* text = reinterpret_cast<const char*>(f.data());
    const nlohmann::json j = detail::parse_json_checked(text, text + f.size(), index_path, 0, "index", "weight_map");
    if (!j.is_object()) throw FormatError(detail::msg(index_path, ": index is not a JSON object"));
    const auto wm = j.find("weight_map");
    if (wm == j.end() || !wm->is_object())
      throw FormatError(detail::msg(index_path, ": weight_map is missing or not an object"));
    if (const auto md = j.find("metadata"); md != j.end() && md->is_object())
      for (auto it = md->begin(); it != md->end(); ++it)  // scalars only: a copy of a nested value could be deep
        if (it->is_primitive()) index_metadata_[it.key()] = *it;
    std::map<std::string, std::size_t> shard_of_file;  // shard file name -> files_ index
    std::vector<std::pair<std::string, std::string>> wanted;  // tensor -> shard name
    for (auto it = wm->begin(); it != wm->end(); ++it) {
      if (!it.value().is_string())
        throw FormatError(detail::msg(index_path, ": weight_map entry '", it.key(), "' is not a file name string"));
      const std::string shard = it.value().get<std::string>();
      if (shard.empty() || shard.find('/') != std::string::npos || shard.find('\\') != std::string::npos ||
          shard == "." || shard == "..")
        throw FormatError(detail::msg(index_path, ": weight_map maps '", it.key(), "' to '", shard,
                                      "', which is not a plain file name in the folder"));
      wanted.emplace_back(it.key(), shard);
      if (!shard_of_file.count(shard)) {
        const fs::path p = dir / shard;
        std::error_code ec;
        if (!fs::is_regular_file(p, ec))
          throw FileError(detail::msg(index_path, ": shard '", shard, "' (holding tensor '", it.key(),
                                      "') is missing from ", dir.string()));
        shard_of_file[shard] = files_.size();
        add_shard(p.string());
      }
    }
    finish();
    for (const auto& [tensor, shard] : wanted) {
      const SafetensorsTensor* t = find(tensor);
      const std::string& in = files_[shard_of_file[shard]]->path();
      if (!t)
        throw FormatError(detail::msg(index_path, ": weight_map puts tensor '", tensor, "' in '", shard,
                                      "', which does not hold it"));
      if (t->file != in)
        throw FormatError(detail::msg(index_path, ": weight_map puts tensor '", tensor, "' in '", shard,
                                      "', but it is in '", t->file, "'"));
    }
  }

  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::unordered_map<std::string, const SafetensorsTensor*> index_;
  nlohmann::json index_metadata_ = nlohmann::json::object();
};

}  // namespace kvd
