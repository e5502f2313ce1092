// Error messages and the bytes files put in them. Every kvd::Error stores its
// message with control bytes escaped (\xNN), so a NUL taken from a file cannot cut
// the message short (what() is a C string) and an escape sequence cannot drive the
// terminal. Newlines and tabs stay; UTF-8 text stays as it is.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "kvdecode/error.hpp"
#include "kvdecode/io/hf_model.hpp"

using namespace kvd;
namespace fs = std::filesystem;

namespace {

const std::string kShared = KVDECODE_SHARED_DIR;

TEST(ErrorMessage, ControlBytesAreEscaped) {
  const std::string raw = std::string("a\0b", 3) + "\x1b[31m\x7f\n\t\xc3\xa9";
  const ConfigError e(raw);
  const std::string what = e.what();
  EXPECT_EQ(what, "a\\x00b\\x1b[31m\\x7f\n\t\xc3\xa9");
  EXPECT_EQ(std::strlen(e.what()), what.size()) << "the message stops at a NUL";
  EXPECT_EQ(detail::escape_control(what), what) << "escaping twice changes the text";
}

// config.json from a shared folder with one change: a NUL inside the architecture's
// name. The message shows it as \x00 and goes on to the list of supported ones.
TEST(ErrorMessage, NulFromAFileDoesNotCutTheMessage) {
  const std::string src = kShared + "/models/hf/stories260K/config.json";
  if (!fs::exists(src)) GTEST_SKIP() << "shared test file not found: " << src << " (needs ../shared beside the checkout)";
  std::ifstream in(src, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto at = text.find("\"LlamaForCausalLM\"");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 18, "\"Llama\\u0000ForCausalLM\"");
  const fs::path dir = fs::temp_directory_path() / "kvd_error_nul";
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "config.json", std::ios::binary) << text;
  try {
    hf_model_info(dir.string());
    ADD_FAILURE() << "no error";
  } catch (const FormatError& e) {
    const std::string m = e.what();
    EXPECT_EQ(std::strlen(e.what()), m.size());
    EXPECT_NE(m.find("architecture 'Llama\\x00ForCausalLM' is not supported (kvdecode runs"), std::string::npos) << m;
  }
  fs::remove_all(dir);
}

}  // namespace
