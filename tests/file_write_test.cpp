// Safe file writing (detail::write_file_atomically): every writer (cache files,
// prompt caches, llama2.c checkpoints, GGUF files, the quantizer's output) refuses
// a target that exists and is not a regular file, and leaves it exactly as it was:
// a FIFO stays a FIFO, a symbolic link still points where it did (its target's
// bytes unchanged), a device node (made with mknod when the test runs as root)
// keeps its device number. A planted file or symlink at any name beside the
// target is never followed or changed, and no temporary file is left behind.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "kvdecode/cache/cache_io.hpp"
#include "kvdecode/io/checkpoint.hpp"
#include "kvdecode/io/file.hpp"
#include "kvdecode/io/gguf.hpp"
#include "kvdecode/cache/kv_cache.hpp"
#include "kvdecode/generate/prompt_cache.hpp"
#include "kvdecode/convert/quantize.hpp"
#include "kvdecode/model/transformer.hpp"
#include "test_util.hpp"

using namespace kvd;
namespace fs = std::filesystem;

namespace {

using kvd_test::TempDir;
using kvd_test::read_all;

ModelConfig tiny_config() { return kvd_test::small_config(2, 1, 8, 16, 1, 24, 32, 16); }

// Each writer, writing to `path`.
struct Writer {
  const char* name;
  std::function<void(const std::string&)> write;
};

std::vector<Writer> writers(const std::string& scratch) {
  static const ModelWeights<float> w = ModelWeights<float>::random(tiny_config(), 3);
  return {
      {"save_cache",
       [](const std::string& p) {
         Transformer<float> model(ModelWeights<float>::random(tiny_config(), 3));
         KVCache<float> cache(tiny_config());
         model.prefill({1, 2, 3}, cache);
         save_cache(cache, p);
       }},
      {"save_prompt_cache",
       [](const std::string& p) {
         Transformer<float> model(ModelWeights<float>::random(tiny_config(), 3));
         KVCache<float> cache(tiny_config());
         model.prefill({1, 2, 3}, cache);
         save_prompt_cache(cache, {1, 2, 3}, tiny_config().vocab_size, p, model_fingerprint(model));
       }},
      {"save_checkpoint", [](const std::string& p) { save_checkpoint(w, p, CheckpointFormat::kLlama2cV1); }},
      {"GGUFWriter::write",
       [](const std::string& p) {
         GGUFWriter g;
         g.set_string("general.architecture", "llama");
         g.write(p);
       }},
      {"quantize_model",
       [scratch](const std::string& p) {
         const std::string in = scratch + "/quantize-in.bin";
         if (!fs::exists(in)) save_checkpoint(w, in, CheckpointFormat::kLlama2cV1);
         quantize_model(in, p, QuantScheme::kQ8_0);
       }},
  };
}

// Runs every writer against the non-regular `target` made by `make`, and checks the
// refusal (FileError naming the path and `kind`) and that `check_untouched` holds.
void expect_every_writer_refuses(const TempDir& dir, const std::string& target, const std::string& kind,
                                 const std::function<void()>& check_untouched) {
  for (const Writer& wr : writers(dir.file("scratch"))) {
    SCOPED_TRACE(wr.name);
    fs::create_directories(dir.file("scratch"));
    const std::set<std::string> before = dir.names();
    try {  // a writer that blocks on the FIFO hangs here until ctest's TIMEOUT
      wr.write(target);
      ADD_FAILURE() << wr.name << " wrote through " << kind << " " << target;
    } catch (const FileError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(target), std::string::npos) << m;
      EXPECT_NE(m.find(kind), std::string::npos) << m;
      EXPECT_NE(m.find("not a regular file"), std::string::npos) << m;
    }
    check_untouched();
    EXPECT_EQ(dir.names(), before) << "a temporary file was left behind";
  }
}

TEST(FileWrite, EveryWriterRefusesAFifo) {
  TempDir dir;
  const std::string fifo = dir.file("target.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_every_writer_refuses(dir, fifo, "a FIFO", [&] {
    struct stat sb {};
    ASSERT_EQ(::lstat(fifo.c_str(), &sb), 0);
    EXPECT_TRUE(S_ISFIFO(sb.st_mode)) << "the FIFO was replaced";
  });
}

