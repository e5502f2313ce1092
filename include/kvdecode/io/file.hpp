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
//
// Writing goes through one helper, write_file_atomically() (AtomicFileWriter
// underneath): it refuses a target that exists and is not a regular file (a FIFO,
// a device node, a socket, a symbolic link, a folder), writes a temporary file
// beside the target under a fresh unique name opened with O_CREAT | O_EXCL |
// O_NOFOLLOW (so a planted file or symlink is never followed or reused), fsyncs
// it, then renames it over the target. A failure leaves the target as it was and
// removes the temporary file.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <limits>
#include <ostream>
#include <streambuf>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#if defined(__unix__) || defined(__APPLE__)
#include <fcntl.h>
#include <stdio.h>
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

/// What lies at `path` when it is not a regular file ("a FIFO", "a character device",
/// "a symbolic link", ...); "" for a regular file or nothing at all. Does not follow a
/// final symbolic link. Never throws.
inline std::string non_regular_kind(const std::string& path) {
#if KVD_HAVE_MMAP
  struct stat sb {};
  if (::lstat(path.c_str(), &sb) != 0) return errno == ENOENT || errno == ENOTDIR ? "" : "an uninspectable path";
  if (S_ISREG(sb.st_mode)) return "";
  if (S_ISDIR(sb.st_mode)) return "a folder";
  if (S_ISLNK(sb.st_mode)) return "a symbolic link";
  if (S_ISFIFO(sb.st_mode)) return "a FIFO";
  if (S_ISCHR(sb.st_mode)) return "a character device";
  if (S_ISBLK(sb.st_mode)) return "a block device";
  if (S_ISSOCK(sb.st_mode)) return "a socket";
  return "not a regular file";
#else
  std::error_code ec;
  const auto st = std::filesystem::symlink_status(path, ec);
  if (ec || st.type() == std::filesystem::file_type::not_found || st.type() == std::filesystem::file_type::regular) return "";
  if (st.type() == std::filesystem::file_type::directory) return "a folder";
  if (st.type() == std::filesystem::file_type::symlink) return "a symbolic link";
  return "not a regular file";
#endif
}

/// A new file written beside `path` and renamed over it only by commit(): the safe
/// way every kvdecode writer (cache files, prompt caches, checkpoints, GGUF files,
/// logit dumps) creates or replaces a file.
///
/// The constructor refuses a `path` that exists and is not a regular file (FileError
/// "'<path>' is a FIFO, not a regular file: refusing to replace it"); a symbolic link
/// counts as not regular, since renaming over it would drop the link and writing
/// through it would reach a file the caller did not name. The temporary file
/// "<dir>/.<name>.<pid>.<n>.tmp" is created with O_CREAT | O_EXCL | O_NOFOLLOW and mode
/// 0644 (less the umask): a name that already exists, as a file or a planted symlink,
/// is never opened; another name is tried. stream() is an std::ostream on it whose
/// failures stick in its state. commit() flushes, fsyncs, checks the target again,
/// renames the file over `path` and fsyncs the folder; it throws FileError naming
/// the path on any failure. If commit() is not reached (an exception from the
/// writer, a failed commit), the destructor removes the temporary file and `path`
/// is untouched.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::string path) : path_(std::move(path)), buf_(this) {
    refuse_non_regular();
    namespace fs = std::filesystem;
    const fs::path target(path_);
    std::string name = target.filename().string();
    if (name.empty() || name == "." || name == "..")
      throw FileError(msg("'", path_, "' names a folder, not a file: cannot write it"));
    const fs::path dir = target.parent_path();
    static std::atomic<unsigned long long> counter{0};
    for (int attempt = 0; attempt < kAttempts; ++attempt) {
      const unsigned long long n =
          counter.fetch_add(1) * 1000003ull + static_cast<unsigned long long>(
                                                  std::chrono::steady_clock::now().time_since_epoch().count() & 0xFFFFFF);
      tmp_ = (dir / ("." + name + "." + std::to_string(process_id()) + "." + std::to_string(n) + ".tmp")).string();
#if KVD_HAVE_MMAP
      fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
      if (fd_ >= 0) return;
      if (errno == EEXIST || errno == ELOOP) continue;  // a name in use (or a planted link): take another
      const int err = errno;
      throw FileError(msg("'", path_, "' cannot be written: cannot open the temporary file '", tmp_,
                          "' for writing: ", std::strerror(err)));
#else
      std::error_code ec;
      if (fs::exists(fs::symlink_status(tmp_, ec))) continue;
      file_.open(tmp_, std::ios::binary | std::ios::trunc);
      if (file_.is_open()) return;
      throw FileError(msg("'", path_, "' cannot be written: cannot open the temporary file '", tmp_, "' for writing"));
#endif
    }
    throw FileError(msg("'", path_, "' cannot be written: ", kAttempts, " temporary names beside it were all taken"));
  }
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  ~AtomicFileWriter() { abandon(); }

  /// The stream on the temporary file. Write errors set its badbit; commit() reports them.
  std::ostream& stream() {
#if KVD_HAVE_MMAP
    return out_;
#else
    return file_;
#endif
  }
  const std::string& path() const { return path_; }

  /// Flushes, fsyncs and renames the temporary file over path(). Throws FileError naming
  /// the path (a write error, a full disk, a target that became non-regular, a failed
  /// rename); the temporary file is then removed and path() is as it was.
  void commit() {
    if (committed_) return;
#if KVD_HAVE_MMAP
    out_.flush();
    if (!out_ || buf_.failed())
      fail(msg("write error on '", tmp_, "'", buf_.error() ? msg(": ", std::strerror(buf_.error())) : std::string(" (disk full?)")));
    if (::fsync(fd_) != 0) fail(msg("cannot fsync '", tmp_, "': ", std::strerror(errno)));
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail(msg("cannot close '", tmp_, "': ", std::strerror(errno)));
#else
    file_.close();
    if (!file_) fail(msg("write error on '", tmp_, "' (disk full?)"));
#endif
    refuse_non_regular();  // what lies at the target may have changed while we wrote
    std::error_code ec;
    std::filesystem::rename(tmp_, path_, ec);
    if (ec) fail(msg("cannot rename '", tmp_, "' to the destination: ", ec.message()));
    committed_ = true;
#if KVD_HAVE_MMAP
    std::string dir = std::filesystem::path(path_).parent_path().string();
    if (dir.empty()) dir = ".";
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      (void)::fsync(dfd);  // the rename's durability; some file systems refuse, which is not an error here
      ::close(dfd);
    }
