#include <catch2/catch.hpp>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "effectfence/certificate.h"

using effectfence::Certificate;
using effectfence::Json;
using effectfence::read_set_from_json;
using effectfence::read_set_to_json;
using effectfence::ReadSetEntry;
using effectfence::VectorClock;

namespace {

Certificate sample_certificate() {
  Certificate cert;
  cert.intent = "charge:order-123";
  cert.parent = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
  cert.domain = "order:123";
  cert.seq = 7;
  cert.generation = 2;
  cert.tool = "stripe.charge";
  cert.args = Json{{"currency", "eur"}, {"amount", 4250}, {"note", "caf\u00e9"}};
  cert.result = Json{{"ok", true}, {"id", "ch_1"}, {"fee", 1.5}};
  cert.vector_clock.tick("agent-b");
  for (int i = 0; i < 3; ++i) cert.vector_clock.tick("agent-a");
  cert.read_set = {{"order:123", 6}, {"customer:9", 2}};
  cert.agent = "agent-a";
  return cert;
}

// The canonical body of sample_certificate(), written out by hand, and its
// SHA-256 as computed by sha256sum.
const char* const kSampleCanonicalBody =
    "{\"agent\":\"agent-a\",\"args\":{\"amount\":4250,\"currency\":\"eur\",\"note\":\"caf\u00e9\"},"
    "\"domain\":\"order:123\",\"generation\":2,\"intent\":\"charge:order-123\","
    "\"parent\":\"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\","
    "\"read_set\":[{\"domain\":\"order:123\",\"seq\":6},{\"domain\":\"customer:9\",\"seq\":2}],"
    "\"result\":{\"fee\":1.5,\"id\":\"ch_1\",\"ok\":true},\"seq\":7,\"tool\":\"stripe.charge\","
    "\"vector_clock\":{\"agent-a\":3,\"agent-b\":1}}";
const char* const kSampleHash = "115d5005a9ab2e14934d0c7d720a8790cee8974fe86a6de28046bdbf94de184b";

Certificate sealed_sample() {
  Certificate cert = sample_certificate();
  cert.seal();
  return cert;
}

}  // namespace

TEST_CASE("known answer: canonical body and hash of a fixed certificate", "[certificate]") {
  const Certificate cert = sample_certificate();
  CHECK(cert.canonical_body() == kSampleCanonicalBody);
  CHECK(cert.compute_hash() == kSampleHash);
}

TEST_CASE("seal returns exactly the body it hashed, which is what a ledger stores", "[certificate]") {
  Certificate cert = sample_certificate();
  CHECK(cert.seal() == kSampleCanonicalBody);
  CHECK(cert.hash == kSampleHash);

  Certificate unsafe = sample_certificate();
  unsafe.result = {{"too_big", 9007199254740993ULL}};  // beyond 2^53: no canonical form
  CHECK(unsafe.seal().empty());
  CHECK(unsafe.hash.empty());
}

TEST_CASE("the canonical body is the canonical form of body(), whatever the fields hold", "[certificate]") {
  Certificate cert = sample_certificate();
  const auto same = [](const Certificate& c) { CHECK(c.canonical_body() == effectfence::canonicalize(c.body())); };
  same(cert);
  cert.parent.clear();
  same(cert);
  cert.args = Json::parse(R"({"z": [1, 2.5e3, {"b": null, "a": "\u00e9\n\"q\""}], "\u20ac": -7, "a": []})");
  cert.result = Json::parse(R"(["\ud83d\ude00", 1e-7, {"": {}}])");
  cert.intent = "intent \"quoted\" \u00e9";
  same(cert);
  cert.read_set.clear();
  cert.vector_clock = VectorClock{};
  cert.result = nullptr;
  same(cert);
  cert.result = Json(std::string("\xff"));  // invalid UTF-8: no canonical form
  CHECK(cert.canonical_body().empty());
}

TEST_CASE("body has the eleven fields, parent null when empty", "[certificate]") {
  Certificate cert = sample_certificate();
  CHECK(cert.body().size() == 11);
  CHECK_FALSE(cert.body().contains("hash"));
  CHECK(cert.body()["parent"] == cert.parent);
  cert.parent.clear();
  CHECK(cert.body()["parent"].is_null());
  CHECK(cert.to_json().size() == 12);
}

TEST_CASE("seal then verify", "[certificate]") {
  Certificate cert = sample_certificate();
  CHECK_FALSE(cert.verify());
  cert.seal();
  CHECK(cert.hash == kSampleHash);
  CHECK(cert.verify());
}

TEST_CASE("tampering with any single field breaks verification", "[certificate]") {
  const std::vector<std::pair<const char*, std::function<void(Certificate&)>>> tamperings = {
      {"intent", [](Certificate& c) { c.intent += "x"; }},
      {"parent", [](Certificate& c) { c.parent.clear(); }},
      {"domain", [](Certificate& c) { c.domain = "order:124"; }},
      {"seq", [](Certificate& c) { c.seq += 1; }},
      {"generation", [](Certificate& c) { c.generation += 1; }},
      {"tool", [](Certificate& c) { c.tool = "stripe.refund"; }},
      {"args", [](Certificate& c) { c.args["amount"] = 4251; }},
      {"result", [](Certificate& c) { c.result["ok"] = false; }},
      {"vector_clock", [](Certificate& c) { c.vector_clock.tick("agent-b"); }},
      {"read_set", [](Certificate& c) { c.read_set[1].seq = 3; }},
      {"agent", [](Certificate& c) { c.agent = "agent-b"; }},
      {"hash", [](Certificate& c) { c.hash[0] = c.hash[0] == '0' ? '1' : '0'; }},
  };
  for (const auto& [field, tamper] : tamperings) {
    INFO(field);
    Certificate cert = sealed_sample();
    REQUIRE(cert.verify());
    tamper(cert);
    CHECK_FALSE(cert.verify());
  }
}

