// A decision never needs a temporary file. A full or unwritable temporary
// directory (/var/tmp, /tmp) is not the ledger's disk: were a decision's
// journal to spill there, an intent with large args could be admitted and
// then neither committed nor aborted, and SQLite's I/O error would read as
// the ledger's disk failing, which stops every decision.
#include <sqlite3.h>

#include <string>
#include <variant>

#include <catch2/catch.hpp>

#include "effectfence/fence.h"
#include "support/fence_helpers.h"
#include "support/power_loss_vfs.h"
#include "support/temp_dir.h"

using namespace effectfence;
using namespace effectfence::testing;

namespace {

// Args and a result well past what a savepoint journal holds in memory
// before it spills, were it allowed to (about 100 KiB spilled there).
PrepareRequest large(const std::string& intent, const std::string& filler) {
  PrepareRequest request = charge(intent);
  request.args["note"] = filler;
  return request;
}

}  // namespace

TEST_CASE("with no temporary file to be had, intents of a megabyte are admitted, kept alive, committed, aborted and "
          "replayed, and the ledger goes on deciding",
          "[ledger]") {
  // This binary configures SQLite as serve does (as_served_test.cc).
  PowerLossVfs vfs;  // SQLite's default VFS, under the writer's own
  vfs.refuse_temporary_files();
  TempDir dir;
  const std::string filler(1 << 20, 'x');
  {
    auto fence = open_fence(file_settings(dir.file("ledger.sqlite")));

    const Ticket committed = admitted_ticket(fence->prepare(large("temp:committed", filler)));
    CHECK(std::holds_alternative<Extended>(fence->heartbeat(committed)));
    const CommitOutcome outcome = fence->commit(committed, Json{{"receipt", filler}});
    REQUIRE(std::holds_alternative<Certificate>(outcome));
    const PrepareOutcome again = fence->prepare(large("temp:committed", filler));
    REQUIRE(std::holds_alternative<Replayed>(again));
    CHECK(std::get<Replayed>(again).cert.hash == std::get<Certificate>(outcome).hash);

    const Ticket aborted = admitted_ticket(fence->prepare(large("temp:aborted", filler)));
    CHECK(std::holds_alternative<Aborted>(fence->abort(aborted, "the provider refused the charge")));

    const Ticket small = admitted_ticket(fence->prepare(charge("temp:small")));
    CHECK(std::holds_alternative<Certificate>(fence->commit(small, Json{{"charged", true}})));
  }
  CHECK(vfs.temporary_files_asked_for() == 0);
}
