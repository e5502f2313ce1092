// One way to read files, shared by every format kvdecode understands (GGUF,
// safetensors, llama2.c checkpoints, tokenizer.bin, saved caches).
//
// MappedFile holds a whole file read-only: memory-mapped where the platform
// allows it (tensors are then used in place, and pages the OS may drop and
// re-read), else read into memory. ByteCursor reads little-endian fields from
// it, checking every read against the bytes that remain, so a format reader
// reads like its spec and does no size arithmetic of its own. Every failure is
// a FormatError "<file>: <field> at offset <o>: <what>" naming the field, where
// it is, its value and the limit it broke. Counts read from a file go through
// count_u64(), which checks count * min_item_bytes against what remains before
// anyone allocates in proportion to the count.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#if defined(__unix__) || defined(__APPLE__)
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#define KVD_HAVE_MMAP 1
#else
#define KVD_HAVE_MMAP 0
#endif

#include "kvdecode/error.hpp"

namespace kvd::detail {

/// a * b on sizes from a file. Throws FormatError naming `what` and both factors on 64-bit overflow.
inline std::uint64_t checked_mul(std::uint64_t a, std::uint64_t b, const char* what) {
  if (a != 0 && b > std::numeric_limits<std::uint64_t>::max() / a)
    throw FormatError(msg(what, ": ", a, " * ", b, " overflows 64-bit arithmetic"));
  return a * b;
}

/// a + b on sizes from a file. Throws FormatError naming `what` and both terms on 64-bit overflow.
inline std::uint64_t checked_add(std::uint64_t a, std::uint64_t b, const char* what) {
  if (b > std::numeric_limits<std::uint64_t>::max() - a)
    throw FormatError(msg(what, ": ", a, " + ", b, " overflows 64-bit arithmetic"));
  return a + b;
}

/// The whole file as a string. Throws FileError naming the path if it is
/// missing, a directory or unreadable, or larger than `limit` bytes.
inline std::string read_text_file(const std::string& path, std::uint64_t limit) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw FileError(msg(path, " is a directory, not a file"));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FileError(msg("cannot open ", path));
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size < 0) throw FileError(msg("cannot read ", path));
  if (static_cast<std::uint64_t>(size) > limit)
    throw FileError(msg(path, " is ", size, " bytes, more than the limit of ", limit));
  in.seekg(0);
  std::string s(static_cast<std::size_t>(size), '\0');
  if (size > 0 && !in.read(&s[0], size)) throw FileError(msg("cannot read ", path));
  return s;
}

/// A whole file, read-only: memory-mapped where possible, else read into memory.
/// Move-only; the bytes stay valid and unchanged for the object's lifetime.
class MappedFile {
 public:
  MappedFile() = default;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& o) noexcept { swap(o); }
  MappedFile& operator=(MappedFile&& o) noexcept {
    if (this != &o) {
      MappedFile tmp(std::move(o));
      swap(tmp);
    }
    return *this;
  }
  ~MappedFile() { unmap(); }

  /// Maps (or, if mapping fails, reads) the regular file at `path`.
  /// Failure: FileError naming the path if it is missing, a directory or another
  /// non-regular file (a FIFO would block), or cannot be opened or read.
  static MappedFile open(const std::string& path) {
    check_regular(path);
    MappedFile f;
    f.path_ = path;
#if KVD_HAVE_MMAP
    const int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) throw FileError(msg("'", path, "' cannot be opened for reading: ", std::strerror(errno)));
    struct stat sb {};
    if (::fstat(fd, &sb) != 0 || sb.st_size < 0) {
      ::close(fd);
      throw FileError(msg("'", path, "' cannot be read (its size is unknown)"));
    }
    const auto n = static_cast<std::uint64_t>(sb.st_size);
    if (n > 0 && S_ISREG(sb.st_mode)) {
      void* p = ::mmap(nullptr, static_cast<std::size_t>(n), PROT_READ, MAP_PRIVATE, fd, 0);
      if (p != MAP_FAILED) {
        ::close(fd);
        f.map_ = p;
        f.map_len_ = static_cast<std::size_t>(n);
        f.data_ = static_cast<const unsigned char*>(p);
        f.size_ = n;
        return f;
      }
    }
    ::close(fd);
