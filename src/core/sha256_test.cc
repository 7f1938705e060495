#include <catch2/catch.hpp>

#include <set>
#include <string>

#include "core/random_token.h"
#include "core/sha256.h"

using effectfence::random_token_hex;
using effectfence::sha256_hex;

TEST_CASE("sha256_hex matches the FIPS 180-2 test vectors", "[sha256]") {
  CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST_CASE("sha256_hex hashes embedded NUL bytes", "[sha256]") {
  CHECK(sha256_hex(std::string("a\0b", 3)) != sha256_hex("a"));
}

TEST_CASE("random tokens are lower-case hex of the requested length and do not repeat", "[random_token]") {
  std::set<std::string> seen;
  for (int i = 0; i < 200; ++i) {
    const std::string token = random_token_hex();
    REQUIRE(token.size() == 32);
    CHECK(token.find_first_not_of("0123456789abcdef") == std::string::npos);
    seen.insert(token);
  }
  CHECK(seen.size() == 200);
  CHECK(random_token_hex(4).size() == 8);
  CHECK(random_token_hex(0).empty());
}
