// llama.cpp's tokenizer reference cases (../shared/reference/vocab/<name>.inp and
// .out), read the same way by every vocabulary test.
#pragma once

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace kvd_test {

/// The whole file as bytes ("" when it cannot be read).
inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// llama.cpp's case file: texts separated by "\n__ggml_vocab_test__\n" (the last one
/// is followed by the separator too).
inline std::vector<std::string> read_cases(const std::string& path) {
  const std::string all = slurp(path);
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> cases;
  std::size_t pos = 0;
  for (std::size_t hit; (hit = all.find(sep, pos)) != std::string::npos; pos = hit + sep.size())
    cases.push_back(all.substr(pos, hit - pos));
  if (pos < all.size()) cases.push_back(all.substr(pos));
  return cases;
}

/// The expected ids: one line of space-separated ids per case.
inline std::vector<std::vector<int>> read_ids(const std::string& path) {
  std::vector<std::vector<int>> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    std::istringstream ls(line);
    std::vector<int> ids;
    for (int id; ls >> id;) ids.push_back(id);
    out.push_back(ids);
  }
  return out;
}

/// Ids as " 1 2 3", so that a failed comparison prints both lists.
inline std::string show(const std::vector<int>& ids) {
  std::string s;
  for (int id : ids) s += " " + std::to_string(id);
  return s;
}

}  // namespace kvd_test
