#include "mcp/protocol_era.h"

#include <catch2/catch.hpp>

#include "mcp/raw_json.h"

namespace effectfence::mcp {
namespace {

Json envelope(const std::string& version) {
  return {{"_meta",
           {{kProtocolVersionMetaKey, version},
            {kClientInfoMetaKey, {{"name", "c"}, {"version", "1"}}},
            {kClientCapabilitiesMetaKey, Json::object()}}}};
}

TEST_CASE("a request without an envelope, or naming a 2025 revision in it, is 2025-era", "[protocol_era]") {
  Envelope e;
  CHECK_FALSE(read_envelope(Json::object(), &e));
  CHECK_FALSE(e.modern());
  CHECK_FALSE(read_envelope({{"_meta", {{"progressToken", 1}}}}, &e));
  CHECK_FALSE(e.modern());
  CHECK_FALSE(read_envelope(envelope("2025-11-25"), &e));
  CHECK_FALSE(e.modern());
}

TEST_CASE("a 2026-07-28 envelope is read: version, client info, capabilities", "[protocol_era]") {
  Envelope e;
  CHECK_FALSE(read_envelope(envelope("2026-07-28"), &e));
  CHECK(e.modern());
  CHECK(e.version == "2026-07-28");
  CHECK(e.client_info["name"] == "c");
  CHECK(e.client_capabilities == Json::object());
}

TEST_CASE("an unknown stateless revision is -32022 naming every revision we speak", "[protocol_era]") {
  Envelope e;
  const auto error = read_envelope(envelope("2099-01-01"), &e);
  REQUIRE(error);
  CHECK(error->code == kUnsupportedProtocolVersion);
  CHECK(error->data["requested"] == "2099-01-01");
  CHECK(error->data["supported"] == supported_versions_json());
  CHECK(supported_versions_json().front() == "2026-07-28");
}

TEST_CASE("an envelope without clientCapabilities, or with a version that is no string, is -32602", "[protocol_era]") {
  Envelope e;
  Json params = envelope("2026-07-28");
  params["_meta"].erase(kClientCapabilitiesMetaKey);
  auto error = read_envelope(params, &e);
  REQUIRE(error);
  CHECK(error->code == -32602);
  CHECK(error->message.find("clientCapabilities") != std::string::npos);
  params["_meta"][kProtocolVersionMetaKey] = 20260728;
  error = read_envelope(params, &e);
  REQUIRE(error);
  CHECK(error->code == -32602);
}

TEST_CASE("stateless results carry resultType, and cache fields only where the revision asks", "[protocol_era]") {
  Json list = {{"tools", Json::array()}};
  stamp_modern_result(list, "tools/list", {{"name", "s"}, {"version", "1"}});
  CHECK(list["resultType"] == "complete");
  CHECK(list["ttlMs"] == 0);
  CHECK(list["cacheScope"] == "private");
  CHECK(list["_meta"][kServerInfoMetaKey]["name"] == "s");
  Json call = {{"content", Json::array()}};
  stamp_modern_result(call, "tools/call", nullptr);
  CHECK(call["resultType"] == "complete");
  CHECK_FALSE(call.contains("ttlMs"));
  CHECK_FALSE(call.contains("_meta"));
}

TEST_CASE("a relayed result keeps its bytes and gains only the members the revision requires", "[protocol_era]") {
  Json relayed = raw_json(R"({"z": 1, "content": [], "a": "kept as written"})");
  stamp_modern_result(relayed, "tools/call", nullptr);
  const std::string text = raw_json_text(relayed);
  CHECK(text.rfind(R"({"z": 1, "content": [], "a": "kept as written")", 0) == 0);
  CHECK(*member_text(text, "resultType") == R"("complete")");
  Json listed = raw_json(R"({"tools": [], "resultType": "complete", "ttlMs": 5})");
  stamp_modern_result(listed, "resources/list", nullptr);
  CHECK(*member_text(raw_json_text(listed), "ttlMs") == "5");  // the relayed server's own hint stands
  CHECK(*member_text(raw_json_text(listed), "cacheScope") == R"("private")");
}

TEST_CASE("a stateless message is server/discover or one whose _meta names 2026-07-28 or later", "[protocol_era]") {
  CHECK(is_stateless_message({{"jsonrpc", "2.0"}, {"id", 1}, {"method", "server/discover"}}));
  CHECK(is_stateless_message({{"jsonrpc", "2.0"}, {"id", 1}, {"method", "tools/list"}, {"params", envelope("2099-01-01")}}));
  CHECK_FALSE(is_stateless_message({{"jsonrpc", "2.0"}, {"id", 1}, {"method", "tools/list"}}));
  CHECK_FALSE(is_stateless_message({{"jsonrpc", "2.0"}, {"id", 1}, {"method", "tools/list"}, {"params", envelope("2025-11-25")}}));
  CHECK_FALSE(is_stateless_message(Json::array()));
}

// Looks headers up in a fixed list, as an HTTP server's request would.
std::function<std::optional<std::string>(const std::string&)> lookup(const HttpHeaders& headers) {
  return [headers](const std::string& name) -> std::optional<std::string> {
    for (const auto& [n, v] : headers) {
      if (n == name) return v;
    }
    return std::nullopt;
  };
}

Json tool_call(const std::string& name) {
  Json params = envelope("2026-07-28");
  params["name"] = name;
  params["arguments"] = Json::object();
  return {{"jsonrpc", "2.0"}, {"id", 7}, {"method", "tools/call"}, {"params", params}};
}

TEST_CASE("a stateless request is sent with the headers its body names, and they check out", "[protocol_era]") {
  const Json call = tool_call("fence_prepare");
  const HttpHeaders headers = standard_request_headers(call);
  CHECK(headers == HttpHeaders{{"MCP-Protocol-Version", "2026-07-28"},
                               {"Mcp-Method", "tools/call"},
                               {"Mcp-Name", "fence_prepare"}});
  CHECK_FALSE(check_standard_headers(call, lookup(headers)));

  Json read = {{"jsonrpc", "2.0"}, {"id", 1}, {"method", "resources/read"}, {"params", envelope("2026-07-28")}};
  read["params"]["uri"] = "file:///a b";
  CHECK(standard_request_headers(read).back() == std::make_pair(std::string("Mcp-Name"), std::string("file:///a b")));
  Json list = {{"jsonrpc", "2.0"}, {"id", 1}, {"method", "tools/list"}, {"params", envelope("2026-07-28")}};
  CHECK(standard_request_headers(list).size() == 2);  // no Mcp-Name for a method without one
}

TEST_CASE("a name that is not printable ASCII travels as =?base64?...?= and decodes back", "[protocol_era]") {
  const Json call = tool_call("p\xc3\xa4y");  // "päy"
  const HttpHeaders headers = standard_request_headers(call);
  CHECK(headers.back().second == "=?base64?cMOkeQ==?=");
  CHECK_FALSE(check_standard_headers(call, lookup(headers)));
  CHECK(standard_request_headers(tool_call(" padded")).back().second == "=?base64?IHBhZGRlZA==?=");
}

TEST_CASE("a header that disagrees with the body, or a missing one on a request, is -32020", "[protocol_era]") {
  const Json call = tool_call("fence_prepare");
  const HttpHeaders good = standard_request_headers(call);
  for (size_t i = 0; i < good.size(); ++i) {
    HttpHeaders wrong = good;
    wrong[i].second = "other";
    const auto error = check_standard_headers(call, lookup(wrong));
    REQUIRE(error);
    CHECK(error->code == kHeaderMismatch);
    CHECK_THAT(error->message, Catch::Contains(good[i].first));

    HttpHeaders missing = good;
    missing.erase(missing.begin() + static_cast<std::ptrdiff_t>(i));
    const auto absent = check_standard_headers(call, lookup(missing));
    REQUIRE(absent);
    CHECK(absent->code == kHeaderMismatch);
    CHECK_THAT(absent->message, Catch::Contains("missing " + good[i].first));
  }
  HttpHeaders bad_base64 = good;
  bad_base64.back().second = "=?base64?%%%?=";
  CHECK(check_standard_headers(call, lookup(bad_base64)));

  // A notification need not carry them, but what it carries must agree.
  Json note = {{"jsonrpc", "2.0"}, {"method", "notifications/cancelled"}, {"params", envelope("2026-07-28")}};
  CHECK_FALSE(check_standard_headers(note, lookup({})));
  CHECK(check_standard_headers(note, lookup({{"Mcp-Method", "notifications/progress"}})));
}

}  // namespace
}  // namespace effectfence::mcp