#endif
  }

 private:
  static constexpr int kAttempts = 100;

  // An output buffer over the file descriptor: failures stick (failed(), error()).
  class FdBuf : public std::streambuf {
   public:
    explicit FdBuf(AtomicFileWriter* owner) : owner_(owner), data_(1u << 16) { setp(data_.data(), data_.data() + data_.size()); }
    bool failed() const { return failed_; }
    int error() const { return error_; }

   protected:
    int overflow(int c) override {
      if (!drain()) return traits_type::eof();
      if (c != traits_type::eof()) {
        *pptr() = static_cast<char>(c);
        pbump(1);
      }
      return traits_type::not_eof(c);
    }
    int sync() override { return drain() ? 0 : -1; }

   private:
    bool drain() {
#if KVD_HAVE_MMAP
      const char* p = pbase();
      std::size_t n = static_cast<std::size_t>(pptr() - pbase());
      while (n > 0 && !failed_) {
        const ssize_t w = ::write(owner_->fd_, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
          failed_ = true;
          error_ = w < 0 ? errno : 0;
          break;
        }
        p += w;
        n -= static_cast<std::size_t>(w);
      }
#endif
      setp(data_.data(), data_.data() + data_.size());
      return !failed_;
    }
    AtomicFileWriter* owner_;
    std::vector<char> data_;
    bool failed_ = false;
    int error_ = 0;
  };

  static long process_id() {
#if KVD_HAVE_MMAP
    return static_cast<long>(::getpid());
#else
    return 0;
#endif
  }
  void refuse_non_regular() const {
    const std::string kind = non_regular_kind(path_);
    if (!kind.empty()) throw FileError(msg("'", path_, "' is ", kind, ", not a regular file: refusing to replace it"));
  }
  void abandon() noexcept {
#if KVD_HAVE_MMAP
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
#else
    if (file_.is_open()) file_.close();
#endif
    if (!committed_ && !tmp_.empty()) {
      std::error_code ignored;
      std::filesystem::remove(tmp_, ignored);
    }
  }
  [[noreturn]] void fail(const std::string& what) {
    abandon();
    tmp_.clear();
    throw FileError(msg("'", path_, "' cannot be written: ", what));
  }

  std::string path_;
  std::string tmp_;
  bool committed_ = false;
  int fd_ = -1;
  FdBuf buf_;
  std::ostream out_{&buf_};
#if !KVD_HAVE_MMAP
  std::ofstream file_;
#endif
};

/// Writes a file through `body(std::ostream&)` with an AtomicFileWriter: `path` is
/// replaced only once body has returned and every byte is on disk. Throws FileError
/// naming the path if `path` is not a regular file (see AtomicFileWriter) or cannot be
/// written, and whatever `body` throws; `path` is then untouched and no temporary
/// file remains.
template <class Body>
void write_file_atomically(const std::string& path, Body&& body) {
  AtomicFileWriter w(path);
  body(w.stream());
  w.commit();
}

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