TEST_CASE("reordering the read set changes the hash", "[certificate]") {
  Certificate cert = sealed_sample();
  std::swap(cert.read_set[0], cert.read_set[1]);
  CHECK_FALSE(cert.verify());
}

TEST_CASE("to_json / from_json round-trip keeps the hash", "[certificate]") {
  const Certificate cert = sealed_sample();
  const Json j = cert.to_json();
  CHECK(j["hash"] == kSampleHash);
  const auto back = Certificate::from_json(j);
  REQUIRE(back.has_value());
  CHECK(back->hash == cert.hash);
  CHECK(back->verify());
  CHECK(back->to_json() == j);
  CHECK(back->read_set == cert.read_set);
  CHECK(back->vector_clock == cert.vector_clock);

  // Also through text, as it travels.
  const auto reparsed = Certificate::from_json(Json::parse(j.dump()));
  REQUIRE(reparsed.has_value());
  CHECK(reparsed->verify());
}

TEST_CASE("from_json accepts a certificate without parent", "[certificate]") {
  Certificate cert = sample_certificate();
  cert.parent.clear();
  cert.seal();
  const auto back = Certificate::from_json(cert.to_json());
  REQUIRE(back.has_value());
  CHECK(back->parent.empty());
  CHECK(back->verify());
}

TEST_CASE("from_json refuses wrong types, missing and extra fields without throwing", "[certificate]") {
  const Json good = sealed_sample().to_json();
  REQUIRE(Certificate::from_json(good).has_value());

  const std::vector<std::pair<const char*, Json>> wrong_values = {
      {"intent", 1},
      {"parent", 5},
      {"domain", Json::array()},
      {"seq", "7"},
      {"seq", 7.5},
      {"seq", uint64_t{1} << 63},
      {"generation", nullptr},
      {"tool", false},
      {"vector_clock", Json::array()},
      {"vector_clock", Json{{"agent-a", -1}}},
      {"read_set", Json::object()},
      {"read_set", Json::array({Json{{"domain", "d"}}})},
      {"read_set", Json::array({Json{{"domain", "d"}, {"seq", -1}}})},
      {"agent", Json::object()},
      {"hash", 0},
  };
  for (const auto& [key, value] : wrong_values) {
    INFO(key << " = " << value.dump());
    Json bad = good;
    bad[key] = value;
    CHECK_FALSE(Certificate::from_json(bad).has_value());
  }
  for (auto member = good.begin(); member != good.end(); ++member) {
    INFO("without " << member.key());
    Json missing = good;
    missing.erase(member.key());
    CHECK_FALSE(Certificate::from_json(missing).has_value());
  }
  Json extra = good;
  extra["note"] = "not hashed";
  CHECK_FALSE(Certificate::from_json(extra).has_value());
  CHECK_FALSE(Certificate::from_json(Json::array()).has_value());
  CHECK_FALSE(Certificate::from_json(Json("certificate")).has_value());
  CHECK_FALSE(Certificate::from_json(Json()).has_value());
}

TEST_CASE("a certificate without a canonical form never verifies", "[certificate]") {
  Certificate cert = sample_certificate();
  cert.args = Json{{"amount", uint64_t{9007199254740993}}};
  CHECK(cert.canonical_body().empty());
  cert.seal();
  CHECK(cert.hash.empty());
  CHECK_FALSE(cert.verify());
}

TEST_CASE("read set round-trip and refusals", "[read_set]") {
  const std::vector<ReadSetEntry> read_set = {{"a", 0}, {"b", 12}};
  const Json j = read_set_to_json(read_set);
  CHECK(j == Json::parse(R"([{"domain":"a","seq":0},{"domain":"b","seq":12}])"));
  const auto back = read_set_from_json(j);
  REQUIRE(back.has_value());
  CHECK(*back == read_set);

  const auto empty = read_set_from_json(Json::array());
  REQUIRE(empty.has_value());
  CHECK(empty->empty());

  CHECK_FALSE(read_set_from_json(Json::object()).has_value());
  CHECK_FALSE(read_set_from_json(Json::parse(R"([{"domain":"a","seq":-1}])")).has_value());
  CHECK_FALSE(read_set_from_json(Json::parse(R"([{"domain":"a","seq":1.5}])")).has_value());
  // 3.0 is an integer to JSON Schema, which fence_prepare's inputSchema is.
  const auto integral = read_set_from_json(Json::parse(R"([{"domain":"a","seq":3.0}])"));
  REQUIRE(integral.has_value());
  CHECK(integral->at(0).seq == 3);
  CHECK_FALSE(read_set_from_json(Json::parse(R"([{"domain":"a","seq":-0.5}])")).has_value());
  CHECK_FALSE(read_set_from_json(Json::parse(R"([{"domain":"a","seq":"1"}])")).has_value());
  CHECK_FALSE(read_set_from_json(Json::parse(R"([{"domain":1,"seq":1}])")).has_value());
  CHECK_FALSE(read_set_from_json(Json::parse(R"([{"seq":1}])")).has_value());
  CHECK_FALSE(read_set_from_json(Json::parse(R"([{"domain":"a"}])")).has_value());
  CHECK_FALSE(read_set_from_json(Json::parse(R"([["a",1]])")).has_value());
}
