// Line and bar charts as standalone SVG (no plotting library), shared by the measuring
// programs: kvdecode-roofline's docs/figures/time_per_token.svg, kvdecode-conversation's
// docs/conversation_ttft.svg (line charts) and kvdecode-peers-chart's
// docs/figures/peers.svg (grouped bars, bench/peers.sh).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

namespace kvd_bench {

inline std::string xml_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

inline std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

/// The tick step of a linear axis from 0 that holds `max`: 4 to 8 intervals, a step of
/// 1, 2, 2.5 or 5 x 10^k or a power of two, whichever ends the axis closest above the
/// data (positions like 255 get 0..256 by 32). Sets `hi` to the axis end.
inline double axis_step(double max, double& hi) {
  double step = 1;
  hi = 1e300;
  std::vector<double> candidates;
  for (int e = -1; e <= 7; ++e)
    for (double m : {1.0, 2.0, 2.5, 5.0}) candidates.push_back(m * std::pow(10.0, e));
  for (int e = 0; e <= 24; ++e) candidates.push_back(std::ldexp(1.0, e));
  for (double c : candidates) {
    const double end = std::ceil(std::max(max, 1e-9) / c) * c;
    const double intervals = end / c;
    if (intervals >= 4 && intervals <= 8 && end < hi - 1e-9) { hi = end; step = c; }
  }
  return step;
}

/// Writes the opening <svg> tag of a W x H chart, its white background, and its title
/// and subtitle centred at the top.
inline void svg_open(std::ostringstream& o, double W, double H, const std::string& title, const std::string& subtitle) {
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H << "\" viewBox=\"0 0 " << W
    << ' ' << H << "\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n";
  o << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  o << "<text x=\"" << W / 2 << "\" y=\"30\" text-anchor=\"middle\" font-size=\"19\" font-weight=\"bold\">"
    << xml_escape(title) << "</text>\n";
  o << "<text x=\"" << W / 2 << "\" y=\"52\" text-anchor=\"middle\" font-size=\"13\" fill=\"#555\">"
    << xml_escape(subtitle) << "</text>\n";
}

struct Series {
  std::string name, color;
  std::vector<double> x, y;
  bool dashed = false;
};

/// A line chart: linear x axis from 0 (or, with `log2_x`, a log2 x axis with a tick
/// at every power of two the data spans), log10 y axis spanning whole decades,
/// gridlines, tick labels, axis titles, a legend and a title.
/// `end_note`, if not empty, is written left of the last points of the first two
/// series, between them (e.g. the ratio of the two at the last x).
inline std::string line_chart_svg(const std::string& title, const std::string& subtitle, const std::string& x_label,
                           const std::string& y_label, const std::vector<Series>& series,
                           const std::string& end_note = std::string(), const std::string& footnote = std::string(),
                           bool log2_x = false) {
  const double W = 800, H = 500, left = 84, right = 28, top = 72, bottom = 64;
  const double pw = W - left - right, ph = H - top - bottom;
  double x_min = 1e300, x_max = 0, y_min = 1e300, y_max = 0;
  for (const auto& s : series)
    for (std::size_t i = 0; i < s.x.size(); ++i) {
      x_min = std::min(x_min, s.x[i]);
      x_max = std::max(x_max, s.x[i]);
      y_min = std::min(y_min, s.y[i]);
      y_max = std::max(y_max, s.y[i]);
    }
  double x_hi = 0;
  const double step = axis_step(x_max, x_hi);
  const int d_lo = static_cast<int>(std::floor(std::log10(y_min))), d_hi = static_cast<int>(std::ceil(std::log10(y_max)));
  // log2 x: from the power of two at or below the smallest x to the one at or above the largest
  const int e_lo = log2_x ? static_cast<int>(std::floor(std::log2(std::max(x_min, 1e-300)))) : 0;
  const int e_hi = log2_x ? std::max(e_lo + 1, static_cast<int>(std::ceil(std::log2(std::max(x_max, 1e-300))))) : 1;
  auto X = [&](double x) {
    return log2_x ? left + pw * (std::log2(x) - e_lo) / (e_hi - e_lo) : left + pw * x / x_hi;
  };
  std::vector<double> x_ticks;
  if (log2_x) {
    for (int e = e_lo; e <= e_hi; ++e) x_ticks.push_back(std::ldexp(1.0, e));
  } else {
    for (double x = 0; x <= x_hi + 1e-9; x += step) x_ticks.push_back(x);
  }
  auto Y = [&](double y) { return top + ph * (1.0 - (std::log10(y) - d_lo) / (d_hi - d_lo)); };

  std::ostringstream o;
  svg_open(o, W, H, title, subtitle);
  // gridlines and y ticks: a labelled line at every decade, faint lines at 2..9
  for (int d = d_lo; d <= d_hi; ++d) {
    const double v = std::pow(10.0, d);
    o << "<line x1=\"" << left << "\" x2=\"" << left + pw << "\" y1=\"" << Y(v) << "\" y2=\"" << Y(v)
      << "\" stroke=\"#c8c8c8\" stroke-width=\"1\"/>\n";
    o << "<line x1=\"" << left - 6 << "\" x2=\"" << left << "\" y1=\"" << Y(v) << "\" y2=\"" << Y(v)
      << "\" stroke=\"black\"/>\n";
    std::string label = d >= 0 ? fmt("%.0f", v) : fmt(("%." + std::to_string(-d) + "f").c_str(), v);
    o << "<text x=\"" << left - 10 << "\" y=\"" << Y(v) + 4.5 << "\" text-anchor=\"end\" font-size=\"13\">" << label
      << "</text>\n";
    if (d == d_hi) break;
    for (int k = 2; k <= 9; ++k) {
      const double u = k * v;
      o << "<line x1=\"" << left << "\" x2=\"" << left + pw << "\" y1=\"" << Y(u) << "\" y2=\"" << Y(u)
        << "\" stroke=\"#ececec\" stroke-width=\"1\"/>\n";
      o << "<line x1=\"" << left - 3 << "\" x2=\"" << left << "\" y1=\"" << Y(u) << "\" y2=\"" << Y(u)
        << "\" stroke=\"black\"/>\n";
    }
  }
  for (double x : x_ticks) {
    o << "<line x1=\"" << X(x) << "\" x2=\"" << X(x) << "\" y1=\"" << top << "\" y2=\"" << top + ph
      << "\" stroke=\"#ececec\" stroke-width=\"1\"/>\n";
    o << "<line x1=\"" << X(x) << "\" x2=\"" << X(x) << "\" y1=\"" << top + ph << "\" y2=\"" << top + ph + 6
      << "\" stroke=\"black\"/>\n";
    o << "<text x=\"" << X(x) << "\" y=\"" << top + ph + 22 << "\" text-anchor=\"middle\" font-size=\"13\">"
      << fmt("%g", x) << "</text>\n";
  }
  o << "<rect x=\"" << left << "\" y=\"" << top << "\" width=\"" << pw << "\" height=\"" << ph
    << "\" fill=\"none\" stroke=\"black\" stroke-width=\"1.2\"/>\n";
  o << "<text x=\"" << left + pw / 2 << "\" y=\"" << H - 16 << "\" text-anchor=\"middle\" font-size=\"15\">"
    << xml_escape(x_label) << "</text>\n";
  o << "<text transform=\"translate(22," << top + ph / 2 << ") rotate(-90)\" text-anchor=\"middle\" font-size=\"15\">"
    << xml_escape(y_label) << "</text>\n";
  // the series
  for (const auto& s : series) {
    o << "<polyline fill=\"none\" stroke=\"" << s.color << "\" stroke-width=\"2.5\""
      << (s.dashed ? " stroke-dasharray=\"7,4\"" : "") << " points=\"";
    for (std::size_t i = 0; i < s.x.size(); ++i) o << fmt("%.1f", X(s.x[i])) << ',' << fmt("%.1f", Y(s.y[i])) << ' ';
    o << "\"/>\n";
    for (std::size_t i = 0; i < s.x.size(); ++i)
      o << "<circle cx=\"" << fmt("%.1f", X(s.x[i])) << "\" cy=\"" << fmt("%.1f", Y(s.y[i])) << "\" r=\"4\" fill=\""
        << s.color << "\"/>\n";
  }
  if (!end_note.empty() && series.size() >= 2 && !series[0].x.empty() && !series[1].x.empty()) {
    const double xe = X(series[0].x.back()) - 12;
    const double ym = 0.5 * (Y(series[0].y.back()) + Y(series[1].y.back()));
    o << "<text x=\"" << xe << "\" y=\"" << ym + 5 << "\" text-anchor=\"end\" font-size=\"14\" font-weight=\"bold\" "
      << "fill=\"#333\">" << xml_escape(end_note) << "</text>\n";
  }
  if (!footnote.empty())
    o << "<text x=\"" << W - 8 << "\" y=\"" << H - 6 << "\" text-anchor=\"end\" font-size=\"11\" fill=\"#888\">"
      << xml_escape(footnote) << "</text>\n";
  // legend, top left inside the plot
  const double lx = left + 16, ly = top + 14, row_h = 22;
  double text_w = 0;
  for (const auto& s : series) text_w = std::max(text_w, 7.6 * s.name.size());
  o << "<rect x=\"" << lx << "\" y=\"" << ly << "\" width=\"" << 56 + text_w << "\" height=\""
    << 10 + row_h * series.size() << "\" fill=\"white\" fill-opacity=\"0.9\" stroke=\"#999\"/>\n";
  for (std::size_t i = 0; i < series.size(); ++i) {
    const double yy = ly + 16 + row_h * i;
    o << "<line x1=\"" << lx + 10 << "\" x2=\"" << lx + 40 << "\" y1=\"" << yy << "\" y2=\"" << yy << "\" stroke=\""
      << series[i].color << "\" stroke-width=\"2.5\"" << (series[i].dashed ? " stroke-dasharray=\"7,4\"" : "")
      << "/>\n";
    o << "<circle cx=\"" << lx + 25 << "\" cy=\"" << yy << "\" r=\"4\" fill=\"" << series[i].color << "\"/>\n";
    o << "<text x=\"" << lx + 48 << "\" y=\"" << yy + 4.5 << "\" font-size=\"13\">" << xml_escape(series[i].name)
      << "</text>\n";
  }
  o << "</svg>\n";
  return o.str();
}

/// One panel of a grouped bar chart: its title, the group names along x and, per bar
/// series, one value per group (NaN: not measured, drawn as no bar).
struct BarPanel {
  std::string title;
  std::vector<std::string> groups;
  std::vector<std::vector<double>> values;  // (bar series, groups)
};

/// Grouped bar charts: `panels` laid out `columns` to a row, each with a linear y axis
/// from 0, one group of bars per group name and one bar per series (`bar_names` and
/// `colors`, shared by every panel and shown once in a legend under the title). Each
/// bar carries its value (3 significant digits) written upwards above it.
inline std::string bar_chart_svg(const std::string& title, const std::string& subtitle, const std::string& y_label,
                                 const std::vector<std::string>& bar_names, const std::vector<std::string>& colors,
                                 const std::vector<BarPanel>& panels, int columns,
                                 const std::string& footnote = std::string()) {
  const double pan_w = 580, pan_h = 330, head = 104, foot = 26;
  const double left = 70, right = 14, top = 34, bottom = 44;  // inside a panel
  const int cols = std::max(1, std::min(columns, static_cast<int>(std::max<std::size_t>(1, panels.size()))));
  const int rows = static_cast<int>((panels.size() + cols - 1) / cols);
  const double W = pan_w * cols, H = head + pan_h * rows + foot;
  std::ostringstream o;
  svg_open(o, W, H, title, subtitle);
  // the legend, one row centred under the title
  double legend_w = 0;
  for (const auto& n : bar_names) legend_w += 34 + 7.6 * n.size();
  double lx = (W - legend_w) / 2;
  for (std::size_t b = 0; b < bar_names.size(); ++b) {
    o << "<rect x=\"" << lx << "\" y=\"70\" width=\"16\" height=\"14\" fill=\"" << colors[b % colors.size()]
      << "\"/>\n";
    o << "<text x=\"" << lx + 22 << "\" y=\"82\" font-size=\"13\">" << xml_escape(bar_names[b]) << "</text>\n";
    lx += 34 + 7.6 * bar_names[b].size();
  }
  for (std::size_t p = 0; p < panels.size(); ++p) {
    const BarPanel& pan = panels[p];
    const double x0 = pan_w * static_cast<double>(p % cols) + left, y0 = head + pan_h * static_cast<double>(p / cols) + top;
    const double pw = pan_w - left - right, ph = pan_h - top - bottom;
    double v_max = 0;
    for (const auto& series : pan.values)
      for (double v : series)
        if (std::isfinite(v)) v_max = std::max(v_max, v);
    double hi = 0;
    const double step = axis_step(v_max * 1.18, hi);  // room for the value labels
    auto Y = [&](double v) { return y0 + ph * (1.0 - v / hi); };
    o << "<text x=\"" << x0 + pw / 2 << "\" y=\"" << y0 - 12 << "\" text-anchor=\"middle\" font-size=\"15\" "
      << "font-weight=\"bold\">" << xml_escape(pan.title) << "</text>\n";
    for (double v = 0; v <= hi + 1e-9; v += step) {
      o << "<line x1=\"" << x0 << "\" x2=\"" << x0 + pw << "\" y1=\"" << Y(v) << "\" y2=\"" << Y(v)
        << "\" stroke=\"#dcdcdc\" stroke-width=\"1\"/>\n";
      o << "<text x=\"" << x0 - 8 << "\" y=\"" << Y(v) + 4.5 << "\" text-anchor=\"end\" font-size=\"12\">"
        << fmt("%g", v) << "</text>\n";
    }
    o << "<text transform=\"translate(" << x0 - 48 << "," << y0 + ph / 2 << ") rotate(-90)\" text-anchor=\"middle\" "
      << "font-size=\"13\">" << xml_escape(y_label) << "</text>\n";
    const std::size_t n_groups = pan.groups.size(), n_bars = pan.values.size();
    const double group_w = n_groups ? pw / static_cast<double>(n_groups) : pw;
    const double bar_w = n_bars ? 0.8 * group_w / static_cast<double>(n_bars) : 0;
    for (std::size_t g = 0; g < n_groups; ++g) {
      const double gx = x0 + group_w * static_cast<double>(g) + 0.1 * group_w;
      o << "<text x=\"" << x0 + group_w * (g + 0.5) << "\" y=\"" << y0 + ph + 20 << "\" text-anchor=\"middle\" "
        << "font-size=\"13\">" << xml_escape(pan.groups[g]) << "</text>\n";
      for (std::size_t b = 0; b < n_bars; ++b) {
        const double v = g < pan.values[b].size() ? pan.values[b][g] : NAN;
        const double bx = gx + bar_w * static_cast<double>(b), cx = bx + bar_w / 2;
        if (!std::isfinite(v)) {
          o << "<text transform=\"translate(" << fmt("%.1f", cx + 3) << "," << fmt("%.1f", y0 + ph - 4)
            << ") rotate(-90)\" font-size=\"9\" fill=\"#999\">n/a</text>\n";
          continue;
        }
        o << "<rect x=\"" << fmt("%.1f", bx) << "\" y=\"" << fmt("%.1f", Y(v)) << "\" width=\"" << fmt("%.1f", bar_w - 1)
          << "\" height=\"" << fmt("%.1f", y0 + ph - Y(v)) << "\" fill=\"" << colors[b % colors.size()] << "\"/>\n";
        o << "<text transform=\"translate(" << fmt("%.1f", cx + 3) << "," << fmt("%.1f", Y(v) - 3)
          << ") rotate(-90)\" font-size=\"10\">" << fmt("%.3g", v) << "</text>\n";
      }
    }
    o << "<rect x=\"" << x0 << "\" y=\"" << y0 << "\" width=\"" << pw << "\" height=\"" << ph
      << "\" fill=\"none\" stroke=\"black\" stroke-width=\"1.2\"/>\n";
  }
  if (!footnote.empty())
    o << "<text x=\"" << W - 8 << "\" y=\"" << H - 8 << "\" text-anchor=\"end\" font-size=\"11\" fill=\"#888\">"
      << xml_escape(footnote) << "</text>\n";
  o << "</svg>\n";
  return o.str();
}

}  // namespace kvd_bench
