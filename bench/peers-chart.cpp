// kvdecode-peers-chart: draws bench/peers.sh's figures as grouped bars (SVG), one
// panel per metric (pp256, pp1024, tg32, tg32@2048, ...), one group per file type and
// one bar per engine (ours with --exact-activations, by default, with --fast-matmul, llama.cpp,
// ik_llama.cpp):
//   kvdecode-peers-chart BEST.csv OUT.svg [SUBTITLE]
// BEST.csv is peers.sh's best-of-rounds file: a header line, then lines
// `type,metric,engine,tokens_per_second` (engine: exact, default, fast, llama, ik). Panels,
// groups keep the order in which the file first names them, bars the order above;
// an engine the file never names has no bar and no legend entry (a run of
// ENGINES="fast ik"), and a figure the file lacks for an engine it names draws no
// bar ("n/a").
// Exit status: 0 success, 1 a file could not be read or written, 2 bad argument or line.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "svg_chart.hpp"

namespace {

struct Figure {
  std::string type, metric, engine;
  double tokens_per_second = 0;
};

/// The engines peers.sh measures, in bar order, with their legend names and colors.
struct Engine {
  const char* key;
  const char* legend;
  const char* color;
};
constexpr Engine kEngines[] = {
    {"exact", "kvdecode --exact-activations", "#1f77b4"},
    {"default", "kvdecode (default)", "#17becf"},
    {"fast", "kvdecode --fast-matmul", "#2ca02c"},
    {"llama", "llama.cpp", "#ff7f0e"},
    {"ik", "ik_llama.cpp -rtr 1", "#d62728"},
};

/// Position of `s` in `list`, appended if absent.
std::size_t index_of(std::vector<std::string>& list, const std::string& s) {
  const auto it = std::find(list.begin(), list.end(), s);
  if (it != list.end()) return static_cast<std::size_t>(it - list.begin());
  list.push_back(s);
  return list.size() - 1;
}

/// Reads BEST.csv; throws std::invalid_argument naming the line that is not `type,metric,engine,number`.
std::vector<Figure> read_figures(std::istream& in, const std::string& path) {
  std::vector<Figure> figs;
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    if (++line_no == 1 || line.empty()) continue;  // the header
    std::stringstream ss(line);
    Figure f;
    std::string value;
    if (!std::getline(ss, f.type, ',') || !std::getline(ss, f.metric, ',') || !std::getline(ss, f.engine, ',') ||
        !std::getline(ss, value) || value.empty())
      throw std::invalid_argument(path + ":" + std::to_string(line_no) + ": expected type,metric,engine,tokens_per_second");
    std::size_t used = 0;
    f.tokens_per_second = std::stod(value, &used);
    if (used != value.size() || !(f.tokens_per_second >= 0))
      throw std::invalid_argument(path + ":" + std::to_string(line_no) + ": tokens_per_second '" + value +
                                  "' is not a number >= 0");
    figs.push_back(f);
  }
  return figs;
}

int run(int argc, char** argv) {
  if (argc < 3 || argc > 4 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::cerr << "usage: kvdecode-peers-chart BEST.csv OUT.svg [SUBTITLE]\n"
                 "  bench/peers.sh's best-of-rounds figures as grouped bars: a panel per metric, a group per type,\n"
                 "  a bar per engine.\n";
    return argc < 3 || argc > 4 ? 2 : 0;
  }
  std::ifstream in(argv[1]);
  if (!in) {
    std::cerr << "kvdecode-peers-chart: cannot read " << argv[1] << "\n";
    return 1;
  }
  const std::vector<Figure> figs = read_figures(in, argv[1]);
  std::vector<std::string> metrics, types;
  for (const Figure& f : figs) {
    index_of(metrics, f.metric);
    index_of(types, f.type);
  }
  for (const Figure& f : figs)
    if (std::none_of(std::begin(kEngines), std::end(kEngines), [&](const Engine& x) { return f.engine == x.key; })) {
      std::cerr << "kvdecode-peers-chart: unknown engine '" << f.engine << "' (exact, default, fast, llama, ik)\n";
      return 2;
    }
  // the engines the file names, in kEngines' order: one bar slot each
  std::vector<std::string> keys, names, colors;
  for (const Engine& e : kEngines)
    if (std::any_of(figs.begin(), figs.end(), [&](const Figure& f) { return f.engine == e.key; })) {
      keys.push_back(e.key);
      names.push_back(e.legend);
      colors.push_back(e.color);
    }
  std::vector<kvd_bench::BarPanel> panels(metrics.size());
  for (std::size_t m = 0; m < metrics.size(); ++m) {
    panels[m].title = metrics[m];
    panels[m].groups = types;
    panels[m].values.assign(keys.size(), std::vector<double>(types.size(), NAN));
  }
  for (const Figure& f : figs)
    panels[index_of(metrics, f.metric)].values[index_of(keys, f.engine)][index_of(types, f.type)] = f.tokens_per_second;
  const std::string subtitle = argc > 3 ? argv[3] : "";
  std::ofstream out(argv[2]);
  out << kvd_bench::bar_chart_svg("kvdecode beside llama.cpp and ik_llama.cpp (1.1B shape)", subtitle, "tokens/s",
                                  names, colors, panels, 2, "bench/peers.sh; best of the alternated rounds");
  if (!out) {
    std::cerr << "kvdecode-peers-chart: cannot write " << argv[2] << "\n";
    return 1;
  }
  std::cerr << "wrote " << argv[2] << " (" << metrics.size() << " metrics, " << types.size() << " types)\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::logic_error& e) {  // a bad line (std::invalid_argument, std::stod's out_of_range)
    std::cerr << "kvdecode-peers-chart: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "kvdecode-peers-chart: " << e.what() << "\n";
    return 1;
  }
}
