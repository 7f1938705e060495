// The library example from README.md, kept compiling and working, and kept
// the example README.md shows.
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "effectfence/fence.h"
#include "effectfence/maintenance.h"
#include "effectfence/refusal_text.h"
#include "support/scoped_env.h"
#include "support/temp_dir.h"

using namespace effectfence;

TEST_CASE("the README's library example runs the effect once", "[fence][readme]") {
  effectfence::testing::TempDir dir;
  // The README opens the ledger the environment names.
  const std::string ledger = dir.file("ledger.sqlite");
  effectfence::testing::ScopedEnv env(effectfence::testing::Env{{"EFFECTFENCE_LEDGER", ledger}});
  int charges = 0;
  auto run_the_charge = [&] { return Json{{"charge_id", "ch_" + std::to_string(++charges)}}; };
  Json used;
  auto use = [&](const Json& result) { used = result; };
  std::string logged;
  auto log = [&](const std::string& message) { logged = message; };

  auto opened = Fence::open(Settings::from_environment());
  if (auto* error = std::get_if<OpenError>(&opened)) FAIL(error->message);
  Fence& fence = *std::get<std::unique_ptr<Fence>>(opened);
  CHECK_THAT(fence.describe_ledger(), Catch::Contains(ledger));
  for (int attempt = 0; attempt < 3; ++attempt) {
    PrepareRequest charge;
    charge.intent = "charge:order-123";  // the logical action: stable across retries
    charge.domain = "order:123";         // its contention scope
    charge.tool = "charge";
    charge.args = {{"order", "123"}, {"amount_cents", 4900}};
    charge.agent = "billing-agent";
    PrepareOutcome p = fence.prepare(charge);
    if (auto* admitted = std::get_if<Admitted>(&p)) {
      Json receipt = run_the_charge();
      CommitOutcome c = fence.commit(admitted->ticket, receipt);
      for (int i = 0; i < 10 && is_ledger_trouble(c); ++i) c = fence.commit(admitted->ticket, receipt);
      CHECK(std::holds_alternative<Certificate>(c));
    } else if (auto* replayed = std::get_if<Replayed>(&p)) {
      use(replayed->cert.result);
    } else {
      log(explain(std::get<Refusal>(p), Step::prepare));
    }
  }
  CHECK(charges == 1);
  // What the retry loop keys on.
  CHECK(is_ledger_trouble(CommitOutcome{Refusal{Reason::ledger_busy, Cause::none, {}}}));
  CHECK(is_ledger_trouble(PrepareOutcome{Refusal{Reason::ledger_error, Cause::none, {}}}));
  CHECK_FALSE(is_ledger_trouble(PrepareOutcome{Refusal{Reason::in_flight, Cause::none, {}}}));
  CHECK(used == Json{{"charge_id", "ch_1"}});
  CHECK(logged.empty());
}