#endif
    f.read_whole(path);
    return f;
  }

  /// Reads the whole regular file at `path` into memory: what open() falls back to when
  /// mapping fails. Failure: FileError as for open().
  static MappedFile read(const std::string& path) {
    check_regular(path);
    MappedFile f;
    f.path_ = path;
    f.read_whole(path);
    return f;
  }

  /// A file held in memory (tests, fuzzers, files built on the fly). `name` appears in error messages. Never throws
  /// beyond std::bad_alloc.
  static MappedFile from_bytes(std::vector<unsigned char> bytes, std::string name) {
    MappedFile f;
    f.owned_ = std::move(bytes);
    f.data_ = f.owned_.data();
    f.size_ = f.owned_.size();
    f.path_ = std::move(name);
    return f;
  }

  const unsigned char* data() const { return data_; }
  std::uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  bool is_mapped() const { return map_ != nullptr; }

  /// Tells the OS that [offset, offset+n) will not be needed again soon (madvise DONTNEED on
  /// the whole pages inside the range of a mapping; no-op otherwise or on a range outside
  /// the file). Data stays readable (pages are re-read from the file on access). Never throws.
  void release(std::uint64_t offset, std::uint64_t n) const {
#if KVD_HAVE_MMAP
    if (!map_ || offset >= size_) return;
    if (n > size_ - offset) n = size_ - offset;
    const long page_l = ::sysconf(_SC_PAGESIZE);
    const std::uint64_t page = page_l > 0 ? static_cast<std::uint64_t>(page_l) : 4096;
    const std::uint64_t begin = (offset + page - 1) / page * page;
    const std::uint64_t end = (offset + n) / page * page;
    if (end <= begin) return;
    ::madvise(static_cast<unsigned char*>(map_) + begin, static_cast<std::size_t>(end - begin), MADV_DONTNEED);
#else
    (void)offset;
    (void)n;
#endif
  }

 private:
  void swap(MappedFile& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    std::swap(path_, o.path_);
    std::swap(owned_, o.owned_);  // a vector's buffer does not move when the vector is swapped
    std::swap(map_, o.map_);
    std::swap(map_len_, o.map_len_);
  }
  void unmap() noexcept {
#if KVD_HAVE_MMAP
    if (map_) ::munmap(map_, map_len_);
#endif
    map_ = nullptr;
  }
  static void check_regular(const std::string& path) {
    std::error_code ec;
    const auto st = std::filesystem::status(path, ec);
    if (!std::filesystem::exists(st)) throw FileError(msg("'", path, "' does not exist"));
    if (std::filesystem::is_directory(st)) throw FileError(msg("'", path, "' is a directory, not a file"));
    if (!std::filesystem::is_regular_file(st)) throw FileError(msg("'", path, "' is not a regular file"));
  }
  void read_whole(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw FileError(msg("'", path, "' cannot be opened for reading"));
    in.seekg(0, std::ios::end);
    const std::streamoff end = in.tellg();
    if (end < 0 || !in) throw FileError(msg("'", path, "' cannot be read (its size is unknown)"));
    in.seekg(0, std::ios::beg);
    owned_.resize(static_cast<std::size_t>(end));
    if (end > 0 && !in.read(reinterpret_cast<char*>(owned_.data()), end))
      throw FileError(msg("'", path, "': read error (got ", in.gcount(), " of ", end, " bytes)"));
    data_ = owned_.data();
    size_ = owned_.size();
  }

  const unsigned char* data_ = nullptr;
  std::uint64_t size_ = 0;
  std::string path_;
  std::vector<unsigned char> owned_;  // the bytes when not mapped
  void* map_ = nullptr;               // the mapping, if any
  std::size_t map_len_ = 0;
};

/// Bounds-checked little-endian reader over [data, data+size); `base` = file offset of data[0].
/// Every read names its field in the FormatError it throws: "<file>: <field> at offset <o>: ...".
/// A failed read leaves the cursor where it was.
class ByteCursor {
 public:
  ByteCursor(const unsigned char* data, std::uint64_t size, std::string file, std::uint64_t base = 0)
      : data_(data), size_(size), file_(std::move(file)), base_(base) {}
  explicit ByteCursor(const MappedFile& f) : ByteCursor(f.data(), f.size(), f.path()) {}

  std::uint64_t offset() const { return base_ + pos_; }  ///< file offset of the next byte
  std::uint64_t remaining() const { return size_ - pos_; }
  const std::string& file() const { return file_; }

