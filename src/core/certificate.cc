#include "effectfence/certificate.h"

#include <array>
#include <stdexcept>

#include "core/json_members.h"
#include "core/sha256.h"

namespace effectfence {
namespace {

constexpr std::array<const char*, 12> kCertificateKeys = {
    "intent", "parent", "domain", "seq", "generation", "tool",
    "args", "result", "vector_clock", "read_set", "agent", "hash"};

// parent is null for "no parent"; a string is taken as is.
std::optional<std::string> parent_member(const Json& j) {
  const auto found = j.find("parent");
  if (found != j.end() && found->is_null()) return std::string();
  return string_member(j, "parent");
}

// Anything beyond the known fields would ride along unhashed, so a document
// carrying extra members is not a certificate.
bool has_exactly_certificate_keys(const Json& j) {
  if (j.size() != kCertificateKeys.size()) return false;
  for (const char* key : kCertificateKeys) {
    if (!j.contains(key)) return false;
  }
  return true;
}

}  // namespace

Json Certificate::body() const {
  return Json{
      {"intent", intent},
      {"parent", parent.empty() ? Json(nullptr) : Json(parent)},
      {"domain", domain},
      {"seq", seq},
      {"generation", generation},
      {"tool", tool},
      {"args", args},
      {"result", result},
      {"vector_clock", vector_clock.to_json()},
      {"read_set", read_set_to_json(read_set)},
      {"agent", agent},
  };
}

std::string Certificate::canonical_body() const {
  // canonicalize(body()), spelled out member by member in RFC 8785's key
  // order into one string, so that args and result are not first copied
  // into a temporary document: this runs for every commit. "" when a field
  // has no canonical form (an unsafe integer, invalid UTF-8): such a
  // certificate cannot be sealed or verified.
  try {
    std::string out;
    out.reserve(256);
    const auto member = [&out](const char* opening, const Json& value) {
      out += opening;
      canonicalize_into(value, out);
    };
    member("{\"agent\":", Json(agent));
    member(",\"args\":", args);
    member(",\"domain\":", Json(domain));
    member(",\"generation\":", Json(generation));
    member(",\"intent\":", Json(intent));
    member(",\"parent\":", parent.empty() ? Json(nullptr) : Json(parent));
    member(",\"read_set\":", read_set_to_json(read_set));
    member(",\"result\":", result);
    member(",\"seq\":", Json(seq));
    member(",\"tool\":", Json(tool));
    member(",\"vector_clock\":", vector_clock.to_json());
    out += "}";
    return out;
  } catch (const std::invalid_argument&) {
    return "";
  }
}

std::string Certificate::compute_hash() const {
  const std::string canonical = canonical_body();
  return canonical.empty() ? "" : sha256_hex(canonical);
}

std::string Certificate::seal() {
  std::string canonical = canonical_body();
  hash = canonical.empty() ? "" : sha256_hex(canonical);
  return canonical;
}

bool Certificate::verify() const {
  const std::string expected = compute_hash();
  return !expected.empty() && expected == hash;
}

Json Certificate::to_json() const {
  Json j = body();
  j["hash"] = hash;
  return j;
}

std::optional<Certificate> Certificate::from_json(const Json& j) {
  if (!j.is_object() || !has_exactly_certificate_keys(j)) return std::nullopt;
  const auto intent = string_member(j, "intent");
  const auto parent = parent_member(j);
  const auto domain = string_member(j, "domain");
  const auto seq = int64_member(j, "seq");
  const auto generation = int64_member(j, "generation");
  const auto tool = string_member(j, "tool");
  const auto vector_clock = VectorClock::from_json(j.at("vector_clock"));
  const auto read_set = read_set_from_json(j.at("read_set"));
  const auto agent = string_member(j, "agent");
  const auto hash = string_member(j, "hash");
  if (!intent || !parent || !domain || !seq || !generation || !tool || !vector_clock ||
      !read_set || !agent || !hash) {
    return std::nullopt;
  }
  Certificate cert;
  cert.intent = *intent;
  cert.parent = *parent;
  cert.domain = *domain;
  cert.seq = *seq;
  cert.generation = *generation;
  cert.tool = *tool;
  cert.args = j.at("args");
  cert.result = j.at("result");
  cert.vector_clock = *vector_clock;
  cert.read_set = *read_set;
  cert.agent = *agent;
  cert.hash = *hash;
  return cert;
}

}  // namespace effectfence
