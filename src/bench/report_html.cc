// report.html of `opfuse bench ops`: one self-contained page (inline CSS, inline SVG charts drawn
// here, a few lines of inline JS for filtering) — no network, because the GPU machine and CI are
// offline and a report must open anywhere as a single file.
//
// Sections: a header (device, ceilings, command, timing method, peer), utilisation by rows per op
// (MBU; MFU for matmul/attention) for every variant and torch eager/compile, decode latency bars,
// speedup of opfuse's best variant over torch.compile per op (geometric mean), and the full table
// with conditional colouring (>= 90% green ... < 30% red, ✗ for a variant that failed its check).
// Charts are static SVG so they render the same in a headless screenshot and in a browser with JS
// off; every mark carries a <title> tooltip with the exact numbers.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>

#include "bench/report.h"

namespace opfuse::bench {
namespace {

std::string Esc(const std::string& s) {
  std::string o;
  o.reserve(s.size());
  for (char ch : s) {
    switch (ch) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&#39;"; break;
      default: o += ch;
    }
  }
  return o;
}

std::string Us(double v) {
  if (!Has(v)) return "—";
  return v < 10 ? fmt::format("{:.2f}", v) : v < 1000 ? fmt::format("{:.1f}", v) : fmt::format("{:.0f}", v);
}
std::string Pct(double v) { return Has(v) ? fmt::format("{:.1f}%", 100 * v) : "—"; }
std::string Fixed(double v, int digits) { return Has(v) ? fmt::format("{:.{}f}", v, digits) : "—"; }
std::string Bytes(int64_t b) {
  const double d = static_cast<double>(b);
  if (d >= 1e9) return fmt::format("{:.2f} GB", d / 1e9);
  if (d >= 1e6) return fmt::format("{:.2f} MB", d / 1e6);
  if (d >= 1e3) return fmt::format("{:.1f} kB", d / 1e3);
  return fmt::format("{} B", b);
}
std::string Flops(int64_t f) {
  const double d = static_cast<double>(f);
  if (f == 0) return "0";
  if (d >= 1e12) return fmt::format("{:.2f} T", d / 1e12);
  if (d >= 1e9) return fmt::format("{:.2f} G", d / 1e9);
  if (d >= 1e6) return fmt::format("{:.2f} M", d / 1e6);
  if (d >= 1e3) return fmt::format("{:.1f} k", d / 1e3);
  return fmt::format("{}", f);
}

// Utilisation class for conditional colouring.
const char* UClass(double u) {
  if (!Has(u)) return "";
  if (u >= 0.9) return "u90";
  if (u >= 0.7) return "u70";
  if (u >= 0.5) return "u50";
  if (u >= 0.3) return "u30";
  return "ulo";
}

// The 1-2-5 x 10^k step nearest above `raw`: round axis ticks.
double NiceStep(double raw) {
  if (!(raw > 0)) return 1;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * p >= raw) return m * p;
  return 10 * p;
}

// 16384 -> "16k": axis labels that fit.
std::string RowsLabel(int64_t rows) {
  return rows >= 1024 && rows % 1024 == 0 ? fmt::format("{}k", rows / 1024) : fmt::format("{}", rows);
}

bool ComputeBound(const std::string& op) { return op == "matmul" || op == "attention"; }

struct Series {
  std::string key, label, color;
  bool dashed = false;
};
const std::vector<Series>& AllSeries() {
  static const std::vector<Series> k = {{"unfused", "opfuse unfused", "#8c8c8c", false},
                                        {"library", "opfuse library", "#1f77b4", false},
                                        {"jit", "opfuse jit", "#ff7f0e", false},
                                        {"torch_eager", "torch eager", "#2ca02c", true},
                                        {"torch_compile", "torch.compile", "#9467bd", true}};
  return k;
}

// One point of a series for a case: µs, utilisation, and whether the variant failed its check.
struct Point {
  double us = kNaN, util = kNaN;
  bool wrong = false;
  std::string error;
};