  std::uint8_t u8(std::string_view field) { return static_cast<std::uint8_t>(le(1, field)); }
  std::uint16_t u16(std::string_view field) { return static_cast<std::uint16_t>(le(2, field)); }
  std::uint32_t u32(std::string_view field) { return static_cast<std::uint32_t>(le(4, field)); }
  std::uint64_t u64(std::string_view field) { return le(8, field); }
  std::int8_t i8(std::string_view field) { return bit_cast<std::int8_t>(u8(field)); }
  std::int16_t i16(std::string_view field) { return bit_cast<std::int16_t>(u16(field)); }
  std::int32_t i32(std::string_view field) { return bit_cast<std::int32_t>(u32(field)); }
  std::int64_t i64(std::string_view field) { return bit_cast<std::int64_t>(u64(field)); }
  float f32(std::string_view field) { return bit_cast<float>(u32(field)); }
  double f64(std::string_view field) { return bit_cast<double>(u64(field)); }

  /// The next n bytes, in place; FormatError if fewer than n remain.
  const unsigned char* bytes(std::uint64_t n, std::string_view field) {
    need(n, field);
    const unsigned char* p = data_ + pos_;
    pos_ += n;
    return p;
  }
  /// A u64 length and that many bytes (GGUF strings). The length is checked against remaining().
  std::string string_u64(std::string_view field) {
    const std::uint64_t at = offset();
    const std::uint64_t n = u64(field);
    if (n > remaining()) {
      const std::uint64_t left = remaining();
      pos_ = at - base_;
      fail_at(at, field, msg("string length ", n, " exceeds the ", left, " bytes that remain after it"));
    }
    const unsigned char* p = data_ + pos_;
    pos_ += n;
    return std::string(reinterpret_cast<const char*>(p), static_cast<std::size_t>(n));
  }
  /// A u64 count of items of at least `min_item_bytes` each: rejected (FormatError naming field,
  /// offset, value and limit) if count * min_item_bytes > remaining() after the count.
  std::uint64_t count_u64(std::string_view field, std::uint64_t min_item_bytes) {
    const std::uint64_t at = offset();
    const std::uint64_t n = u64(field);
    check_count(at, n, min_item_bytes, field);
    return n;
  }
  /// Throws (cursor back at `at`) unless n items of min_item_bytes fit in what remains.
  void check_count(std::uint64_t at, std::uint64_t n, std::uint64_t min_item_bytes, std::string_view field) {
    const std::uint64_t limit = min_item_bytes ? remaining() / min_item_bytes : std::numeric_limits<std::uint64_t>::max();
    if (n > limit) {
      const std::uint64_t left = remaining();
      pos_ = at - base_;
      fail_at(at, field, msg("count ", n, " cannot fit: ", n, " items of at least ", min_item_bytes,
                             " bytes need more than the ", left, " bytes that remain (at most ", limit, " items)"));
    }
  }
  void skip(std::uint64_t n, std::string_view field) { (void)bytes(n, field); }
  /// Moves to file offset `off` (within [base, base+size]); FormatError naming field otherwise.
  void seek(std::uint64_t off, std::string_view field) {
    if (off < base_ || off - base_ > size_)
      fail(field, msg("offset ", off, " is outside the file's ", base_ + size_, " bytes"));
    pos_ = off - base_;
  }

  /// Throws FormatError("<file>: <field> at offset <offset()>: <what>").
  [[noreturn]] void fail(std::string_view field, const std::string& what) const { fail_at(offset(), field, what); }
  /// Throws FormatError("<file>: <field> at offset <at>: <what>").
  [[noreturn]] void fail_at(std::uint64_t at, std::string_view field, const std::string& what) const {
    throw FormatError(msg(file_, ": ", field, " at offset ", at, ": ", what));
  }

 private:
  template <class To, class From>
  static To bit_cast(From v) {
    static_assert(sizeof(To) == sizeof(From), "size mismatch");
    To t;
    std::memcpy(&t, &v, sizeof(To));
    return t;
  }
  void need(std::uint64_t n, std::string_view field) const {
    if (n > remaining())
      fail(field, msg("needs ", n, " bytes but only ", remaining(), " remain (file ends at offset ", base_ + size_, ")"));
  }
  std::uint64_t le(int n, std::string_view field) {
    need(static_cast<std::uint64_t>(n), field);
    std::uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= std::uint64_t(data_[pos_ + i]) << (8 * i);
    pos_ += static_cast<std::uint64_t>(n);
    return v;
  }

  const unsigned char* data_;
  std::uint64_t size_;
  std::string file_;
  std::uint64_t base_;
  std::uint64_t pos_ = 0;
};

}  // namespace kvd::detail
