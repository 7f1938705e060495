// What `verify` checks of a ledger's archive: the ledger's own records of
// its segments (always), and with --archive DIR every segment file, as one
// history with the ledger (or with an export of it, whose header names the
// last segment's root): each segment's root hash over its lines, its
// place (its number, the previous segment's root in its header, the root
// the ledger recorded for it), its signature, its certificates' hashes,
// and every parent link that crosses from the ledger into a segment or
// between segments. Each problem names the segment file.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/signing.h"
#include "ledger/archive.h"
#include "ledger/history_reads.h"
#include "ledger/ledger_reader.h"

namespace effectfence::cli {

// What an export of an archived ledger says of the history before it: the
// segments it continues from, the last one's root (which the chain of
// previous roots in the segments' headers ties to every earlier one), and
// what they hold.
struct ArchivedBefore {
  std::string ledger_id;
  int64_t segments = 0;
  std::string root;
  archive::SegmentCounts counts;
};

struct ArchiveFinding {
  std::string certificate;  // "" when it concerns a file
  std::string kind;         // segment_missing, segment_altered, ...
  std::string message;      // begins with the file name when it concerns one
};

class ArchiveCheck {
 public:
  ArchiveCheck(LedgerReader& db, const std::vector<PublicKey>& keys) : db_(&db), keys_(keys) {}
  // For an export: the segments before the dump, as its header names them;
  // in_dump says whether a certificate is in the dump.
  ArchiveCheck(const ArchivedBefore& before, const std::vector<PublicKey>& keys,
               std::function<bool(const std::string&)> in_dump)
      : db_(nullptr), keys_(keys), before_(before), in_dump_(std::move(in_dump)) {}

  // Reads the ledger's archives table and checks it is one chain, with no
  // deletion window left open. Call first.
  void check_records();
  bool has_records() const { return !records_.empty(); }
  const std::vector<archive::RecordedSegment>& records() const { return records_; }

  // A ledger certificate whose parent is not in the ledger: allowed once the
  // ledger has archived (the parent may be in a segment), and checked
  // against the segments by check_directory.
  void parent_outside(const std::string& certificate, const std::string& parent);
  int64_t parents_outside() const { return static_cast<int64_t>(outside_.size()); }

  // Every segment in dir, and the parent links into them.
  void check_directory(const std::string& dir);
  int64_t segments_read() const { return segments_read_; }
  int64_t pending() const { return pending_; }  // written by an interrupted run, not recorded
  int64_t later() const { return later_; }      // an export's: archived after the dump, not read
  int64_t signatures_verified() const { return signatures_verified_; }
  const archive::SegmentCounts& rows_read() const { return rows_read_; }

  const std::vector<ArchiveFinding>& findings() const { return findings_; }

 private:
  using Digest = std::array<uint8_t, 32>;
  void check_segment(const std::string& dir, const std::string& file, int64_t number,
                     const std::optional<std::string>& previous_root, bool previous_known, bool may_be_pending,
                     std::optional<std::string>* root);
  void check_rows(const std::string& file, const archive::SegmentContents& s);
  bool still_in_ledger(const archive::SegmentContents& s);
  void check_signature(const std::string& file, const archive::SegmentContents& s,
                       const archive::RecordedSegment* record);
  bool archived(const std::string& hash) const;
  void add(std::string certificate, std::string kind, std::string message) {
    findings_.push_back({std::move(certificate), std::move(kind), std::move(message)});
  }

  bool certificate_outside_segments(const std::string& hex);

  LedgerReader* db_;  // null when checking an export
  const std::vector<PublicKey>& keys_;
  std::optional<ArchivedBefore> before_;  // an export's
  std::function<bool(const std::string&)> in_dump_;
  std::vector<archive::RecordedSegment> records_;
  std::vector<std::pair<std::string, std::string>> outside_;  // certificate, parent
  std::vector<Digest> certificates_;   // every certificate in a segment (sorted once all are read)
  std::vector<std::pair<int64_t, Digest>> segment_parents_;  // segment, parent of one of its certificates
  std::vector<ArchiveFinding> findings_;
  int64_t segments_read_ = 0;
  int64_t pending_ = 0;
  int64_t later_ = 0;
  int64_t signatures_verified_ = 0;
  archive::SegmentCounts rows_read_;
};

}  // namespace effectfence::cli
