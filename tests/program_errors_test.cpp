// The programs (examples/*.cpp) on hostile inputs, run as a user runs them: the
// built kvdecode-generate, kvdecode-quantize, kvdecode-tokenize and kvdecode-plan
// beside this test binary (skipped when they are not built). Each input is a shared
// file with one change. Every failure ends with exit status 1 and a message of
// ours, never a signal:
//   - an exhausted memory (a std::bad_alloc, here under a small address-space limit);
//   - NaN logits from a model (naming the position; not status 2 "run --help");
//   - a prompt cache holding NaN is ignored with a warning, as --help says;
//   - a --prompt-cache, --dump-logits or quantizer output path that is a FIFO is
//     refused and left a FIFO;
//   - the planner says when it caps a context.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "kvdecode/io/checkpoint.hpp"
#include "kvdecode/io/bytes.hpp"
#include "kvdecode/io/gguf.hpp"
#include "test_util.hpp"

using namespace kvd;
namespace fs = std::filesystem;

namespace {

using kvd_test::TempDir;
using kvd_test::read_all;

const std::string kShared = KVDECODE_SHARED_DIR;
const std::string kModel = kShared + "/models/stories260K.bin";

#define EXPECT_HAS(m, piece) EXPECT_NE((m).find(piece), std::string::npos) << "'" << (piece) << "' not in: " << (m)

// The program `name` beside this test binary, or "" when it is not built.
std::string program(const std::string& name) {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  const fs::path p = self.parent_path() / name;
  return fs::exists(p, ec) ? p.string() : "";
}

struct Outcome {
  int status = -1;  // exit status, or 128 + signal
  std::string out, err;
};

// Runs `exe` with `args` (one thread), with an address-space limit of `as_limit`
// bytes when it is not 0, and collects its exit status and output.
Outcome run(const TempDir& dir, const std::string& exe, const std::vector<std::string>& args, rlim_t as_limit = 0) {
  const std::string out = dir.file("stdout.txt"), err = dir.file("stderr.txt");
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fo = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int fe = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fo, 1);
    ::dup2(fe, 2);
    ::setenv("OMP_NUM_THREADS", "1", 1);
    if (as_limit) {
      const rlimit r{as_limit, as_limit};
      ::setrlimit(RLIMIT_AS, &r);
    }
    std::vector<char*> argv{const_cast<char*>(exe.c_str())};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(exe.c_str(), argv.data());
    ::_exit(127);
  }
  int ws = 0;
  ::waitpid(pid, &ws, 0);
  Outcome r;
  r.status = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
  r.out = read_all(out);
  r.err = read_all(err);
  return r;
}

#define REQUIRE_PROGRAM(var, name)                                                           \
  const std::string var = program(name);                                                     \
  if (var.empty()) GTEST_SKIP() << name << " is not built beside this test (build it first)"; \
  if (!fs::exists(kModel)) GTEST_SKIP() << "shared test file not found: " << kModel << " (needs ../shared beside the checkout)"

// stories260K.bin with token embedding row `row`, column 3 set to `v`.
std::string model_with(const TempDir& dir, int row, float v) {
  const CheckpointInfo info = read_checkpoint_info(kModel);
  const std::size_t header = info.format == CheckpointFormat::kLlama2cV1 ? 256 : 28;
  std::string b = read_all(kModel);
  std::memcpy(&b[header + (static_cast<std::size_t>(row) * static_cast<std::size_t>(info.config.d_model) + 3) * 4], &v, 4);
  const std::string path = dir.file("model.bin");
  std::ofstream(path, std::ios::binary) << b;
  return path;
}

#if defined(__SANITIZE_ADDRESS__)
#define KVD_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KVD_TEST_ASAN 1
#endif
#endif

TEST(Programs, OutOfMemoryEndsWithStatus1AndAMessage) {
#ifdef KVD_TEST_ASAN
  GTEST_SKIP() << "AddressSanitizer reserves more address space than the limit this test sets";
#endif
  REQUIRE_PROGRAM(exe, "kvdecode-tokenize");
  TempDir dir;
  // A 256 MB --cases file (sparse: no disk used) read under a 192 MB address-space limit.
  const std::string cases = dir.file("cases.txt");
  { std::ofstream(cases) << "x"; }
  fs::resize_file(cases, 256u << 20);
  const Outcome r = run(dir, exe, {"--model", kShared + "/models/tokenizer.bin", "--cases", cases}, rlim_t{192} << 20);
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_HAS(r.err, "kvdecode-tokenize: out of memory");
}

TEST(Programs, NanLogitsEndWithStatus1NamingThePosition) {
  REQUIRE_PROGRAM(exe, "kvdecode-generate");
  TempDir dir;
  const std::string model = model_with(dir, 1, std::numeric_limits<float>::quiet_NaN());
  const Outcome r = run(dir, exe, {"-m", model, "--prompt-ids", "1,403,407", "-n", "4", "-t", "1", "--quiet"});
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_HAS(r.err, "the model's logits at position 2 are not finite");
  EXPECT_EQ(r.err.find("--help"), std::string::npos) << r.err;
}

