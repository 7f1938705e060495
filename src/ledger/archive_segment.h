// The archive segment file: one place for its format, shared by
// `effectfence archive` (which writes it) and `verify --archive` (which
// reads it back).
//
// A segment is JSON lines:
//   line 1    {"type":"segment","format":1,"ledger":ID,"segment":N,
//              "previous":ROOT-OF-N-1|null,"before_ms":..,"first_at":..,"last_at":..}
//   rows      {"type":"certificate"|"signature"|"event"|"clear", column: value, ...}
//             (every column of the row, as the ledger stored it)
//   last      {"type":"segment_end","root":R,"rows":..,"certificates":..,
//              "signatures":..,"events":..,"clears":..,"key_id":K|null,"signature":S|null}
// R is the SHA-256 (hex) of every byte before the last line, newlines
// included; S, when the archive was given a signing key, is its Ed25519
// signature over segment_signing_message(K, R). Files are named
// segment-NNNNNN.jsonl after N, so `ls` lists them in order.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "effectfence/json.h"

namespace effectfence {

class Signer;
class PublicKey;

namespace archive {

constexpr int kSegmentFormat = 1;

// "segment-000042.jsonl" for 42.
std::string segment_file_name(int64_t segment);
// 42 for "segment-000042.jsonl"; nullopt for any other name.
std::optional<int64_t> segment_number(const std::string& file_name);
// The name a segment is written under before it is synced and renamed.
std::string temporary_name(const std::string& final_name);
bool is_temporary_name(const std::string& file_name);

struct SegmentHeader {
  std::string ledger_id;
  int64_t segment = 0;
  std::optional<std::string> previous;  // root of segment - 1
  int64_t before_ms = 0;
  int64_t first_at = 0;
  int64_t last_at = 0;
};

struct SegmentCounts {
  int64_t certificates = 0;
  int64_t signatures = 0;
  int64_t events = 0;
  int64_t clears = 0;
  int64_t rows() const { return certificates + signatures + events + clears; }
  bool operator==(const SegmentCounts& o) const {
    return certificates == o.certificates && signatures == o.signatures && events == o.events && clears == o.clears;
  }
};

// What a segment's root signature covers: a prefix of its own, so it can
// never pass for a certificate's signature, nor one for it.
std::string segment_signing_message(const std::string& key_id, const std::string& root);

// Builds a segment in memory: header first, then rows, then finish().
class SegmentBuilder {
 public:
  explicit SegmentBuilder(const SegmentHeader& header);
  // REQUIRES: row["type"] is certificate, signature, event or clear.
  // Throws if a text column is not UTF-8 (the archive then stops, naming it).
  void add(const Json& row);
  // Appends the last line. Returns the root hash. signer may be null.
  std::string finish(const Signer* signer);
  const std::string& text() const { return text_; }
  const SegmentCounts& counts() const { return counts_; }

 private:
  std::string text_;
  SegmentCounts counts_;
};

// A segment read back. ok() iff it parsed as a whole: header, rows, last
// line, each where it belongs. The root is recomputed from the bytes.
struct SegmentContents {
  std::string error;  // what is malformed, with its line number ("" if none)
  SegmentHeader header;
  std::vector<Json> rows;
  SegmentCounts counted;       // the rows as found
  SegmentCounts declared;      // what the last line says
  std::string declared_root;   // what the last line says
  std::string computed_root;   // SHA-256 of the bytes before the last line
  std::optional<std::string> key_id;
  std::optional<std::string> signature;
  bool ok() const { return error.empty(); }
};
// Reads path. A file that cannot be read sets error too.
SegmentContents read_segment(const std::string& path);

// Writes text to dir/name durably: to its temporary name, fsynced, renamed
// over name, and dir fsynced, so once this returns the file survives a
// crash under its final name. Returns ok or what failed.
Status write_durably(const std::string& dir, const std::string& name, const std::string& text);
// Removes dir/name and fsyncs dir. Returns ok or what failed.
Status remove_durably(const std::string& dir, const std::string& name);
// The names of the entries of dir. Returns ok or what failed.
Status list_directory(const std::string& dir, std::vector<std::string>* names);

}  // namespace archive
}  // namespace effectfence
