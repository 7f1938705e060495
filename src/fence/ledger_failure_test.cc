// The library's promise: no Fence method throws; a ledger that fails comes
// back as a refusal (closed), never as an admission or an exception.
#include <filesystem>
#include <fstream>

#include <catch2/catch.hpp>

#include "effectfence/refusal_text.h"
#include "support/fence_helpers.h"
#include "support/power_loss_vfs.h"
#include "support/sqlite_query.h"
#include "support/temp_dir.h"

using namespace effectfence;
using namespace effectfence::testing;

TEST_CASE("a ledger whose disk fails answers every call with a refusal, never an exception", "[fence][disk]") {
  PowerLossVfs vfs;  // the process's default VFS while it lives
  TempDir dir;
  Settings s;
  s.ledger_path = dir.file("l.sqlite");
  auto fence = open_fence(s);
  const Ticket held = admitted_ticket(fence->prepare(charge("held")));

  vfs.fail_syncs_of("-wal");
  PrepareOutcome prepared = Refusal{Reason::invalid_request, Cause::none, {}};
  REQUIRE_NOTHROW(prepared = fence->prepare(charge("during")));
  CHECK(refusal_reason(prepared) == Reason::ledger_error);

  CommitOutcome committed = Refusal{Reason::invalid_request, Cause::none, {}};
  REQUIRE_NOTHROW(committed = fence->commit(held, {{"ok", true}}));
  REQUIRE(std::holds_alternative<Refusal>(committed));
  CHECK(std::get<Refusal>(committed).reason == Reason::ledger_error);
  // Facts only (the disk failed, restart): what to do about the tool depends on the step.
  CHECK_THAT(explain(std::get<Refusal>(committed), Step::commit),
             Catch::Contains("the disk failed") && Catch::Contains("restart") && !Catch::Contains("do not run"));

  HeartbeatOutcome beat = Refusal{Reason::invalid_request, Cause::none, {}};
  REQUIRE_NOTHROW(beat = fence->heartbeat(held));
  CHECK(std::holds_alternative<Refusal>(beat));
  AbortOutcome aborted = Refusal{Reason::invalid_request, Cause::none, {}};
  REQUIRE_NOTHROW(aborted = fence->abort(held, "gave up"));
  CHECK(std::holds_alternative<Refusal>(aborted));

  // The disk recovers; this process still refuses: what it wrote after a
  // failed sync cannot be trusted.
  vfs.fail_syncs_of("");
  CHECK(refusal_reason(fence->prepare(charge("after"))) == Reason::ledger_error);
}

TEST_CASE("a ledger deleted or replaced while the fence has it open refuses every decision from then on",
          "[fence][disk]") {
  TempDir dir;
  Settings s;
  s.ledger_path = dir.file("l.sqlite");
  auto fence = open_fence(s);
  const Ticket done = admitted_ticket(fence->prepare(charge("done")));
  REQUIRE(std::holds_alternative<Certificate>(fence->commit(done, {{"ok", true}})));

  SECTION("deleted") {
    for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(s.ledger_path + suffix);
  }
  SECTION("renamed, and a new file put in its place") {
    std::filesystem::rename(s.ledger_path, dir.file("moved.sqlite"));
    std::ofstream(s.ledger_path) << "";
  }
  // Decided in the old file, no other process would see this admission: one
  // opening the path now finds a fresh ledger and admits the same intent.
  const PrepareOutcome fresh = fence->prepare(charge("new"));
  REQUIRE(std::holds_alternative<Refusal>(fresh));
  CHECK(std::get<Refusal>(fresh).reason == Reason::ledger_error);
  CHECK_THAT(explain(std::get<Refusal>(fresh), Step::prepare),
             Catch::Contains("was deleted or replaced while this process had it open") && Catch::Contains("restart"));
  CHECK(refusal_reason(fence->prepare(charge("another"))) == Reason::ledger_error);
}

TEST_CASE("a decision or a read refused on a damaged row leaves the ledger deciding and reading the newest rows, "
          "after other processes have written",
          "[fence][disk]") {
  TempDir dir;
  const std::string path = dir.file("l.sqlite");
  auto fence = open_fence(file_settings(path));
  admitted_ticket(fence->prepare(charge("damaged")));
  // A hand edit no trigger refuses: the row's read-set is no longer JSON.
  exec_sql(path, "UPDATE intents SET read_set = '[not json' WHERE intent = 'damaged'");

  // Refused where the row is read, in the middle of a query, on the writer
  // and on the reader...
  CHECK(refusal_reason(fence->prepare(charge("damaged"))) == Reason::ledger_error);
  const auto status = fence->intent_status("damaged");
  REQUIRE(std::holds_alternative<Refusal>(status));
  CHECK(std::get<Refusal>(status).reason == Reason::ledger_error);

  // ...then another process writes (it meets the damaged row too, as it
  // looks for dead holders on opening)...
  auto other = open_fence(file_settings(path));
  admitted_ticket(other->prepare(charge("theirs")));

  // ...and this process still decides, and reads what was written.
  CHECK(std::holds_alternative<Admitted>(fence->prepare(charge("mine"))));
  const auto theirs = fence->intent_status("theirs");
  REQUIRE(std::holds_alternative<IntentStatus>(theirs));
  CHECK(std::get<IntentStatus>(theirs).state == IntentState::in_flight);
  CHECK(std::holds_alternative<Admitted>(other->prepare(charge("theirs-too"))));
}
