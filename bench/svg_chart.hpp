// A line chart as standalone SVG (no plotting library), shared by the measuring
// programs: kvdecode-roofline's docs/figures/time_per_token.svg and kvdecode-conversation's
// docs/conversation_ttft.svg.
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
  // x: ticks every `step`, 4 to 8 intervals, a step of 1, 2, 2.5 or 5 x 10^k or a power
  // of two, whichever ends the axis closest above the data (positions like 255 get 0..256 by 32)
  double step = 1, x_hi = 1e300;
  std::vector<double> candidates;
  for (int e = -1; e <= 7; ++e)
    for (double m : {1.0, 2.0, 2.5, 5.0}) candidates.push_back(m * std::pow(10.0, e));
  for (int e = 0; e <= 24; ++e) candidates.push_back(std::ldexp(1.0, e));
  for (double c : candidates) {
    const double hi = std::ceil(std::max(x_max, 1e-9) / c) * c;
    const double intervals = hi / c;
    if (intervals >= 4 && intervals <= 8 && hi < x_hi - 1e-9) { x_hi = hi; step = c; }
  }
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
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H << "\" viewBox=\"0 0 " << W
    << ' ' << H << "\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n";
  o << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  o << "<text x=\"" << W / 2 << "\" y=\"30\" text-anchor=\"middle\" font-size=\"19\" font-weight=\"bold\">"
    << xml_escape(title) << "</text>\n";
  o << "<text x=\"" << W / 2 << "\" y=\"52\" text-anchor=\"middle\" font-size=\"13\" fill=\"#555\">"
    << xml_escape(subtitle) << "</text>\n";
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

}  // namespace kvd_bench
