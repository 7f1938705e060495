#include "effectfence/refusal_text.h"
#include "mcp/prometheus.h"

#include <catch2/catch.hpp>

#include <sstream>
#include <string>
#include <vector>

#include "mcp/decision_metrics.h"

namespace effectfence::mcp {
namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The value on the line that starts with `series ` (exactly that series), or "" if none.
std::string value_of(const std::string& text, const std::string& series) {
  for (const std::string& line : lines_of(text)) {
    if (line.compare(0, series.size() + 1, series + " ") == 0) return line.substr(series.size() + 1);
  }
  return "";
}

TEST_CASE("label values escape backslash, double quote and newline, and nothing else", "[prometheus]") {
  CHECK(PrometheusText::escape_label_value(R"(C:\dir "x")" "\nnext\ttab") == R"(C:\\dir \"x\"\nnext)" "\ttab");
  CHECK(PrometheusText::escape_label_value("plain é") == "plain é");
  // HELP text escapes backslash and newline; a double quote stays as it is.
  CHECK(PrometheusText::escape_help("a \\ b\n\"c\"") == "a \\\\ b\\n\"c\"");
}

TEST_CASE("a family is its HELP and TYPE lines, then its samples with labels in the order given", "[prometheus]") {
  PrometheusText out;
  out.family("effectfence_x_total", PrometheusText::Type::counter, "Things\nthat \\ happened");
  out.sample("effectfence_x_total", {{"ledger", "/tmp/a\"b\\c\nd"}, {"reason", "in_flight"}}, int64_t{7});
  out.family("effectfence_y", PrometheusText::Type::gauge, "A level");
  out.sample("effectfence_y", {}, 0.5);
  CHECK(out.take() ==
        "# HELP effectfence_x_total Things\\nthat \\\\ happened\n"
        "# TYPE effectfence_x_total counter\n"
        "effectfence_x_total{ledger=\"/tmp/a\\\"b\\\\c\\nd\",reason=\"in_flight\"} 7\n"
        "# HELP effectfence_y A level\n"
        "# TYPE effectfence_y gauge\n"
        "effectfence_y 0.5\n");
}

TEST_CASE("numbers: integers exactly, doubles shortest, the special values as the format spells them",
          "[prometheus]") {
  CHECK(PrometheusText::format_double(0.005) == "0.005");
  CHECK(PrometheusText::format_double(0.0001) == "0.0001");
  CHECK(PrometheusText::format_double(0.00001) == "1e-05");
  CHECK(PrometheusText::format_double(10) == "10");
  CHECK(PrometheusText::format_double(1.0 / 0.0) == "+Inf");
  CHECK(PrometheusText::format_double(-1.0 / 0.0) == "-Inf");
  CHECK(PrometheusText::format_double(0.0 / 0.0) == "NaN");
  PrometheusText out;
  out.family("big_total", PrometheusText::Type::counter, "h");
  out.sample("big_total", {}, uint64_t{18446744073709551615u});
  CHECK(value_of(out.take(), "big_total") == "18446744073709551615");
}

TEST_CASE("a histogram's buckets are cumulative, end at +Inf, and _count equals the +Inf bucket", "[prometheus]") {
  PrometheusText out;
  out.family("effectfence_decision_seconds", PrometheusText::Type::histogram, "Latency");
  out.histogram({{"tool", "fence_prepare"}}, HistogramCounts{{0.001, 0.01, 1}, {2, 0, 3, 1}, 2.75});
  const std::string text = out.take();
  CHECK(text ==
        "# HELP effectfence_decision_seconds Latency\n"
        "# TYPE effectfence_decision_seconds histogram\n"
        "effectfence_decision_seconds_bucket{tool=\"fence_prepare\",le=\"0.001\"} 2\n"
        "effectfence_decision_seconds_bucket{tool=\"fence_prepare\",le=\"0.01\"} 2\n"
        "effectfence_decision_seconds_bucket{tool=\"fence_prepare\",le=\"1\"} 5\n"
        "effectfence_decision_seconds_bucket{tool=\"fence_prepare\",le=\"+Inf\"} 6\n"
        "effectfence_decision_seconds_sum{tool=\"fence_prepare\"} 2.75\n"
        "effectfence_decision_seconds_count{tool=\"fence_prepare\"} 6\n");
}

TEST_CASE("what the format forbids is refused with the name in the message", "[prometheus]") {
  PrometheusText out;
  CHECK_THROWS_WITH(out.family("9lives", PrometheusText::Type::gauge, "h"), Catch::Contains("\"9lives\""));
  CHECK_THROWS_WITH(out.family("a-b", PrometheusText::Type::gauge, "h"), Catch::Contains("not a Prometheus metric name"));
  CHECK_THROWS_WITH(out.family("things", PrometheusText::Type::counter, "h"), Catch::Contains("_total"));
  CHECK_THROWS_WITH(out.family("level_total", PrometheusText::Type::gauge, "h"), Catch::Contains("_total"));
  CHECK_THROWS_WITH(out.sample("x", {}, int64_t{1}), Catch::Contains("before any family"));
  out.family("ok_total", PrometheusText::Type::counter, "h");
  CHECK_THROWS_WITH(out.family("ok_total", PrometheusText::Type::counter, "h"), Catch::Contains("twice"));
  CHECK_THROWS_WITH(out.sample("other_total", {}, int64_t{1}), Catch::Contains("not of the family"));
  CHECK_THROWS_WITH(out.sample("ok_total", {{"bad-label", "v"}}, int64_t{1}), Catch::Contains("label name"));
  CHECK_THROWS_WITH(out.sample("ok_total", {{"__reserved", "v"}}, int64_t{1}), Catch::Contains("label name"));
  CHECK_THROWS_WITH(out.histogram({}, HistogramCounts{{1}, {0, 0}, 0}), Catch::Contains("non-histogram"));
  out.family("h_seconds", PrometheusText::Type::histogram, "h");
  CHECK_THROWS_WITH(out.histogram({}, HistogramCounts{{1, 2}, {0, 0}, 0}), Catch::Contains("want one more"));
  CHECK_THROWS_WITH(out.histogram({{"le", "1"}}, HistogramCounts{{1}, {0, 0}, 0}), Catch::Contains("le"));
  CHECK_THROWS_WITH(out.sample("h_seconds", {}, 1.0), Catch::Contains("not of the family"));
}

TEST_CASE("decision metrics count each outcome once and time it in the bucket that holds it", "[prometheus]") {
  using std::chrono::microseconds;
  using std::chrono::milliseconds;
  DecisionMetrics m;
  m.prepared(Admitted{}, microseconds(50));                                   // le 0.0001
  m.prepared(Replayed{}, microseconds(100));                                  // le 0.0001: a bound holds its own value
  m.prepared(Refusal{Reason::in_flight, Cause::none, {}}, milliseconds(3));            // le 0.005
  m.prepared(Refusal{Reason::ledger_busy, Cause::none, {}}, std::chrono::seconds(11)); // above every bound
  m.committed(Certificate{}, milliseconds(1));
  m.committed(Refusal{Reason::lease_lost, Cause::none, {}}, milliseconds(1));
  m.aborted(Aborted{"i"}, milliseconds(2));
  m.extended(Extended{}, milliseconds(2));
  PrometheusText out;
  m.write(out, LedgerMetrics{4, 10, 1});
  const std::string text = out.take();
  CHECK(value_of(text, "effectfence_admissions_total") == "1");
  CHECK(value_of(text, "effectfence_replays_total") == "1");
  CHECK(value_of(text, "effectfence_refusals_total{tool=\"fence_prepare\",reason=\"in_flight\"}") == "1");
  CHECK(value_of(text, "effectfence_refusals_total{tool=\"fence_prepare\",reason=\"ledger_busy\"}") == "1");
  CHECK(value_of(text, "effectfence_refusals_total{tool=\"fence_commit\",reason=\"lease_lost\"}") == "1");
  CHECK(value_of(text, "effectfence_refusals_total{tool=\"fence_commit\",reason=\"in_flight\"}") == "0");
  // Replays and in_flight prevent a run; ledger_busy decided nothing.
  CHECK(value_of(text, "effectfence_prevented_total") == "2");
  CHECK(value_of(text, "effectfence_commits_total") == "1");
  CHECK(value_of(text, "effectfence_aborts_total") == "1");
  CHECK(value_of(text, "effectfence_lease_extensions_total") == "1");
  const std::string prepare = "effectfence_decision_seconds_bucket{tool=\"fence_prepare\",le=";
  CHECK(value_of(text, prepare + "\"0.0001\"}") == "2");
  CHECK(value_of(text, prepare + "\"0.0025\"}") == "2");
  CHECK(value_of(text, prepare + "\"0.005\"}") == "3");
  CHECK(value_of(text, prepare + "\"10\"}") == "3");
  CHECK(value_of(text, prepare + "\"+Inf\"}") == "4");
  CHECK(value_of(text, "effectfence_decision_seconds_count{tool=\"fence_prepare\"}") == "4");
  CHECK(value_of(text, "effectfence_decision_seconds_sum{tool=\"fence_prepare\"}") == "11.00315");
  CHECK(value_of(text, "effectfence_decision_seconds_count{tool=\"fence_commit\"}") == "2");
  CHECK(value_of(text, "effectfence_group_commit_decisions_total") == "10");
  CHECK(value_of(text, "effectfence_group_commit_transactions_total") == "4");
  CHECK(value_of(text, "effectfence_group_commit_queued_decisions") == "1");
}

}  // namespace
}  // namespace effectfence::mcp