Point PointFor(const BenchReport& r, const CaseResult& c, const std::string& key) {
  Point p;
  if (key == "torch_eager" || key == "torch_compile") {
    if (!c.peer) return p;
    p.us = key == "torch_eager" ? c.peer->eager_us : c.peer->compile_us;
    p.error = key == "torch_eager" ? c.peer->eager_error : c.peer->compile_error;
  } else {
    const VariantResult* v = c.Find(key);
    if (!v) return p;
    p.error = v->error;
    if (v->measured()) p.us = v->us;
    p.wrong = v->correct.has_value() && !*v->correct;
  }
  if (Has(p.us) && p.us > 0) {
    if (ComputeBound(c.op)) {
      const double g = r.ceilings.GemmFor(c.dtype);
      if (Has(g) && g > 0) p.util = static_cast<double>(c.flops) / p.us / 1e6 / g;
    } else if (Has(r.ceilings.copy_gbps) && r.ceilings.copy_gbps > 0) {
      p.util = static_cast<double>(c.bytes) / p.us / 1e3 / r.ceilings.copy_gbps;
    }
  }
  return p;
}

std::string Legend(bool with_peer) {
  std::string o = "<div class=\"legend\">";
  for (const auto& s : AllSeries()) {
    if (!with_peer && s.dashed) continue;
    o += fmt::format(
        "<span class=\"key\"><svg width=\"26\" height=\"10\"><line x1=\"1\" y1=\"5\" x2=\"25\" y2=\"5\" stroke=\"{}\" "
        "stroke-width=\"3\"{}/></svg>{}</span>",
        s.color, s.dashed ? " stroke-dasharray=\"5,3\"" : "", Esc(s.label));
  }
  o += "<span class=\"key\"><span class=\"bad\">✗</span> failed its correctness check</span></div>\n";
  return o;
}

// ---------------------------------------------------------------- utilisation small multiples

std::string UtilChart(const BenchReport& r, const std::vector<const CaseResult*>& cs, bool with_peer) {
  const CaseResult& first = *cs.front();
  const bool cb = ComputeBound(first.op);
  std::vector<int64_t> rows;
  for (const auto* c : cs) rows.push_back(c->rows);
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  const double W = 330, H = 210, l = 44, rt = 16, t = 26, b = 34;
  const double pw = W - l - rt, ph = H - t - b;
  double ymax = 1.0;
  std::map<std::string, std::vector<std::pair<size_t, Point>>> series;
  for (const auto& s : AllSeries()) {
    if (!with_peer && s.dashed) continue;
    for (const auto* c : cs) {
      Point p = PointFor(r, *c, s.key);
      const size_t xi = static_cast<size_t>(std::find(rows.begin(), rows.end(), c->rows) - rows.begin());
      if (Has(p.util)) ymax = std::max(ymax, p.util);
      series[s.key].push_back({xi, p});
    }
  }
  if (ymax > 1.0) ymax = std::ceil(ymax * 1.05 * 4) / 4;  // beyond 100% (L2-resident data): round up to a quarter
  auto X = [&](size_t i) { return l + pw * (rows.size() == 1 ? 0.5 : static_cast<double>(i) / (rows.size() - 1)); };
  auto Y = [&](double u) { return t + ph * (1 - u / ymax); };
  std::string o = fmt::format("<svg class=\"chart\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" role=\"img\">", W, H, W, H);
  o += fmt::format("<text x=\"{}\" y=\"16\" class=\"ctitle\">{} · {} · h={}</text>", l, Esc(first.op), Esc(first.dtype),
                   first.width);
  // Grid: quarters of the y range, the 100% line dashed and darker.
  for (double u = 0; u <= ymax + 1e-9; u += ymax > 2 ? 0.5 : 0.25) {
    o += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" class=\"{}\"/>", l, Y(u), l + pw, Y(u),
                     std::abs(u - 1) < 1e-9 ? "ref" : "grid");
    o += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"ylab\">{:.0f}%</text>", l - 4, Y(u) + 3, u * 100);
  }
  o += fmt::format("<text x=\"10\" y=\"{:.1f}\" class=\"axis\" transform=\"rotate(-90 10 {:.1f})\">{}</text>", t + ph / 2,
                   t + ph / 2, cb ? "MFU" : "MBU");
  // Decode | prefill boundary.
  for (size_t i = 0; i + 1 < rows.size(); ++i)
    if (PhaseOf(rows[i]) == "decode" && PhaseOf(rows[i + 1]) == "prefill") {
      const double x = (X(i) + X(i + 1)) / 2;
      o += fmt::format("<line x1=\"{:.1f}\" y1=\"{}\" x2=\"{:.1f}\" y2=\"{:.1f}\" class=\"phase\"/>", x, t, x, t + ph);
    }
  for (size_t i = 0; i < rows.size(); ++i)
    o += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"xlab\">{}</text>", X(i), t + ph + 14, RowsLabel(rows[i]));
  o += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"axis\">rows</text>", l + pw / 2, H - 4);
  for (const auto& s : AllSeries()) {
    auto it = series.find(s.key);
    if (it == series.end()) continue;
    std::string pts;
    for (const auto& [xi, p] : it->second)
      if (Has(p.util)) pts += fmt::format("{:.1f},{:.1f} ", X(xi), Y(p.util));
    if (!pts.empty())
      o += fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"{}/>", pts, s.color,
                       s.dashed ? " stroke-dasharray=\"5,3\"" : "");
    for (const auto& [xi, p] : it->second) {
      if (!Has(p.util)) continue;
      const std::string tip = fmt::format("{} rows={}: {} µs, {} {}{}", s.label, rows[xi], Us(p.us), cb ? "MFU" : "MBU",
                                          Pct(p.util), p.wrong ? " — FAILED correctness check" : "");
      if (p.wrong)
        o += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"badmark\"><title>{}</title>✗</text>", X(xi), Y(p.util) + 4,
                         Esc(tip));
      else
        o += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"><title>{}</title></circle>", X(xi),
                         Y(p.util), s.color, Esc(tip));
    }
  }
  o += "</svg>";
  return o;
}