namespace {

std::string read_whole(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A line of code without its comment and its indentation.
std::string bare(std::string line) {
  if (auto comment = line.find("//"); comment != std::string::npos) line.erase(comment);
  auto first = line.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  auto last = line.find_last_not_of(" \t");
  return line.substr(first, last - first + 1);
}

// The code lines of the page's first ```cpp block, from first_line on (the
// README's lines before "PrepareRequest charge;" only open the ledger, which
// the test above does with a FAIL instead of a return), that `source` does
// not contain.
std::vector<std::string> lines_not_in(const std::string& page, const std::string& source,
                                      const std::string& first_line = "PrepareRequest charge;") {
  std::vector<std::string> missing;
  auto start = page.find("```cpp\n");
  if (start == std::string::npos) return {"(no ```cpp block)"};
  auto end = page.find("```\n", start + 7);
  std::istringstream block(page.substr(start + 7, end - start - 7));
  std::string source_lines = "\n";
  std::istringstream in(source);
  for (std::string line; std::getline(in, line);) source_lines += bare(line) + "\n";
  bool started = false;
  for (std::string line; std::getline(block, line);) {
    std::string code = bare(line);
    if (code == first_line) started = true;
    if (!started || code.empty()) continue;
    if (source_lines.find("\n" + code + "\n") == std::string::npos) missing.push_back(code);
  }
  if (!started) missing.push_back("(no \"" + first_line + "\" line)");
  return missing;
}

}  // namespace

TEST_CASE("the README shows the library example this file runs", "[fence][readme]") {
  const std::string readme = read_whole(std::string(EFFECTFENCE_SOURCE_DIR) + "/README.md");
  const std::string source = read_whole(std::string(EFFECTFENCE_SOURCE_DIR) + "/src/fence/readme_example_test.cc");
  REQUIRE_FALSE(readme.empty());
  REQUIRE_FALSE(source.empty());
  const auto missing = lines_not_in(readme, source);
  for (const auto& line : missing) UNSCOPED_INFO("README line not run here: " << line);
  CHECK(missing.empty());

  SECTION("negative control: an example edited in the README is caught") {
    std::string drifted = readme;
    const std::string line = "CommitOutcome c = fence.commit(admitted->ticket, receipt);";
    auto at = drifted.find(line);
    REQUIRE(at != std::string::npos);
    drifted.replace(at, line.size(), "CommitOutcome c = fence.commit(admitted->ticket, Json{});");
    CHECK(lines_not_in(drifted, source) ==
          std::vector<std::string>{"CommitOutcome c = fence.commit(admitted->ticket, Json{});"});
    CHECK_FALSE(lines_not_in("no example here\n", source).empty());
  }
}

TEST_CASE("the library page's Maintenance example fences what its process still holds", "[fence][readme]") {
  effectfence::testing::TempDir dir;
  Settings settings;
  settings.ledger_path = dir.file("ledger.sqlite");
  auto opened = Fence::open(settings);
  if (auto* error = std::get_if<OpenError>(&opened)) FAIL(error->message);
  Fence& fence = *std::get<std::unique_ptr<Fence>>(opened);
  PrepareRequest charge;
  charge.intent = "charge:order-9";
  charge.domain = "order:9";
  charge.tool = "charge";
  charge.agent = "billing-agent";
  REQUIRE(std::holds_alternative<Admitted>(fence.prepare(charge)));  // held when the worker stops

  Maintenance::Options options;
  options.exit_reason = "billing-worker stopped before the charge's outcome was recorded";
  Maintenance maintenance(fence, options);
  maintenance.stop_admitting();   // before finishing the calls in flight
  PrepareRequest late = charge;
  late.intent = "charge:order-10";
  const PrepareOutcome refused = fence.prepare(late);  // nothing new is admitted
  REQUIRE(std::holds_alternative<Refusal>(refused));
  CHECK(std::get<Refusal>(refused).cause == Cause::stopping);
  Maintenance::Stopped stopped = maintenance.stop();

  CHECK(stopped.fenced == 1);
  CHECK(stopped.left_in_flight.empty());
  const auto status = fence.intent_status("charge:order-9");
  REQUIRE(std::holds_alternative<IntentStatus>(status));
  CHECK(std::get<IntentStatus>(status).state == IntentState::unknown);
  CHECK_THAT(std::get<IntentStatus>(status).reason, Catch::Contains("billing-worker stopped"));

  const std::string page = read_whole(std::string(EFFECTFENCE_SOURCE_DIR) + "/docs/LIBRARY.md");
  const std::string source = read_whole(std::string(EFFECTFENCE_SOURCE_DIR) + "/src/fence/readme_example_test.cc");
  const auto missing = lines_not_in(page, source, "Maintenance::Options options;");
  for (const auto& line : missing) UNSCOPED_INFO("LIBRARY.md line not run here: " << line);
  CHECK(missing.empty());
  // Negative control: a line the page does not have is caught.
  CHECK(lines_not_in("```cpp\nMaintenance::Options options;\nmaintenance.stop_now();\n```\n", source,
                     "Maintenance::Options options;") == std::vector<std::string>{"maintenance.stop_now();"});
}
