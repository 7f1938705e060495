#include "cli/archive_check.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <map>

#include "core/sha256.h"

namespace effectfence::cli {
namespace {

bool is_hex_digest(const std::string& text) {
  return text.size() == 64 && text.find_first_not_of("0123456789abcdef") == std::string::npos;
}

// REQUIRES: is_hex_digest(hex).
std::array<uint8_t, 32> digest_of(const std::string& hex) {
  std::array<uint8_t, 32> d{};
  auto nibble = [](char c) { return static_cast<uint8_t>(c <= '9' ? c - '0' : c - 'a' + 10); };
  for (size_t i = 0; i < 32; ++i) d[i] = static_cast<uint8_t>(nibble(hex[2 * i]) << 4 | nibble(hex[2 * i + 1]));
  return d;
}

std::string hex_of(const std::array<uint8_t, 32>& d) {
  static const char* digits = "0123456789abcdef";
  std::string hex;
  for (uint8_t b : d) {
    hex += digits[b >> 4];
    hex += digits[b & 15];
  }
  return hex;
}

std::string text_field(const Json& row, const char* name) {
  const auto it = row.find(name);
  return it != row.end() && it->is_string() ? it->get<std::string>() : "";
}

}  // namespace

void ArchiveCheck::check_records() {
  if (!db_) return;  // an export's
  records_ = read_archive_records(*db_);
  for (size_t i = 0; i < records_.size(); ++i) {
    const archive::RecordedSegment& r = records_[i];
    const std::optional<std::string> previous =
        i == 0 ? std::nullopt : std::optional<std::string>(records_[i - 1].root);
    if (r.segment != static_cast<int64_t>(i) + 1 || r.previous != previous || r.ledger_id != records_[0].ledger_id ||
        r.file != archive::segment_file_name(r.segment)) {
      add("", "archive_record_broken",
          "the ledger's record of segment " + std::to_string(r.segment) + " (" + r.file +
              ") is not the next link of its archives chain: the archives table was edited");
    }
  }
  if (archive_window_open(*db_)) {
    add("", "archive_window_open",
        "archive_in_progress holds a row: the deletion window effectfence archive opens only inside its own "
        "transaction was left open by hand, and rows may have been deleted through it");
  }
}

void ArchiveCheck::parent_outside(const std::string& certificate, const std::string& parent) {
  outside_.emplace_back(certificate, parent);
}

bool ArchiveCheck::archived(const std::string& hash) const {
  if (!is_hex_digest(hash)) return false;
  return std::binary_search(certificates_.begin(), certificates_.end(), digest_of(hash));
}

void ArchiveCheck::check_directory(const std::string& dir) {
  std::vector<std::string> names;
  struct stat st {};
  // A directory that does not exist holds no segment: fine for a ledger
  // that never archived, and each recorded segment is reported missing.
  if (::stat(dir.c_str(), &st) == 0 || errno != ENOENT) {
    if (Status listed = archive::list_directory(dir, &names); !listed.ok()) {
      add("", "archive_unreadable", listed.message());
      return;
    }
  }
  std::map<int64_t, std::string> files;
  for (const std::string& name : names) {
    if (auto n = archive::segment_number(name)) files[*n] = name;
  }
  // The segments the history holds: those the ledger records, or those an
  // export continues from (the ones archived after it are not its history).
  const int64_t recorded = before_ ? before_->segments : static_cast<int64_t>(records_.size());
  const int64_t last_file = files.empty() ? 0 : files.rbegin()->first;
  const int64_t last = before_ ? recorded : std::max(recorded, last_file);
  if (before_) later_ = static_cast<int64_t>(std::distance(files.upper_bound(recorded), files.end()));
  std::optional<std::string> previous_root;
  bool previous_known = true;  // false after a missing file: its root is unknown
  for (int64_t n = 1; n <= last; ++n) {
    const std::string file = archive::segment_file_name(n);
    const auto found = files.find(n);
    if (found == files.end()) {
      const std::string what = before_ ? "the export continues from " + std::to_string(recorded) + " segment(s)"
                               : n <= recorded ? "the ledger recorded it as segment " + std::to_string(n)
                                               : "it lies between segments that are there";
      add("", "segment_missing", file + " is missing from " + dir + ": " + what + "; its history is lost");
      previous_root = !before_ && n <= recorded ? std::optional<std::string>(records_[n - 1].root) : std::nullopt;
      previous_known = !before_ && n <= recorded;
      continue;
    }
    // Written by an archive that was interrupted before its transaction
    // committed: the next one after the ledger's last record, and the last.
    const bool may_be_pending = !before_ && n == recorded + 1 && n == last_file;
    if (n > recorded && !may_be_pending) {
      add("", "segment_unrecorded",
          file + " is not recorded by the ledger (it records " + std::to_string(recorded) +
              " segment(s)), and it is not one an interrupted archive left: it was added by hand or belongs to "
              "another ledger");
      continue;
    }
    std::optional<std::string> root;
    const std::optional<std::string> expected_previous = n == 1 ? std::nullopt : previous_root;
    check_segment(dir, file, n, expected_previous, previous_known || n == 1, may_be_pending, &root);
    previous_root = !before_ && n <= recorded ? std::optional<std::string>(records_[n - 1].root) : root;
    previous_known = !before_ || root.has_value();
  }
  std::sort(certificates_.begin(), certificates_.end());
  // Parent links from the ledger (or the dump) into the segments.
  for (const auto& [certificate, parent] : outside_) {
    if (!archived(parent)) {
      add(certificate, "missing_parent",
          "parent " + parent + " is neither in the " + (before_ ? "dump" : "ledger") + " nor in any segment in " + dir);
    }
  }
  // And from the segments to an older segment or to the ledger (the dump).
  for (const auto& [segment, parent] : segment_parents_) {
    if (std::binary_search(certificates_.begin(), certificates_.end(), parent)) continue;
    const std::string hex = hex_of(parent);
    if (!certificate_outside_segments(hex)) {
      add("", "missing_parent",
          archive::segment_file_name(segment) + ": a certificate's parent " + hex + " is neither in the " +
              (before_ ? "dump" : "ledger") + " nor in any segment");
    }
  }
}

bool ArchiveCheck::certificate_outside_segments(const std::string& hex) {
  if (!db_) return in_dump_ && in_dump_(hex);
  return holds_certificate(*db_, hex);
}

void ArchiveCheck::check_segment(const std::string& dir, const std::string& file, int64_t number,
                                 const std::optional<std::string>& previous_root, bool previous_known,
                                 bool may_be_pending, std::optional<std::string>* root) {
  const archive::SegmentContents s = archive::read_segment(dir + "/" + file);
  if (!s.ok()) {
    add("", "segment_malformed", file + ": " + s.error);
    return;
  }
  ++segments_read_;
  *root = s.computed_root;
  if (s.header.segment != number) {
    add("", "segment_misplaced",
        file + " holds segment " + std::to_string(s.header.segment) + ": segments were renamed or swapped");
  }
  const std::string ledger_id = before_            ? before_->ledger_id
                                : records_.empty() ? s.header.ledger_id
                                                   : records_.front().ledger_id;
  if (s.header.ledger_id != ledger_id) {
    add("", "segment_foreign", file + " is a segment of ledger " + s.header.ledger_id + ", not of this one (" +
                                   ledger_id + ")");
  }
  if (s.computed_root != s.declared_root) {
    add("", "segment_altered",
        file + ": its lines hash to " + s.computed_root + " but its last line says " + s.declared_root +
            ": a line was edited, added or removed");
  }
  if (!(s.counted == s.declared)) {
    add("", "segment_altered", file + ": it holds other rows than its last line counts");
  }
  if (previous_known && s.header.previous != previous_root) {
    add("", "segment_chain_broken",
        file + ": its header names " + s.header.previous.value_or("no") + " as the previous segment's root, but " +
            (previous_root ? "that segment's root is " + *previous_root : std::string("it is the first")) +
            ": segments were swapped, removed or replaced");
  }
  const archive::RecordedSegment* record = nullptr;
  if (number <= static_cast<int64_t>(records_.size())) {
    record = &records_[number - 1];
    if (record->root != s.computed_root) {
      add("", "segment_altered",
          file + ": the ledger recorded root " + record->root + " for segment " + std::to_string(number) +
              ", its lines hash to " + s.computed_root + ": it was edited or replaced");
    } else if (!(record->counts == s.counted)) {
      add("", "segment_altered", file + ": it holds other row counts than the ledger recorded for it");
    }
  }
  if (before_ && number == before_->segments && s.computed_root != before_->root) {
    add("", "segment_altered",
        file + ": its lines hash to " + s.computed_root + ", but the export continues from segment root " +
            before_->root + ": it is not the segment this dump's ledger recorded (edited, replaced, or another "
            "ledger's)");
  }
  check_signature(file, s, record);
  if (!record && may_be_pending) {
    // Not recorded: acceptable only as the copy an interrupted archive made
    // of rows the ledger still holds.
    if (still_in_ledger(s)) {
      ++pending_;
      return;  // its rows are counted in the ledger, not here
    }
    add("", "segment_unrecorded",
        file + " is not recorded by the ledger, yet rows in it are no longer in the ledger: they were deleted "
               "without the archive's record");
    return;
  }
  check_rows(file, s);
}

void ArchiveCheck::check_signature(const std::string& file, const archive::SegmentContents& s,
                                   const archive::RecordedSegment* record) {
  if (record && record->key_id != s.key_id) {
    add("", "segment_signature_bad",
        file + ": the ledger recorded it as " + (record->key_id ? "signed by key " + *record->key_id : "unsigned") +
            ", the file says " + (s.key_id ? "signed by key " + *s.key_id : "unsigned"));
    return;
  }
  if (!s.key_id || keys_.empty()) return;
  for (const PublicKey& key : keys_) {
    if (key.key_id() != *s.key_id) continue;
    if (s.signature && key.verifies_statement(archive::segment_signing_message(*s.key_id, s.computed_root),
                                              *s.signature)) {
      ++signatures_verified_;
    } else {
      add("", "segment_signature_bad", file + ": its root's signature by key " + *s.key_id + " does not verify");
    }
    return;
  }
  add("", "segment_signature_bad", file + ": signed by key " + *s.key_id + ", which is not among --public-key");
}

bool ArchiveCheck::still_in_ledger(const archive::SegmentContents& s) {
  if (!db_) return false;
  LedgerReader& db = *db_;
  for (const Json& row : s.rows) {
    const std::string type = text_field(row, "type");
    bool found = true;
    if (type == "certificate") {
      found = holds_certificate(db, text_field(row, "hash"));
    } else if (type == "event" || type == "clear") {
      const auto id = row.find("id");
      if (id == row.end() || !id->is_number_integer()) return false;
      found = type == "event" ? holds_event(db, id->get<int64_t>()) : holds_clear(db, id->get<int64_t>());
    }
    if (!found) return false;
  }
  return true;
}

void ArchiveCheck::check_rows(const std::string& file, const archive::SegmentContents& s) {
  rows_read_.certificates += s.counted.certificates;
  rows_read_.signatures += s.counted.signatures;
  rows_read_.events += s.counted.events;
  rows_read_.clears += s.counted.clears;
  for (const Json& row : s.rows) {
    if (text_field(row, "type") != "certificate") continue;
    const std::string hash = text_field(row, "hash");
    const std::string body = text_field(row, "body");
    if (!is_hex_digest(hash) || sha256_hex(body) != hash) {
      add(hash, "segment_altered", file + ": certificate " + hash + " does not hash to its body");
      continue;
    }
    certificates_.push_back(digest_of(hash));
    const std::string parent = text_field(row, "parent");
    if (is_hex_digest(parent)) segment_parents_.emplace_back(s.header.segment, digest_of(parent));
  }
}

}  // namespace effectfence::cli