// ---------------------------------------------------------------- decode latency

std::string DecodeChart(const BenchReport& r, int64_t rows, bool with_peer) {
  std::vector<const CaseResult*> cs;
  for (const auto& c : r.cases)
    if (c.phase == "decode" && c.rows == rows) cs.push_back(&c);
  std::vector<const Series*> ss;
  for (const auto& s : AllSeries())
    if (with_peer || !s.dashed) ss.push_back(&s);
  double xmax = 0;
  for (const auto* c : cs)
    for (const auto* s : ss) {
      Point p = PointFor(r, *c, s->key);
      if (Has(p.us)) xmax = std::max(xmax, p.us);
    }
  if (xmax <= 0) xmax = 1;
  const double step = NiceStep(xmax / 5);
  xmax = std::ceil(xmax * 1.08 / step) * step;
  const double label_w = 190, bar_w = 640, bh = 9, gap = 10, top = 24;
  const double group_h = bh * static_cast<double>(ss.size()) + gap;
  const double H = top + group_h * static_cast<double>(cs.size()) + 24, W = label_w + bar_w + 70;
  std::string o = fmt::format("<svg class=\"chart\" width=\"{}\" height=\"{:.0f}\" viewBox=\"0 0 {} {:.0f}\" role=\"img\">",
                              W, H, W, H);
  // x grid at a 1-2-5 step.
  for (double v = 0; v <= xmax + 1e-9; v += step) {
    const double x = label_w + bar_w * v / xmax;
    o += fmt::format("<line x1=\"{:.1f}\" y1=\"{}\" x2=\"{:.1f}\" y2=\"{:.1f}\" class=\"grid\"/>", x, top - 6, x, H - 20);
    o += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"xlab\">{} µs</text>", x, H - 6, Us(v));
  }
  o += fmt::format("<text x=\"{}\" y=\"14\" class=\"ctitle\">device µs per call, rows = {} (shorter is better)</text>",
                   label_w, rows);
  for (size_t gi = 0; gi < cs.size(); ++gi) {
    const CaseResult& c = *cs[gi];
    const double gy = top + group_h * static_cast<double>(gi);
    o += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"blab\">{} h={}</text>", label_w - 6,
                     gy + bh * static_cast<double>(ss.size()) / 2 + 4, Esc(c.op), c.width);
    for (size_t si = 0; si < ss.size(); ++si) {
      Point p = PointFor(r, c, ss[si]->key);
      const double y = gy + bh * static_cast<double>(si);
      if (!Has(p.us)) continue;
      const double w = std::max(1.0, bar_w * p.us / xmax);
      const std::string tip = fmt::format("{} {}: {} µs{}", c.id, ss[si]->label, Us(p.us), p.wrong ? " — FAILED correctness check" : "");
      o += fmt::format("<rect x=\"{}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\"{}><title>{}</title></rect>",
                       label_w, y, w, bh - 1, ss[si]->color, ss[si]->dashed ? " fill-opacity=\"0.55\"" : "", Esc(tip));
      o += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"{}\">{}{}</text>", label_w + w + 3, y + bh - 1,
                       p.wrong ? "vlab badtxt" : "vlab", Us(p.us), p.wrong ? " ✗" : "");
    }
  }
  o += "</svg>";
  return o;
}

// ---------------------------------------------------------------- speedup vs torch.compile

