#include "runtime/train/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace tgc::train {

namespace {

// Shortest text that reads back as the same double.
std::string num(double v) { return std::isfinite(v) ? fmt::format("{}", v) : (std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf")); }

std::string xmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// About `n` round tick values covering [lo, hi] (1, 2 or 5 times a power of ten apart).
std::vector<double> ticks(double lo, double hi, int n) {
  if (!(hi > lo)) return {lo};
  const double raw = (hi - lo) / n;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  std::vector<double> out;
  for (double t = std::ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) out.push_back(t);
  return out;
}

void writeFile(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << text;
    f.close();
    if (!f) throw std::runtime_error(fmt::format("cannot write '{}'", tmp));
  }
  std::filesystem::rename(tmp, path);
}

}  // namespace

std::string lossCsv(const std::vector<HistoryRow>& history) {
  std::string out = "step,update,loss,grad_norm,lr,tokens\n";
  for (const HistoryRow& r : history)
    out += fmt::format("{},{},{},{},{},{}\n", r.step, r.update, num(r.loss), num(r.gradNorm),
                       num(r.lr), r.tokens);
  return out;
}

std::string validCsv(const std::vector<ValidRow>& valid) {
  std::string out = "step,loss,exact_match,bleu,perplexity,accuracy\n";
  for (const ValidRow& v : valid)
    out += fmt::format("{},{},{},{},{},{}\n", v.step, num(v.loss), num(v.exactMatch), num(v.bleu),
                       num(v.perplexity), num(v.accuracy));
  return out;
}

namespace {

// The right axis: the task's metric on a scale from 0 to `top`, with its label and tick text.
struct MetricAxis {
  std::string label;
  double top = 1;
  bool percent = false;  // ticks as 0%..100% of top
  double (*get)(const ValidRow&) = nullptr;
};

MetricAxis metricAxis(const std::string& metric, const std::vector<ValidRow>& valid) {
  MetricAxis a;
  if (metric == "bleu") {
    a = {"validation BLEU", 0, false, [](const ValidRow& v) { return v.bleu; }};
    for (const ValidRow& v : valid) a.top = std::max(a.top, v.bleu);
    a.top = a.top > 0 ? std::ceil(a.top / 5) * 5 : 5;
  } else if (metric == "perplexity") {
    a = {"validation perplexity", 0, false, [](const ValidRow& v) { return v.perplexity; }};
    // The first validations of a run can be far above the rest: the scale follows the
    // median, and larger values sit at the top edge.
    std::vector<double> p;
    for (const ValidRow& v : valid)
      if (std::isfinite(v.perplexity)) p.push_back(v.perplexity);
    std::sort(p.begin(), p.end());
    a.top = p.empty() ? 10 : std::max(2.0, std::ceil(2 * p[p.size() / 2]));
  } else if (metric == "accuracy") {
    a = {"validation accuracy", 1, true, [](const ValidRow& v) { return v.accuracy; }};
  } else if (metric == "exact_match") {
    a = {"validation exact match", 1, true, [](const ValidRow& v) { return v.exactMatch; }};
  }
  return a;
}

}  // namespace

std::string lossSvg(const std::vector<HistoryRow>& history, const std::vector<ValidRow>& valid,
                    const std::string& title, const std::string& metric) {
  constexpr double W = 800, H = 450, L = 70, R = 70, T = 40, B = 50;
  const double pw = W - L - R, ph = H - T - B;
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
      "viewBox=\"0 0 {} {}\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{}\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">{}</text>\n",
      W, H, W, H, W / 2, xmlEscape(title));

  // Finite losses set the ranges; the y axis starts at 0.
  double maxStep = 1, maxLoss = 0;
  for (const HistoryRow& r : history) {
    maxStep = std::max(maxStep, static_cast<double>(r.step));
    if (std::isfinite(r.loss)) maxLoss = std::max(maxLoss, r.loss);
  }
  for (const ValidRow& v : valid) {
    maxStep = std::max(maxStep, static_cast<double>(v.step));
    if (std::isfinite(v.loss)) maxLoss = std::max(maxLoss, v.loss);
  }
  if (maxLoss <= 0) maxLoss = 1;
  auto x = [&](double step) { return L + pw * step / maxStep; };
  auto y = [&](double loss) { return T + ph * (1 - std::clamp(loss / maxLoss, 0.0, 1.0)); };
  const MetricAxis axis = metricAxis(metric, valid);
  auto yAcc = [&](double m) { return T + ph * (1 - std::clamp(m / axis.top, 0.0, 1.0)); };