TEST(Programs, PromptCacheWithNanIsIgnoredWithAWarning) {
  REQUIRE_PROGRAM(exe, "kvdecode-generate");
  TempDir dir;
  const std::string pc = dir.file("p.kvdp");
  const std::vector<std::string> args{"-m", kModel, "--prompt-ids", "1,403,407,261", "-n", "4", "-t", "1", "--ids", "--prompt-cache", pc};
  const Outcome first = run(dir, exe, args);
  ASSERT_EQ(first.status, 0) << first.err;
  // Poison the first V element of the embedded cache file and fix its checksum.
  std::string b = read_all(pc);
  const std::uint32_t n = detail::load_u32_le(reinterpret_cast<const unsigned char*>(b.data()) + 8);
  const std::size_t cache_at = 40 + 4 * static_cast<std::size_t>(n);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(&b[cache_at + 64], &nan, 4);
  auto* bytes = reinterpret_cast<unsigned char*>(&b[0]);
  detail::store_u64_le(bytes + b.size() - 8, detail::fnv1a64(bytes + cache_at, b.size() - 8 - cache_at));
  std::ofstream(pc, std::ios::binary) << b;
  const Outcome second = run(dir, exe, args);
  EXPECT_EQ(second.status, 0) << second.err;
  EXPECT_HAS(second.err, "warning: ignoring the prompt cache");
  EXPECT_HAS(second.err, "non-finite K element at position 0");
  EXPECT_EQ(second.out, first.out) << "the ids differ from a run without the damaged cache";
}

TEST(Programs, FifoTargetsAreRefusedAndStayFifos) {
  REQUIRE_PROGRAM(gen, "kvdecode-generate");
  TempDir dir;
  const std::string fifo = dir.file("target.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const Outcome r = run(dir, gen, {"-m", kModel, "--prompt-ids", "1,403,407", "-n", "4", "-t", "1", "--prompt-cache", fifo});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_HAS(r.err, "the prompt cache was not saved");
  EXPECT_HAS(r.err, "is a FIFO, not a regular file: refusing to replace it");
  const Outcome d = run(dir, gen, {"-m", kModel, "--prompt-ids", "1,403,407", "-n", "4", "-t", "1", "--dump-logits", fifo});
  EXPECT_EQ(d.status, 1) << d.err;
  EXPECT_HAS(d.err, "is a FIFO, not a regular file: refusing to replace it");
  const std::string quant = program("kvdecode-quantize");
  if (!quant.empty()) {
    const Outcome q = run(dir, quant, {kModel, fifo, "Q8_0"});
    EXPECT_EQ(q.status, 1) << q.err;
    EXPECT_HAS(q.err, "is a FIFO, not a regular file");
  }
  struct stat sb {};
  ASSERT_EQ(::lstat(fifo.c_str(), &sb), 0);
  EXPECT_TRUE(S_ISFIFO(sb.st_mode)) << "the FIFO was replaced";
}

// The programs' own JSON inputs go through the same entry point: 100,000 levels end
// with status 1 and the limit, not a stack overflow.
TEST(Programs, DeepJsonInputsEndWithStatus1) {
  REQUIRE_PROGRAM(gen, "kvdecode-generate");
  TempDir dir;
  const std::string deep = std::string(100000, '[') + "\"hi\"" + std::string(100000, ']');
  const std::string conv = dir.file("conv.json");
  std::ofstream(conv) << deep;
  const Outcome g = run(dir, gen, {"-m", kModel, "--tokenizer", kShared + "/models/tok512.bin", "--conversation", conv,
                                   "--system", "You tell stories.", "-n", "4", "-t", "1"});
  EXPECT_EQ(g.status, 1) << g.err;
  EXPECT_HAS(g.err, "exceeds the limit of 128 levels");
  const std::string tok = program("kvdecode-tokenize");
  if (tok.empty()) return;
  const Outcome t = run(dir, tok, {"--model", kShared + "/models/tok512.bin", "--render-chat", conv, "--chat-template", "chatml"});
  EXPECT_EQ(t.status, 1) << t.err;
  EXPECT_HAS(t.err, "exceeds the limit of 128 levels");
}

TEST(Programs, QuantizeRefusesNanWeights) {
  REQUIRE_PROGRAM(exe, "kvdecode-quantize");
  TempDir dir;
  const std::string model = model_with(dir, 5, std::numeric_limits<float>::quiet_NaN());
  const Outcome r = run(dir, exe, {model, dir.file("out.gguf"), "Q8_0"});
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_HAS(r.err, "tensor 'token_embd.weight'");
  EXPECT_HAS(r.err, "row 5: weight [3] = nan is not finite");
  EXPECT_FALSE(fs::exists(dir.file("out.gguf")));
}

TEST(Programs, PlanSaysWhenItCapsAContext) {
  REQUIRE_PROGRAM(exe, "kvdecode-plan");
  const std::string src = kShared + "/models/gguf/stories260K-F32.gguf";
  if (!fs::exists(src)) GTEST_SKIP() << "shared test file not found: " << src;
  TempDir dir;
  // The shared GGUF with one change: llama.context_length 2^24 (kvdecode plans at most 2^20).
  GGUFFile f = GGUFFile::open(src);
  GGUFWriter g;
  for (const auto& [k, v] : f.metadata())
    if (k != "general.alignment") g.set(k, v);
  g.set_u32("llama.context_length", 1u << 24);
  for (const GGUFTensorInfo& t : f.tensors())
    g.add_tensor_ref(t.name, t.type, std::vector<std::uint64_t>(t.ne, t.ne + t.n_dims), f.tensor_data(t), t.n_bytes);
  const std::string path = dir.file("long.gguf");
  g.write(path);
  const Outcome r = run(dir, exe, {"--model", path, "--memory-gb", "16", "--json"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_HAS(r.out, "the model's context of 16777216 positions is capped at kvdecode's limit of 1048576");
  EXPECT_HAS(r.out, "\"context_capped\":true");
}

}  // namespace
