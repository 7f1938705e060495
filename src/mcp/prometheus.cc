#include "mcp/prometheus.h"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace effectfence::mcp {

const char* const kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

namespace {

bool name_char(char c, bool first, bool colon_ok) {
  const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon_ok && c == ':');
  return letter || (!first && c >= '0' && c <= '9');
}

bool valid_name(const std::string& name, bool colon_ok) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (!name_char(name[i], i == 0, colon_ok)) return false;
  }
  return true;
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

const char* type_name(PrometheusText::Type type) {
  switch (type) {
    case PrometheusText::Type::counter: return "counter";
    case PrometheusText::Type::gauge: return "gauge";
    case PrometheusText::Type::histogram: return "histogram";
  }
  return "untyped";
}

}  // namespace

std::string PrometheusText::escape_label_value(const std::string& value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string PrometheusText::escape_help(const std::string& help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string PrometheusText::format_double(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buf[64];
  // The shortest text that reads back the same, written as %g writes (as
  // Go's client library writes le: "0.0001", not "1e-04").
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value, std::chars_format::general);
  return ec == std::errc() ? std::string(buf, end) : "NaN";
}

void PrometheusText::family(const std::string& name, Type type, const std::string& help) {
  if (!valid_name(name, true)) throw std::invalid_argument("not a Prometheus metric name: \"" + name + "\"");
  // A counter's samples are name_total, and nothing else may look like one.
  if ((type == Type::counter) != ends_with(name, "_total")) {
    throw std::invalid_argument("metric \"" + name + "\": counters, and only counters, end in _total");
  }
  if (std::find(written_.begin(), written_.end(), name) != written_.end()) {
    throw std::invalid_argument("metric family \"" + name + "\" written twice");
  }
  written_.push_back(name);
  family_ = name;
  type_ = type;
  text_ += "# HELP " + name + " " + escape_help(help) + "\n";
  text_ += "# TYPE " + name + " " + type_name(type) + "\n";
}

void PrometheusText::check_sample_name(const std::string& name) const {
  if (family_.empty()) throw std::invalid_argument("sample \"" + name + "\" before any family");
  if (name == family_ && type_ != Type::histogram) return;
  if (type_ == Type::histogram) {
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      if (name == family_ + suffix) return;
    }
  }
  throw std::invalid_argument("sample \"" + name + "\" is not of the family \"" + family_ + "\"");
}

void PrometheusText::write_sample(const std::string& name, const PrometheusLabels& labels, const std::string& value) {
  check_sample_name(name);
  text_ += name;
  if (!labels.empty()) {
    text_ += '{';
    for (size_t i = 0; i < labels.size(); ++i) {
      const auto& [label, label_value] = labels[i];
      if (!valid_name(label, false) || label.compare(0, 2, "__") == 0) {
        throw std::invalid_argument("not a Prometheus label name: \"" + label + "\"");
      }
      if (i > 0) text_ += ',';
      text_ += label + "=\"" + escape_label_value(label_value) + "\"";
    }
    text_ += '}';
  }
  text_ += ' ' + value + '\n';
}

void PrometheusText::sample(const std::string& name, const PrometheusLabels& labels, int64_t value) {
  write_sample(name, labels, std::to_string(value));
}

void PrometheusText::sample(const std::string& name, const PrometheusLabels& labels, uint64_t value) {
  write_sample(name, labels, std::to_string(value));
}

void PrometheusText::sample(const std::string& name, const PrometheusLabels& labels, double value) {
  write_sample(name, labels, format_double(value));
}

void PrometheusText::histogram(const PrometheusLabels& labels, const HistogramCounts& h) {
  if (type_ != Type::histogram) throw std::invalid_argument("histogram samples in the non-histogram \"" + family_ + "\"");
  if (h.counts.size() != h.bounds.size() + 1) {
    throw std::invalid_argument("histogram \"" + family_ + "\": " + std::to_string(h.counts.size()) +
                                " counts for " + std::to_string(h.bounds.size()) + " bounds (want one more)");
  }
  for (const auto& label : labels) {
    if (label.first == "le") throw std::invalid_argument("histogram \"" + family_ + "\": the label le is its own");
  }
  PrometheusLabels with_le = labels;
  with_le.emplace_back("le", "");
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= h.bounds.size(); ++i) {
    cumulative += h.counts[i];
    with_le.back().second = i < h.bounds.size() ? format_double(h.bounds[i]) : "+Inf";
    sample(family_ + "_bucket", with_le, cumulative);
  }
  sample(family_ + "_sum", labels, h.sum);
  // The count is the +Inf bucket's, so the two always agree.
  sample(family_ + "_count", labels, cumulative);
}

}  // namespace effectfence::mcp