  // Axes, grid and ticks.
  s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#333\"/>\n",
                   L, T, pw, ph);
  for (double t : ticks(0, maxStep, 8))
    s += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#ddd\"/>"
        "<text x=\"{0:.1f}\" y=\"{3}\" text-anchor=\"middle\">{4}</text>\n",
        x(t), T, T + ph, T + ph + 16, num(t));
  for (double t : ticks(0, maxLoss, 6))
    s += fmt::format(
        "<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" stroke=\"#ddd\"/>"
        "<text x=\"{3}\" y=\"{4:.1f}\" text-anchor=\"end\">{5}</text>\n",
        L, y(t), L + pw, L - 6, y(t) + 4, num(t));
  s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">step</text>\n", L + pw / 2, H - 12);
  s += fmt::format(
      "<text x=\"16\" y=\"{0}\" text-anchor=\"middle\" transform=\"rotate(-90 16 {0})\">loss</text>\n",
      T + ph / 2);

  // Training loss: at most ~1000 points (each the mean of its stretch of steps), and a
  // moving average over ~2% of the run.
  auto polyline = [&](const std::vector<std::pair<double, double>>& pts, const char* color,
                      double width) {
    if (pts.empty()) return;
    s += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"{}\" points=\"", color, width);
    for (const auto& [px, py] : pts) s += fmt::format("{:.1f},{:.1f} ", px, py);
    s += "\"/>\n";
  };
  std::vector<std::pair<double, double>> raw, smooth;
  const size_t n = history.size();
  const size_t per = std::max<size_t>(1, n / 1000), window = std::max<size_t>(1, n / 50);
  double chunkSum = 0, windowSum = 0;
  size_t chunkCount = 0;
  std::vector<double> recent;  // the finite losses of the moving window, oldest first
  for (size_t i = 0; i < n; ++i) {
    const double loss = history[i].loss;
    if (std::isfinite(loss)) {
      chunkSum += loss;
      ++chunkCount;
      recent.push_back(loss);
      windowSum += loss;
      if (recent.size() > window) {
        windowSum -= recent[recent.size() - window - 1];
      }
    }
    if ((i + 1) % per != 0 && i + 1 != n) continue;
    const double px = x(static_cast<double>(history[i].step));
    if (chunkCount) raw.emplace_back(px, y(chunkSum / static_cast<double>(chunkCount)));
    if (!recent.empty())
      smooth.emplace_back(px, y(windowSum / static_cast<double>(std::min(window, recent.size()))));
    chunkSum = 0;
    chunkCount = 0;
  }
  polyline(raw, "#9ecae1", 1);
  polyline(smooth, "#08519c", 2);

  // Validation: loss as points, the task's metric (right axis) as a line.
  std::vector<std::pair<double, double>> acc;
  for (const ValidRow& v : valid) {
    if (std::isfinite(v.loss))
      s += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3.5\" fill=\"#e6550d\"/>\n",
                       x(static_cast<double>(v.step)), y(v.loss));
    if (axis.get && std::isfinite(axis.get(v)))
      acc.emplace_back(x(static_cast<double>(v.step)), yAcc(axis.get(v)));
  }
  if (axis.get) {
    polyline(acc, "#31a354", 2);
    for (double t : axis.percent ? std::vector<double>{0, 0.2, 0.4, 0.6, 0.8, 1.0} : ticks(0, axis.top, 5))
      s += fmt::format("<text x=\"{}\" y=\"{:.1f}\" fill=\"#31a354\">{}</text>\n", L + pw + 6,
                       yAcc(t) + 4, axis.percent ? fmt::format("{:.0f}%", 100 * t) : num(t));
    s += fmt::format(
        "<text x=\"{0}\" y=\"{1}\" text-anchor=\"middle\" fill=\"#31a354\" "
        "transform=\"rotate(90 {0} {1})\">{2}</text>\n",
        W - 18, T + ph / 2, axis.label);
  }

  // Legend.
  const double lx = L + 12, ly = T + 14;
  s += fmt::format(
      "<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"#9ecae1\"/><text x=\"{3}\" y=\"{4}\">training loss</text>\n"
      "<line x1=\"{0}\" y1=\"{5}\" x2=\"{2}\" y2=\"{5}\" stroke=\"#08519c\" stroke-width=\"2\"/><text x=\"{3}\" y=\"{6}\">training loss, averaged</text>\n"
      "<circle cx=\"{7}\" cy=\"{8}\" r=\"3.5\" fill=\"#e6550d\"/><text x=\"{3}\" y=\"{9}\">validation loss</text>\n",
      lx, ly, lx + 24, lx + 30, ly + 4, ly + 16, ly + 20, lx + 12, ly + 32, ly + 36);
  if (axis.get)
    s += fmt::format(
        "<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"#31a354\" stroke-width=\"2\"/>"
        "<text x=\"{3}\" y=\"{4}\">{5}</text>\n",
        lx, ly + 48, lx + 24, lx + 30, ly + 52, axis.label);
  s += "</svg>\n";
  return s;
}

void writeReports(const std::string& dir, const std::vector<HistoryRow>& history,
                  const std::vector<ValidRow>& valid, const std::string& title,
                  const std::string& metric) {
  const std::filesystem::path d(dir);
  writeFile((d / "loss.csv").string(), lossCsv(history));
  writeFile((d / "valid.csv").string(), validCsv(valid));
  writeFile((d / "loss.svg").string(), lossSvg(history, valid, title, metric));
}

}  // namespace tgc::train
