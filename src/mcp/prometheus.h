// The Prometheus text exposition format, version 0.0.4: what
// `effectfence stats --prometheus` prints and the shared server's
// GET /metrics answers. Written here once so both speak it the same way.
//
//   PrometheusText out;
//   out.family("effectfence_admissions_total", PrometheusText::Type::counter, "Attempts admitted");
//   out.sample("effectfence_admissions_total", {}, 3);
//   std::string text = out.take();
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace effectfence::mcp {

// The media type of the text this writes (the Content-Type of /metrics).
extern const char* const kPrometheusContentType;

using PrometheusLabels = std::vector<std::pair<std::string, std::string>>;

// A histogram as its owner read it: counts[i] observations fell at or below
// bounds[i] and above bounds[i-1]; counts[bounds.size()] above the last.
struct HistogramCounts {
  std::vector<double> bounds;    // upper bounds, increasing, finite
  std::vector<uint64_t> counts;  // bounds.size() + 1 entries, not cumulative
  double sum = 0;
};

class PrometheusText {
 public:
  enum class Type { counter, gauge, histogram };

  // Starts a metric family: its # HELP and # TYPE lines. Throws
  // std::invalid_argument on a name the format does not allow, or a family
  // already written (the format allows each once).
  void family(const std::string& name, Type type, const std::string& help);
  // One sample line. REQUIRES: name is the current family's name, or (for a
  // histogram) its name plus _bucket, _sum or _count. Label values may hold
  // any text: backslash, double quote and newline are escaped.
  void sample(const std::string& name, const PrometheusLabels& labels, int64_t value);
  void sample(const std::string& name, const PrometheusLabels& labels, uint64_t value);
  void sample(const std::string& name, const PrometheusLabels& labels, double value);
  // The _bucket lines (cumulative, ending with le="+Inf"), _sum and _count
  // of the current histogram family, under labels (which may not hold "le").
  // Throws std::invalid_argument unless counts has bounds.size() + 1 entries.
  void histogram(const PrometheusLabels& labels, const HistogramCounts& h);

  std::string take() { return std::move(text_); }

  // Exposed for tests: the escaped forms.
  static std::string escape_label_value(const std::string& value);
  static std::string escape_help(const std::string& help);
  static std::string format_double(double value);

 private:
  void check_sample_name(const std::string& name) const;
  void write_sample(const std::string& name, const PrometheusLabels& labels, const std::string& value);

  std::string text_;
  std::string family_;
  Type type_ = Type::counter;
  std::vector<std::string> written_;  // families so far
};

}  // namespace effectfence::mcp
