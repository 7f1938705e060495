// What `verify` checks of a ledger's archive: the ledger's own records of
// its segments (always), and with --archive DIR every segment file, as one
// history with the ledger: each segment's root hash over its lines, its
// place (its number, the previous segment's root in its header, the root
// the ledger recorded for it), its signature, its certificates' hashes,
// and every parent link that crosses from the ledger into a segment or
// between segments. Each problem names the segment file.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ledger/ledger_reader.h"
#include "core/signing.h"
#include "ledger/archive.h"

namespace effectfence::cli {

struct ArchiveFinding {
  std::string certificate;  // "" when it concerns a file
  std::string kind;         // segment_missing, segment_altered, ...
  std::string message;      // begins with the file name when it concerns one
};

class ArchiveCheck {
 public:
  ArchiveCheck(LedgerReader& db, const std::vector<PublicKey>& keys) : db_(db), keys_(keys) {}

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
  int64_t signatures_verified() const { return signatures_verified_; }
  const archive::SegmentCounts& rows_read() const { return rows_read_; }

  const std::vector<ArchiveFinding>& findings() const { return findings_; }

 private:
  using Digest = std::array<uint8_t, 32>;
  void check_segment(const std::string& dir, const std::string& file, int64_t number,
                     const std::optional<std::string>& previous_root, bool may_be_pending,
                     std::optional<std::string>* root);
  void check_rows(const std::string& file, const archive::SegmentContents& s);
  bool still_in_ledger(const archive::SegmentContents& s);
  void check_signature(const std::string& file, const archive::SegmentContents& s,
                       const archive::RecordedSegment* record);
  bool archived(const std::string& hash) const;
  void add(std::string certificate, std::string kind, std::string message) {
    findings_.push_back({std::move(certificate), std::move(kind), std::move(message)});
  }

  LedgerReader& db_;
  const std::vector<PublicKey>& keys_;
  std::vector<archive::RecordedSegment> records_;
  std::vector<std::pair<std::string, std::string>> outside_;  // certificate, parent
  std::vector<Digest> certificates_;   // every certificate in a segment (sorted once all are read)
  std::vector<std::pair<int64_t, Digest>> segment_parents_;  // segment, parent of one of its certificates
  std::vector<ArchiveFinding> findings_;
  int64_t segments_read_ = 0;
  int64_t pending_ = 0;
  int64_t signatures_verified_ = 0;
  archive::SegmentCounts rows_read_;
};

}  // namespace effectfence::cli
