#include "ledger/audit_reads.h"

#include <chrono>
#include <utility>

#include "effectfence/state_machine.h"
#include "ledger/holder.h"

namespace effectfence {
namespace {

// Unknown counter names (from a newer writer) are ignored, not fatal.
void set_counter(Counters* c, const std::string& name, int64_t value) {
  std::map<std::string, int64_t*> slots = {
      {"admitted", &c->admitted},
      {"replayed", &c->replayed},
      {"refused_stale_read_set", &c->refused_stale_read_set},
      {"refused_domain_race", &c->refused_domain_race},
      {"refused_in_flight", &c->refused_in_flight},
      {"refused_prior_failure", &c->refused_prior_failure},
      {"refused_payload_mismatch", &c->refused_payload_mismatch},
      {"committed", &c->committed},
      {"aborted", &c->aborted},
  };
  auto slot = slots.find(name);
  if (slot != slots.end()) *slot->second = value;
}

// Rows of sql (intent, tool, args, domain, agent, a time, then the holder's
// host, boot, pid and start time) whose holder passes keep.
std::vector<HeldIntent> read_held(LedgerReader& db, const std::string& sql, const std::vector<SqlValue>& params,
                                  bool (*keep)(const Holder&)) {
  auto q = db.query(sql, params);
  std::vector<HeldIntent> out;
  while (q->next()) {
    Holder holder;
    holder.host = q->text(6);
    holder.boot = q->text(7);
    holder.pid = q->integer(8);
    holder.started = q->integer(9);
    if (!keep(holder)) continue;
    out.push_back(
        HeldIntent{q->text(0), q->text(1), q->text(2), q->text(3), q->text(4), holder.describe(), q->integer(5)});
  }
  return out;
}

constexpr const char* kHolderColumns = "holder_host, holder_boot, holder_pid, holder_started";

}  // namespace

LedgerCounts read_counts(LedgerReader& db) {
  LedgerCounts counts;
  // Summed: PostgreSQL keeps each counter in shards (its schema 13).
  auto counters = db.query("SELECT name, sum(value) FROM counters GROUP BY name");
  while (counters->next()) set_counter(&counts.counters, counters->text(0), counters->integer(1));
  for (IntentState state : kStoredStates) counts.intents[state_name(state)] = 0;
  // Done intents, most of a ledger, are not indexed by state: counted as
  // all intents but the others, which are (schema 15), in one snapshot.
  auto states = db.query(
      "SELECT state, count(*) FROM intents WHERE state = 'failed' OR state = 'unknown' OR state = 'in_flight' OR "
      "state = 'cleared' GROUP BY state");
  int64_t not_done = 0;
  while (states->next()) {
    counts.intents[states->text(0)] = states->integer(1);
    not_done += states->integer(1);
  }
  counts.intents[state_name(IntentState::done)] = db.integer("SELECT count(*) FROM intents") - not_done;
  counts.certificates = db.integer("SELECT count(*) FROM certificates");
  counts.events = db.integer("SELECT count(*) FROM events");
  return counts;
}

std::vector<FencedIntent> read_fenced(LedgerReader& db) {
  // The same rows as the fenced view, with the raw time.
  auto q = db.query(
      "SELECT intent, state, tool, args, domain, agent, coalesce(reason, ''), updated_at, "
      "generation, holder_host || ':' || holder_pid "
      "FROM intents WHERE state = 'failed' OR state = 'unknown' ORDER BY updated_at, intent");
  std::vector<FencedIntent> out;
  while (q->next()) {
    FencedIntent f;
    f.intent = q->text(0);
    f.state = q->text(1);
    f.tool = q->text(2);
    f.args = q->text(3);
    f.domain = q->text(4);
    f.agent = q->text(5);
    f.reason = q->text(6);
    f.since_ms = q->integer(7);
    f.generation = q->integer(8);
    f.holder = q->text(9);
    out.push_back(std::move(f));
  }
  return out;
}

std::vector<HeldIntent> read_past_lease(LedgerReader& db, int64_t now_ms) {
  return read_held(db,
                   std::string("SELECT intent, tool, args, domain, agent, lease_expires_at, ") + kHolderColumns +
                       " FROM intents WHERE state = 'in_flight' AND lease_expires_at <= ?1 "
                       "ORDER BY lease_expires_at, intent",
                   {now_ms}, holder_is_alive_here);
}

std::vector<HeldIntent> read_holder_gone(LedgerReader& db) {
  return read_held(db,
                   std::string("SELECT intent, tool, args, domain, agent, admitted_at, ") + kHolderColumns +
                       " FROM intents WHERE state = 'in_flight' ORDER BY admitted_at, intent",
                   {}, holder_is_dead);
}

int64_t ledger_now_ms(LedgerReader& db) {
  if (!db.is_sqlite()) return db.integer("SELECT effectfence_now_ms()");
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

}  // namespace effectfence
