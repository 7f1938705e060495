// The questions `verify` asks of a ledger, each answered by the database
// with index lookups per row (a query per certificate would cost a round
// trip each on PostgreSQL). Every read returns only the rows that break a
// rule, typed; verify decides what each means and words it. Row sets that
// may be as large as the ledger are streamed to a callback.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ledger/ledger_reader.h"

namespace effectfence {

template <class Row>
using RowSink = std::function<void(const Row&)>;

// What SQLite's integrity_check reports, line by line, when the file is
// damaged (a damaged index passes quick_check). Empty for a sound file and
// for PostgreSQL.
std::vector<std::string> integrity_problems(LedgerReader& db);

// Certificates named by other than exactly one committed event of their
// intent, as a commit writes it byte for byte (anything else, however
// close, is for the caller to judge: see committed_event_details).
struct CertificateOfIntent {
  std::string hash, intent;
};
void certificates_not_named_once(LedgerReader& db, const RowSink<CertificateOfIntent>& sink);
// The details of an intent's committed events (few: one per run).
std::vector<std::string> committed_event_details(LedgerReader& db, const std::string& intent);

// Committed events that name no certificate of their intent as a commit
// writes it.
struct CommittedEvent {
  int64_t id = 0;
  std::string intent, detail;
};
void committed_events_naming_none(LedgerReader& db, const RowSink<CommittedEvent>& sink);

// Certificates with no admitted or takeover event of their intent and
// generation that handed out their domain's seq.
struct CertificatePlace {
  std::string hash, intent, domain;
  int64_t generation = 0, seq = 0;
};
void certificates_not_admitted(LedgerReader& db, const RowSink<CertificatePlace>& sink);

// A domain's seq held by more than one row.
struct SeqCount {
  std::string domain;
  int64_t seq = 0, count = 0;
};
// Seqs held by more than one certificate (the UNIQUE that forbids it dropped).
void certificate_seqs_held_twice(LedgerReader& db, const RowSink<SeqCount>& sink);
// Seqs handed out by more than one admission or takeover.
void admission_seqs_handed_out_twice(LedgerReader& db, const RowSink<SeqCount>& sink);
// The certificates at one seq of a domain, by hash.
std::vector<std::string> certificates_at(LedgerReader& db, const std::string& domain, int64_t seq);

// A done intent whose certificate is missing or another intent's.
struct DoneIntent {
  std::string intent, certificate;
  std::optional<std::string> certificate_intent;  // nullopt: not in the ledger
};
void done_intents_naming_foreign(LedgerReader& db, const RowSink<DoneIntent>& sink);

// A certificate whose attempt is no longer done at its generation.
struct UndoneAttempt {
  std::string hash, intent, state;
  int64_t generation = 0, committed_at = 0;
};
void attempts_moved_out_of_done(LedgerReader& db, const RowSink<UndoneAttempt>& sink);

// A clear of an attempt that has a certificate, with no commit after it.
struct ClearedAttempt {
  std::string hash, intent, actor;
  int64_t generation = 0, committed_at = 0, clear_event = 0;
};
void attempts_cleared_after_commit(LedgerReader& db, const RowSink<ClearedAttempt>& sink);

// The id of the last admission or takeover of intent at generation before
// event id `before`, if any.
std::optional<int64_t> last_admission_before(LedgerReader& db, const std::string& intent, int64_t generation,
                                             int64_t before);

// Sweeps, by event id: the cutoff each deleted rows before (older_than_ms;
// nullopt if its detail does not say).
struct SweepEvent {
  int64_t id = 0;
  std::optional<int64_t> cutoff_ms;
};
std::vector<SweepEvent> sweep_events(LedgerReader& db);

// A commit_refused event's reason, read from its detail: "" unless the
// detail is a JSON object whose "reason" is a string.
std::string refusal_reason(const std::string& detail);

// Every event of an intent, by intent then id, for replaying the state
// machine. refusal: a commit_refused event's reason, "" otherwise.
struct IntentEvent {
  int64_t id = 0, generation = 0;
  std::string kind, intent, refusal;
};
void intent_events(LedgerReader& db, const RowSink<IntentEvent>& sink);

// A domain whose head is not its certificate at head_seq.
struct MisplacedHead {
  std::string domain, head;
  int64_t head_seq = 0;
  struct Found {
    std::string domain;
    int64_t seq = 0;
  };
  std::optional<Found> found;  // the certificate under that hash, if any
};
void misplaced_domain_heads(LedgerReader& db, const RowSink<MisplacedHead>& sink);

// A domain whose newest certificate since it was last evicted is past its
// head (the head set back by hand).
struct HeadBehind {
  std::string domain, newest;
  int64_t head_seq = 0, newest_seq = 0;
};
void domain_heads_behind(LedgerReader& db, const RowSink<HeadBehind>& sink);

// A domain with certificates, no row and no domain_evicted event.
struct DeletedDomain {
  std::string domain;
  int64_t highest_seq = 0;
};
void domains_deleted(LedgerReader& db, const RowSink<DeletedDomain>& sink);

}  // namespace effectfence
