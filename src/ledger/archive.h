// Moving old history out of a ledger (SQLite or PostgreSQL) into archive segments
// (ledger/archive_segment.h), in small batches, each written and synced
// before its rows are deleted.
//
// What is archived: whole intents' history, never part of one. An intent's
// certificates, their signatures, its events and its clears go together,
// and only when every one of them is older than the cutoff, the intent has
// no row in `intents` (its result no longer replays: swept after the result
// TTL; a fenced or in-flight intent keeps its row), and none of its
// certificates is a domain's head or the parent of an attempt still in
// flight or unknown, and its events are a history the fence writes (one
// that verify reports as impossible_history stays, where verify keeps
// reporting it). Events without an intent (swept, domain_evicted) stay:
// the ledger's triggers and the fence read them. Each batch runs:
//   1. read the batch (no lock held);
//   2. write segment-NNNNNN.jsonl: temporary name, fsync, rename, fsync dir;
//   3. one write transaction (SQLite: BEGIN IMMEDIATE; PostgreSQL: the
//      advisory locks of the batch's intents, which every decision about
//      one of them takes first): check the batch's intents gained no
//      row meanwhile, open the deletion window (archive_in_progress), delete
//      exactly the rows written, record the segment in `archives`, close the
//      window, commit.
// A crash before 3 commits leaves the rows in the ledger and a segment file
// the ledger does not record, which the next archive removes first.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "ledger/archive_segment.h"

namespace effectfence {

class Signer;

namespace archive {

struct ArchiveOptions {
  std::string ledger_path;  // an SQLite ledger file or a PostgreSQL URL (ledger/open_ledger.h)
  std::string directory;    // where the segments live (created if missing)
  int64_t before_ms = 0;    // archive rows older than this
  int64_t max_rows = 4000;  // rows per segment (one delete transaction each)
  int64_t max_segments = 0;  // stop after this many (0: until nothing is left)
  int64_t busy_timeout_ms = 10000;
  std::shared_ptr<const Signer> signer;  // signs each segment's root, if set
};

struct ArchiveResult {
  int64_t segments = 0;
  SegmentCounts rows;
  int64_t removed_unrecorded = 0;  // segment files an interrupted run left
  int64_t removed_temporary = 0;
  int64_t retried_batches = 0;      // a batch's intent came back meanwhile
  int64_t kept_for_history = 0;     // intents left whose events break the state machine
  std::string last_root;
};

// The segments recorded in a ledger, in order (from its `archives` table).
struct RecordedSegment {
  int64_t segment = 0;
  std::string ledger_id;
  std::string file;
  std::string root;
  std::optional<std::string> previous;
  int64_t before_ms = 0;
  SegmentCounts counts;
  std::optional<std::string> key_id;
};

// Runs the archive. progress, if set, is called after each segment.
// Throws std::runtime_error naming what failed; segments committed before
// the failure stay committed.
ArchiveResult run_archive(const ArchiveOptions& options,
                          const std::function<void(const RecordedSegment&)>& progress = nullptr);

}  // namespace archive
}  // namespace effectfence