std::string SpeedupChart(const BenchReport& r) {
  // Geometric mean over the cases of each (op, phase) that have both numbers.
  std::vector<std::string> ops;
  std::map<std::pair<std::string, std::string>, std::pair<double, int>> acc;  // log sum, count
  for (const auto& c : r.cases) {
    if (std::find(ops.begin(), ops.end(), c.op) == ops.end()) ops.push_back(c.op);
    if (!Has(c.compile_over_best) || c.compile_over_best <= 0) continue;
    auto& a = acc[{c.op, c.phase}];
    a.first += std::log2(c.compile_over_best);
    ++a.second;
  }
  if (acc.empty()) return "";
  double lo = -2, hi = 2;  // log2 range: at least 0.25x .. 4x
  for (const auto& [k, a] : acc) {
    const double g = a.first / a.second;
    lo = std::min(lo, std::floor(g));
    hi = std::max(hi, std::ceil(g));
  }
  const double W = std::max(700.0, 60.0 * static_cast<double>(ops.size()) + 80), H = 300, l = 56, t = 26, b = 70;
  const double pw = W - l - 10, ph = H - t - b, slot = pw / static_cast<double>(ops.size());
  auto Y = [&](double lg) { return t + ph * (hi - lg) / (hi - lo); };
  std::string o = fmt::format("<svg class=\"chart\" width=\"{:.0f}\" height=\"{}\" viewBox=\"0 0 {:.0f} {}\" role=\"img\">",
                              W, H, W, H);
  o += fmt::format("<text x=\"{}\" y=\"16\" class=\"ctitle\">torch.compile µs ÷ opfuse best µs, geometric mean per op "
                   "(above 1× = opfuse faster)</text>",
                   l);
  for (double lg = lo; lg <= hi + 1e-9; lg += 1) {
    o += fmt::format("<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" class=\"{}\"/>", l, Y(lg), l + pw, Y(lg),
                     lg == 0 ? "ref" : "grid");
    o += fmt::format("<text x=\"{}\" y=\"{:.1f}\" class=\"ylab\">{}×</text>", l - 4, Y(lg) + 3,
                     lg >= 0 ? fmt::format("{:.0f}", std::exp2(lg)) : fmt::format("{:.3g}", std::exp2(lg)));
  }
  const char* colors[2] = {"#17becf", "#d62728"};
  const char* phases[2] = {"decode", "prefill"};
  for (size_t i = 0; i < ops.size(); ++i) {
    const double x0 = l + slot * static_cast<double>(i);
    for (int ph_i = 0; ph_i < 2; ++ph_i) {
      auto it = acc.find({ops[i], phases[ph_i]});
      if (it == acc.end()) continue;
      const double g = it->second.first / it->second.second;
      const double bw = std::min(22.0, slot * 0.36), x = x0 + slot / 2 - bw + bw * ph_i;
      const double y0 = Y(0), y1 = Y(g);
      o += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\"><title>{} {}: {:.2f}× "
                       "(geomean of {} cases)</title></rect>",
                       x, std::min(y0, y1), bw - 2, std::max(1.0, std::abs(y1 - y0)), colors[ph_i], Esc(ops[i]),
                       phases[ph_i], std::exp2(g), it->second.second);
      o += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"vlabc\">{:.2f}</text>", x + (bw - 2) / 2,
                       g >= 0 ? y1 - 3 : y1 + 10, std::exp2(g));
    }
    o += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"xlab\" transform=\"rotate(-35 {:.1f} {:.1f})\">{}</text>",
                     x0 + slot / 2, t + ph + 16, x0 + slot / 2, t + ph + 16, Esc(ops[i]));
  }
  o += fmt::format("<rect x=\"{:.1f}\" y=\"{}\" width=\"10\" height=\"10\" fill=\"{}\"/><text x=\"{:.1f}\" y=\"{}\" "
                   "class=\"lkey\">decode</text>",
                   W - 170, H - 16, colors[0], W - 156, H - 7);
  o += fmt::format("<rect x=\"{:.1f}\" y=\"{}\" width=\"10\" height=\"10\" fill=\"{}\"/><text x=\"{:.1f}\" y=\"{}\" "
                   "class=\"lkey\">prefill</text>",
                   W - 90, H - 16, colors[1], W - 76, H - 7);
  o += "</svg>";
  return o;
}

// ---------------------------------------------------------------- page parts