TEST(FileWrite, EveryWriterRefusesASymlink) {
  TempDir dir;
  const std::string victim = dir.file("victim.txt"), link = dir.file("target.link");
  { std::ofstream(victim, std::ios::binary) << "precious"; }
  fs::create_symlink(victim, link);
  expect_every_writer_refuses(dir, link, "a symbolic link", [&] {
    EXPECT_TRUE(fs::is_symlink(link)) << "the link was replaced";
    EXPECT_EQ(fs::read_symlink(link), fs::path(victim));
    EXPECT_EQ(read_all(victim), "precious") << "written through the link";
  });
}

TEST(FileWrite, EveryWriterRefusesADeviceNode) {
  if (::geteuid() != 0) GTEST_SKIP() << "mknod of a device node needs root";
  TempDir dir;
  const std::string dev = dir.file("null.dev");
  if (::mknod(dev.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0)
    GTEST_SKIP() << "mknod refused here (no CAP_MKNOD): " << std::strerror(errno);
  expect_every_writer_refuses(dir, dev, "a character device", [&] {
    struct stat sb {};
    ASSERT_EQ(::lstat(dev.c_str(), &sb), 0);
    EXPECT_TRUE(S_ISCHR(sb.st_mode)) << "the device node was replaced";
    EXPECT_EQ(sb.st_rdev, makedev(1, 3));
  });
}

TEST(FileWrite, RefusesAFolder) {
  TempDir dir;
  const std::string sub = dir.file("sub");
  fs::create_directories(sub);
  try {
    detail::write_file_atomically(sub, [](std::ostream& out) { out << "x"; });
    ADD_FAILURE() << "wrote over a folder";
  } catch (const FileError& e) {
    EXPECT_NE(std::string(e.what()).find("a folder"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fs::is_directory(sub));
}

// Names an attacker could guess beside the target (the old "<path>.tmp" among them),
// planted as symlinks to a victim file: writing the target follows none of them.
TEST(FileWrite, PlantedTemporarySymlinksAreNeverFollowed) {
  TempDir dir;
  const std::string victim = dir.file("victim.txt"), target = dir.file("out.bin");
  { std::ofstream(victim, std::ios::binary) << "precious"; }
  for (const std::string& n : std::vector<std::string>{"out.bin.tmp", ".out.bin.tmp", ".out.bin." + std::to_string(::getpid()) + ".0.tmp"})
    fs::create_symlink(victim, dir.file(n));
  const std::set<std::string> before = dir.names();
  detail::write_file_atomically(target, [](std::ostream& out) { out << "new contents"; });
  EXPECT_EQ(read_all(target), "new contents");
  EXPECT_FALSE(fs::is_symlink(target));
  EXPECT_EQ(read_all(victim), "precious");
  std::set<std::string> after = dir.names();
  after.erase("out.bin");
  EXPECT_EQ(after, before) << "a planted name was changed or a temporary file left behind";
}

// A regular file is replaced only once everything is written: a writer that throws
// half-way leaves it as it was, and no temporary file remains.
TEST(FileWrite, FailureHalfWayLeavesTheTargetUntouched) {
  TempDir dir;
  const std::string target = dir.file("out.bin");
  { std::ofstream(target, std::ios::binary) << "old"; }
  EXPECT_THROW(detail::write_file_atomically(target,
                                             [](std::ostream& out) {
                                               out << "partial";
                                               throw FormatError("stop");
                                             }),
               FormatError);
  EXPECT_EQ(read_all(target), "old");
  EXPECT_EQ(dir.names(), std::set<std::string>{"out.bin"});
  detail::write_file_atomically(target, [](std::ostream& out) { out << "new"; });
  EXPECT_EQ(read_all(target), "new");
  EXPECT_EQ(dir.names(), std::set<std::string>{"out.bin"});
}

}  // namespace
