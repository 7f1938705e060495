// The segment format alone: names, the root over the lines, the signature
// under its own prefix, and what read_segment refuses.
#include "ledger/archive_segment.h"

#include <catch2/catch.hpp>

#include <fstream>

#include "core/sha256.h"
#include "core/signing.h"
#include "support/temp_dir.h"

namespace effectfence::archive {
namespace {

using effectfence::testing::TempDir;

std::string write(const TempDir& dir, const std::string& name, const std::string& text) {
  const std::string path = dir.file(name);
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

SegmentBuilder two_rows(const std::optional<std::string>& previous) {
  SegmentBuilder b({std::string(32, 'a'), 2, previous, 1000, 10, 20});
  b.add({{"type", "certificate"}, {"hash", std::string(64, 'c')}, {"body", "{}"}, {"committed_at", 10}});
  b.add({{"type", "event"}, {"id", 7}, {"at", 20}, {"kind", "committed"}, {"detail", "{}"}});
  return b;
}

}  // namespace

TEST_CASE("segment files are named by number, and only those names are segments", "[archive]") {
  CHECK(segment_file_name(42) == "segment-000042.jsonl");
  CHECK(segment_number("segment-000042.jsonl") == 42);
  CHECK(segment_number("segment-1234567.jsonl") == 1234567);
  CHECK_FALSE(segment_number("segment-42.jsonl"));
  CHECK_FALSE(segment_number("segment-000000.jsonl"));
  CHECK_FALSE(segment_number("segment-000042.jsonl.tmp"));
  CHECK_FALSE(segment_number("archive.lock"));
  CHECK(is_temporary_name(temporary_name("segment-000042.jsonl")));
  CHECK_FALSE(is_temporary_name("segment-000042.jsonl"));
}

TEST_CASE("a segment's root is the SHA-256 of every line before its last, and reads back", "[archive]") {
  TempDir dir;
  SegmentBuilder b = two_rows(std::string(64, 'p'));
  const std::string root = b.finish(nullptr);
  const std::string text = b.text();
  const size_t last = text.rfind('\n', text.size() - 2);
  CHECK(root == sha256_hex(text.substr(0, last + 1)));
  const SegmentContents c = read_segment(write(dir, "s.jsonl", text));
  REQUIRE(c.ok());
  CHECK(c.computed_root == root);
  CHECK(c.declared_root == root);
  CHECK(c.header.segment == 2);
  CHECK(c.header.previous == std::string(64, 'p'));
  CHECK(c.counted == c.declared);
  CHECK(c.counted.certificates == 1);
  CHECK(c.counted.events == 1);
  CHECK_FALSE(c.key_id);
  // One byte changed in a row: the root no longer matches its last line.
  std::string edited = text;
  edited.replace(edited.find("committed\""), 9, "cOmmitted");
  const SegmentContents e = read_segment(write(dir, "e.jsonl", edited));
  REQUIRE(e.ok());
  CHECK(e.computed_root != e.declared_root);
}

TEST_CASE("read_segment refuses a file cut short or with lines out of place", "[archive]") {
  TempDir dir;
  SegmentBuilder b = two_rows(std::nullopt);
  b.finish(nullptr);
  const std::string text = b.text();
  CHECK_THAT(read_segment(write(dir, "cut.jsonl", text.substr(0, text.size() - 1))).error,
             Catch::Contains("cut short"));
  const size_t last = text.rfind('\n', text.size() - 2);
  CHECK_THAT(read_segment(write(dir, "noend.jsonl", text.substr(0, last + 1))).error,
             Catch::Contains("no segment_end"));
  CHECK_THAT(read_segment(write(dir, "after.jsonl", text + "{\"type\":\"event\"}\n")).error,
             Catch::Contains("follows the segment_end"));
  CHECK_THAT(read_segment(write(dir, "nohead.jsonl", text.substr(text.find('\n') + 1))).error,
             Catch::Contains("line 1"));
  CHECK_THAT(read_segment(dir.file("absent.jsonl")).error, Catch::Contains("cannot read"));
}

TEST_CASE("a segment's root signature verifies under its own prefix only", "[archive]") {
  TempDir dir;
  auto signer = Signer::generate();
  SegmentBuilder b = two_rows(std::nullopt);
  const std::string root = b.finish(signer.get());
  const SegmentContents c = read_segment(write(dir, "signed.jsonl", b.text()));
  REQUIRE(c.ok());
  REQUIRE(c.key_id == signer->key_id());
  REQUIRE(c.signature);
  auto key = *PublicKey::from_pem(signer->public_key_pem());
  CHECK(key.verifies_statement(segment_signing_message(*c.key_id, root), *c.signature));
  CHECK_FALSE(key.verifies_statement(segment_signing_message(*c.key_id, std::string(64, '0')), *c.signature));
  // Not a certificate's signature over the same hex, nor the other way round.
  CHECK_FALSE(key.verifies(root, 0, *c.signature));
  CHECK_FALSE(key.verifies_statement(segment_signing_message(*c.key_id, root), signer->sign(root, 0).signature));
}

}  // namespace effectfence::archive