const char* kStyle = R"CSS(
body{font:13px/1.4 -apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;margin:0 24px 40px;color:#1b1f24;background:#fff}
h1{font-size:22px;margin:18px 0 4px}h2{font-size:17px;margin:26px 0 8px;border-bottom:1px solid #d0d7de;padding-bottom:4px}
.banner{padding:8px 12px;margin:8px 0;border-radius:4px;font-weight:600}
.synthetic{background:#fff3cd;border:1px solid #e0b000}.incomplete{background:#ffe0e0;border:1px solid #d33}
table.meta{border-collapse:collapse;margin:6px 0}table.meta th{text-align:left;padding:2px 12px 2px 0;color:#57606a;font-weight:600;vertical-align:top}
table.meta td{padding:2px 0}code{font:12px ui-monospace,Menlo,Consolas,monospace;background:#f6f8fa;padding:1px 4px;border-radius:3px;word-break:break-all}
.grid-charts{display:flex;flex-wrap:wrap;gap:8px}.chart{background:#fbfcfd;border:1px solid #e1e4e8;border-radius:4px}
.chart .grid{stroke:#e6e9ed;stroke-width:1}.chart .ref{stroke:#9aa4ae;stroke-width:1;stroke-dasharray:4,3}.chart .phase{stroke:#c0c6cc;stroke-dasharray:2,3}
.chart text{font-size:10px;fill:#3b434b}.chart .ctitle{font-size:12px;font-weight:600;fill:#1b1f24}
.chart .ylab{text-anchor:end}.chart .xlab{text-anchor:middle}.chart .axis{font-size:10px;fill:#57606a;text-anchor:middle}
.chart .blab{text-anchor:end;font-size:10px}.chart .lkey{font-size:11px;text-anchor:start}.chart .vlab{font-size:9px;fill:#57606a}.chart .vlabc{font-size:9px;fill:#3b434b;text-anchor:middle}
.chart .badmark{font-size:13px;font-weight:700;fill:#d0021b;text-anchor:middle}.chart .badtxt{fill:#d0021b;font-weight:700}
.legend{margin:4px 0 8px}.legend .key{margin-right:16px;white-space:nowrap}.legend svg{vertical-align:middle;margin-right:4px}
.bad{color:#d0021b;font-weight:700}.good{color:#1a7f37}.muted{color:#8c959f}.note{color:#57606a;font-size:12px}
table.results{border-collapse:collapse;font-size:12px}table.results th{position:sticky;top:0;background:#f6f8fa;border-bottom:2px solid #d0d7de;padding:4px 5px;text-align:right;white-space:nowrap}
table.results td{padding:2px 5px;border-bottom:1px solid #eaeef2;text-align:right;white-space:nowrap}
table.results td.l,table.results th.l{text-align:left}table.results td.note{white-space:normal;min-width:200px;max-width:320px;font-size:11px}
table.results td.dim{color:#afb8c1}table.results td.wrap{white-space:normal;max-width:600px}table.results tr.first td{border-top:1px solid #c8d1da}
table.results td.cont{color:#afb8c1}
.u90{background:#c8f0cf}.u70{background:#e4f5c8}.u50{background:#fff1b8}.u30{background:#ffdcb8}.ulo{background:#ffd0d0}
.scroll{overflow-x:auto}.filter{margin:4px 0 8px}.filter input{width:320px;padding:3px 6px}
ul.skipped{margin:4px 0;padding-left:18px}
)CSS";

const char* kScript = R"JS(
function ofFilter(){var q=document.getElementById('flt').value.toLowerCase();var rows=document.querySelectorAll('table.results tbody tr');
for(var i=0;i<rows.length;i++){var id=rows[i].getAttribute('data-id')||'';rows[i].style.display=id.toLowerCase().indexOf(q)>=0?'':'none';}}
function ofDecode(){var v=document.getElementById('drows').value;var cs=document.querySelectorAll('.decode-chart');
for(var i=0;i<cs.length;i++){cs[i].style.display=cs[i].getAttribute('data-rows')==v?'':'none';}}
)JS";

std::string MetaTable(const BenchReport& r) {
  std::string o = "<table class=\"meta\">";
  auto row = [&](const std::string& k, const std::string& v_html) {
    o += "<tr><th>" + Esc(k) + "</th><td>" + v_html + "</td></tr>";
  };
  row("device", Esc(fmt::format("{} ({}, {} SMs, {:.0f} MiB L2, {:.0f} GiB)", r.device.name, r.device.arch,
                                r.device.sm_count, static_cast<double>(r.device.l2_bytes) / (1 << 20),
                                static_cast<double>(r.device.memory_bytes) / (1ull << 30))));
  row("driver / runtime", Esc(r.device.driver + " / " + r.device.runtime));
  row("date", Esc(r.date));
  row("command", "<code>" + Esc(r.command) + "</code>");
  row("dtype", Esc(r.dtype));
  row("copy ceiling",
      Esc(fmt::format("{:.0f} GB/s (MBU denominator; 16-byte copy kernel {:.0f} GB/s, cudaMemcpy D2D {:.0f} GB/s, over "
                      "{:.2f} GiB, bytes read + written)",
                      r.ceilings.copy_gbps, r.ceilings.copy_kernel_gbps, r.ceilings.memcpy_gbps,
                      static_cast<double>(r.ceilings.copy_bytes) / (1ull << 30))));
  std::string gemm;
  for (const auto& [k, v] : r.ceilings.gemm_tflops) gemm += fmt::format("{}{} {:.0f}", gemm.empty() ? "" : ", ", k, v);
  row("GEMM ceiling", Esc(fmt::format("{} TFLOP/s (cuBLASLt {}×{}×{}; MFU denominator for the case dtype)", gemm,
                                      r.ceilings.gemm_m, r.ceilings.gemm_n, r.ceilings.gemm_k)));
  if (Has(r.ceilings.event_floor_us))
    row("event floor", Esc(fmt::format("{:.2f} µs: an empty kernel timed like a prefill-size case (gate, start event, one "
                                       "launch, end event) — the fixed cost inside every per-call µs",
                                       r.ceilings.event_floor_us)));
  std::string timing;
  if (r.timing.is_object())
    for (auto it = r.timing.begin(); it != r.timing.end(); ++it)
      timing += fmt::format("{}{}: {}", timing.empty() ? "" : "; ", it.key(),
                            it.value().is_string() ? it.value().get<std::string>() : it.value().dump());
  row("timing", Esc(timing));
  if (r.peer) {
    row("peer", Esc(fmt::format("PyTorch {} (CUDA {}) on {}, driver {}: {} cases matched{}", r.peer->torch, r.peer->cuda,
                                r.peer->device, r.peer->driver, r.peer->matched,
                                r.peer->unmatched.empty() ? "" : fmt::format(", {} unmatched", r.peer->unmatched.size()))));
    row("peer method", Esc(r.peer->method));
  } else {
    row("peer", "<span class=\"muted\">none — run tools/bench_peer.py on the same GPU and merge with "
                "<code>opfuse bench report --dir DIR --peer peer.json</code></span>");
  }
  o += "</table>\n";
  return o;
}

std::string ResultsTable(const BenchReport& r, bool with_peer) {
  std::string o =
      "<div class=\"filter\">filter by id: <input id=\"flt\" type=\"text\" placeholder=\"e.g. rmsnorm or rows=32\" "
      "oninput=\"ofFilter()\"></div>\n<div class=\"scroll\"><table class=\"results\"><thead><tr><th class=\"l\">case</th><th "
      "class=\"l\">variant</th><th>bytes</th><th>flops</th><th>µs</th><th>min / p90</th><th>GB/s</th><th>TFLOP/s</"
      "th><th>MBU</th><th>MFU</th><th>host µs</th><th>kernels</th><th class=\"l\">correct</th>";
  if (with_peer) o += "<th>eager µs</th><th>compile µs</th><th>vs eager</th><th>vs compile</th>";
  o += "<th class=\"l\">notes</th></tr></thead><tbody>\n";
  for (const auto& c : r.cases) {
    bool first = true;
    for (const auto& v : c.variants) {
      o += fmt::format("<tr data-id=\"{}\"{}>", Esc(c.id), first ? " class=\"first\"" : "");
      o += fmt::format("<td class=\"l{}\">{}</td><td class=\"l\">{}</td>", first ? "" : " cont", Esc(c.id), Esc(v.name));
      if (first) o += fmt::format("<td>{}</td><td>{}</td>", Bytes(c.bytes), Flops(c.flops));
      else o += "<td></td><td></td>";
      std::string notes;
      if (!v.same_as.empty()) notes += "same kernels as " + v.same_as + "; ";
      if (!v.method.empty()) notes += v.method + "; ";
      if (!v.note.empty()) notes += v.note + "; ";
      if (!v.check_error.empty()) notes = "check: " + v.check_error + "; " + notes;
      if (first && c.peer && !c.peer->flags.empty())
        notes = fmt::format("PEER FLAGGED: {}; ", fmt::join(c.peer->flags, "; ")) + notes;
      if (first && c.peer && !c.peer->impl.empty()) notes += "torch: " + c.peer->impl + "; ";
      if (first && Has(c.copy_same_us))
        notes += fmt::format("a copy of the same bytes: {} µs ({}), the best variant {} of its bandwidth; ", Us(c.copy_same_us),
                             c.copy_same_method, Pct(c.best_of_copy_same));
      if (!v.kernels.empty()) notes += fmt::format("{}", fmt::join(v.kernels, ", "));
      if (!v.error.empty()) {
        o += fmt::format("<td colspan=\"9\" class=\"l bad wrap\">error: {}</td>", Esc(v.error));
      } else {
        o += fmt::format("<td>{}</td><td>{} / {}</td><td>{}</td><td>{}</td>", Us(v.us), Us(v.us_min), Us(v.us_p90),
                         Fixed(v.gbps, 0), Fixed(v.tflops, v.tflops >= 10 ? 0 : 2));
        o += fmt::format("<td class=\"{}\">{}</td>", ComputeBound(c.op) ? "dim" : UClass(v.mbu), Pct(v.mbu));
        o += fmt::format("<td class=\"{}\">{}</td>", ComputeBound(c.op) ? UClass(v.mfu) : "dim", Pct(v.mfu));
        o += fmt::format("<td>{}</td><td>{}</td>", Us(v.host_us), v.kernels_per_run);
        if (!v.correct.has_value())
          o += "<td class=\"l muted\">not checked</td>";
        else if (*v.correct)
          o += fmt::format("<td class=\"l good\">✓ {:.1e}</td>", v.rel_err);
        else
          o += fmt::format("<td class=\"l bad\" title=\"{}\">✗ {}</td>", Esc(v.check_error),
                           Has(v.rel_err) ? fmt::format("{:.1e}", v.rel_err) : "");
      }
      if (with_peer) {
        const PeerResult p = c.peer.value_or(PeerResult{});
        std::string e = first ? Us(p.eager_us) : "", k = first ? Us(p.compile_us) : "";
        if (first && !p.eager_error.empty()) e = "<span class=\"bad\" title=\"" + Esc(p.eager_error) + "\">error</span>";
        if (first && !p.compile_error.empty()) k = "<span class=\"bad\" title=\"" + Esc(p.compile_error) + "\">error</span>";
        if (first && !p.flags.empty()) {
          const std::string warn = fmt::format(" <span class=\"bad\" title=\"{}\">⚠</span>", Esc(fmt::format("{}", fmt::join(p.flags, "; "))));
          e += warn;
          k += warn;
        }
        o += fmt::format("<td>{}</td><td>{}</td><td>{}</td><td>{}</td>", e, k,
                         Has(v.speedup_vs_eager) ? fmt::format("{:.2f}×", v.speedup_vs_eager) : "—",
                         Has(v.speedup_vs_compile) ? fmt::format("{:.2f}×", v.speedup_vs_compile) : "—");
      }
      o += fmt::format("<td class=\"l note\">{}</td></tr>\n", Esc(notes));
      first = false;
    }
  }
  o += "</tbody></table></div>\n";
  return o;
}

}  // namespace

std::string RenderHtml(const BenchReport& r) {
  const bool with_peer = r.peer.has_value();
  std::string o = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  o += fmt::format("<title>opfuse bench ops — {}{}</title>\n", Esc(r.device.name), r.synthetic ? " (synthetic)" : "");
  o += "<style>" + std::string(kStyle) + "</style>\n</head>\n<body>\n";
  o += "<h1>opfuse bench ops</h1>\n";
  if (r.synthetic)
    o += "<div class=\"banner synthetic\">SYNTHETIC DATA — made up to test the report writer; not a measurement.</div>\n";
  if (!r.complete)
    o += "<div class=\"banner incomplete\">INCOMPLETE run: " + Esc(r.aborted.empty() ? "stopped early" : r.aborted) +
         "</div>\n";
  o += MetaTable(r);
  o += "<p class=\"nav\"><a href=\"#utilisation\">utilisation</a> · <a href=\"#decode\">decode latency</a> · <a "
       "href=\"#speedup\">speedup vs torch.compile</a> · <a href=\"#results\">all results</a></p>\n";

  // Summary counts.
  int measured = 0, wrong = 0, errors = 0;
  std::vector<std::string> wrong_ids;
  for (const auto& c : r.cases)
    for (const auto& v : c.variants) {
      if (!v.error.empty()) ++errors;
      if (v.measured()) ++measured;
      if (v.correct && !*v.correct) {
        ++wrong;
        wrong_ids.push_back(c.id + " [" + v.name + "]");
      }
    }
  o += fmt::format("<p>{} cases, {} variants measured, <span class=\"{}\">{} failed the correctness check</span>, "
                   "<span class=\"{}\">{} could not run</span>.</p>\n",
                   r.cases.size(), measured, wrong ? "bad" : "good", wrong, errors ? "bad" : "good", errors);
  if (!wrong_ids.empty()) {
    o += "<ul class=\"skipped\">";
    for (const auto& id : wrong_ids) o += "<li class=\"bad\">✗ " + Esc(id) + "</li>";
    o += "</ul>\n";
  }
  if (!r.skipped.empty()) {
    o += "<p class=\"note\">Skipped on purpose:</p><ul class=\"skipped\">";
    for (const auto& s : r.skipped) o += "<li class=\"note\">" + Esc(s.id) + ": " + Esc(s.reason) + "</li>";
    o += "</ul>\n";
  }

  // Utilisation by rows, one chart per (op, dtype, width) in case order.
  o += "<h2 id=\"utilisation\">Utilisation by rows</h2>\n<p class=\"note\">MBU = (bytes / µs) ÷ copy ceiling; MFU (matmul, attention) = "
       "(flops / µs) ÷ GEMM ceiling. Left of the dotted line: decode sizes (CUDA-graph replay); right: prefill.</p>\n";
  o += Legend(with_peer);
  o += "<div class=\"grid-charts\">\n";
  std::vector<std::string> keys;
  std::map<std::string, std::vector<const CaseResult*>> groups;
  for (const auto& c : r.cases) {
    const std::string k = fmt::format("{}|{}|{}", c.op, c.dtype, c.width);
    if (!groups.count(k)) keys.push_back(k);
    groups[k].push_back(&c);
  }
  for (const auto& k : keys) o += UtilChart(r, groups[k], with_peer) + "\n";
  o += "</div>\n";

  // Decode latency.
  std::vector<int64_t> decode_rows;
  for (const auto& c : r.cases)
    if (c.phase == "decode" && std::find(decode_rows.begin(), decode_rows.end(), c.rows) == decode_rows.end())
      decode_rows.push_back(c.rows);
  std::sort(decode_rows.begin(), decode_rows.end());
  o += "<h2 id=\"decode\">Decode latency</h2>\n";
  if (decode_rows.empty()) {
    o += "<p class=\"note\">No decode-size cases in this run.</p>\n";
  } else {
    o += "<div class=\"filter\">rows: <select id=\"drows\" onchange=\"ofDecode()\">";
    for (int64_t rw : decode_rows) o += fmt::format("<option value=\"{}\">{}</option>", rw, rw);
    o += "</select></div>\n";
    o += Legend(with_peer);
    for (size_t i = 0; i < decode_rows.size(); ++i)
      o += fmt::format("<div class=\"decode-chart\" data-rows=\"{}\"{}>{}</div>\n", decode_rows[i],
                       i ? " style=\"display:none\"" : "", DecodeChart(r, decode_rows[i], with_peer));
  }

  // Speedup vs torch.compile.
  o += "<h2 id=\"speedup\">Speedup vs torch.compile</h2>\n";
  const std::string sp = with_peer ? SpeedupChart(r) : "";
  if (sp.empty())
    o += "<p class=\"note\">No torch.compile timings in this report. Run <code>tools/bench_peer.py --cases "
         "DIR/cases.json --out peer.json</code> on the same GPU, then <code>opfuse bench report --dir DIR --peer "
         "peer.json</code>.</p>\n";
  else
    o += sp + "\n";

  o += "<h2 id=\"results\">All results</h2>\n<p class=\"note\">µs: median device time per call (min, p90 beside it); host µs: wall "
       "time of one executor Run call on the host; MBU colours: <span class=\"u90\">&ge; 90%</span> <span "
       "class=\"u70\">&ge; 70%</span> <span class=\"u50\">&ge; 50%</span> <span class=\"u30\">&ge; 30%</span> <span "
       "class=\"ulo\">&lt; 30%</span>; ✗ = output differs from the CPU reference beyond the dtype's bound.</p>\n";
  o += ResultsTable(r, with_peer);
  o += "<script>" + std::string(kScript) + "</script>\n</body>\n</html>\n";
  return o;
}

}  // namespace opfuse::bench
