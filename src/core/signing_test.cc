#include "core/signing.h"

#include <sys/stat.h>

#include <fstream>
#include <string>

#include <botan/data_src.h>
#include <botan/ed25519.h>
#include <botan/pkcs8.h>
#include <catch2/catch.hpp>

#include "core/sha256.h"
#include "support/temp_dir.h"

namespace effectfence {
namespace {

std::shared_ptr<const Signer> signer_of(const StatusOr<std::shared_ptr<const Signer>>& v) {
  if (!v.ok()) FAIL(v.status().message());
  return *v;
}

PublicKey public_of(const StatusOr<PublicKey>& v) {
  if (!v.ok()) FAIL(v.status().message());
  return *v;
}

std::string write_file(const std::string& path, const std::string& text, mode_t mode) {
  { std::ofstream(path) << text; }
  ::chmod(path.c_str(), mode);
  return path;
}

const std::string kHash = sha256_hex("a certificate body");

TEST_CASE("a key id is the first 16 hex digits of SHA-256 over the raw public key", "[signing]") {
  const auto key = Signer::generate();
  // The raw key is the last 32 bytes of the DER SubjectPublicKeyInfo, read back by Botan.
  const PublicKey pub = public_of(PublicKey::from_pem(key->public_key_pem()));
  CHECK(pub.key_id() == key->key_id());
  Botan::DataSource_Memory source(key->private_key_pem());
  auto loaded = Botan::PKCS8::load_key(source);
  auto* ed = dynamic_cast<Botan::Ed25519_PrivateKey*>(loaded.get());
  REQUIRE(ed != nullptr);
  const std::vector<uint8_t> raw = ed->get_public_key();
  REQUIRE(raw.size() == 32);
  CHECK(key->key_id() == sha256_hex(std::string(raw.begin(), raw.end())).substr(0, 16));
  CHECK(key->key_id().size() == kKeyIdHexDigits);
  // Negative control: another key has another id.
  CHECK(Signer::generate()->key_id() != key->key_id());
}

TEST_CASE("a private key survives the PKCS#8 PEM round trip and signs the same", "[signing]") {
  const auto key = Signer::generate();
  const std::string pem = key->private_key_pem();
  CHECK(pem.rfind("-----BEGIN PRIVATE KEY-----", 0) == 0);
  const auto again = signer_of(Signer::from_pem(pem));
  CHECK(again->key_id() == key->key_id());
  // Ed25519 is deterministic: the same key signs the same bytes the same way.
  CHECK(again->sign(kHash, 3).signature == key->sign(kHash, 3).signature);
  CHECK(again->public_key_pem() == key->public_key_pem());
}

TEST_CASE("a signature verifies only for its hash, its count and its key", "[signing]") {
  const auto key = Signer::generate();
  const PublicKey pub = public_of(PublicKey::from_pem(key->public_key_pem()));
  const CertificateSignature s = key->sign(kHash, 2);
  CHECK(s.key_id == key->key_id());
  CHECK(s.unsigned_before == 2);
  CHECK(s.signature.size() == kSignatureHexDigits);
  CHECK(pub.verifies(kHash, 2, s.signature));
  CHECK_FALSE(pub.verifies(sha256_hex("another body"), 2, s.signature));  // moved to another certificate
  CHECK_FALSE(pub.verifies(kHash, 3, s.signature));                      // another count of unsigned history
  std::string flipped = s.signature;
  flipped[10] = flipped[10] == '0' ? '1' : '0';
  CHECK_FALSE(pub.verifies(kHash, 2, flipped));
  CHECK_FALSE(pub.verifies(kHash, 2, s.signature.substr(2)));  // not 64 bytes
  CHECK_FALSE(pub.verifies(kHash, 2, std::string(kSignatureHexDigits, 'z')));
  const PublicKey other = public_of(PublicKey::from_pem(Signer::generate()->public_key_pem()));
  CHECK_FALSE(other.verifies(kHash, 2, s.signature));
}

TEST_CASE("the signed message is domain-separated and names the key", "[signing]") {
  CHECK(signing_message(kHash, "0123456789abcdef", 7) ==
        "effectfence certificate signature v1\n0123456789abcdef\n" + kHash + "\n7");
}

TEST_CASE("key files are owner-only Ed25519 PKCS#8, refused with the file named, never its bytes", "[signing]") {
  testing::TempDir dir;
  const auto key = Signer::generate();
  const std::string pem = key->private_key_pem();
  const std::string good = write_file(dir.file("good.key"), pem, 0600);
  CHECK(signer_of(Signer::from_file(good))->key_id() == key->key_id());

  const std::string open = write_file(dir.file("open.key"), pem, 0644);
  auto refused = Signer::from_file(open);
  REQUIRE_FALSE(refused.ok());
  const std::string& error = refused.status().message();
  CHECK_THAT(error, Catch::Contains(open) && Catch::Contains("mode 0644") && Catch::Contains("chmod 600"));
  const std::string secret_line = pem.substr(pem.find('\n') + 1, 20);
  CHECK_THAT(error, !Catch::Contains(secret_line));

  const std::string group = write_file(dir.file("group.key"), pem, 0640);
  CHECK_FALSE(Signer::from_file(group).ok());

  const std::string pub = write_file(dir.file("pub.key"), key->public_key_pem(), 0600);
  auto not_private = Signer::from_file(pub);
  REQUIRE_FALSE(not_private.ok());
  CHECK_THAT(not_private.status().message(), Catch::Contains("not an unencrypted PKCS#8 PEM private key"));

  auto missing = Signer::from_file(dir.file("missing.key"));
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(missing.status().message(), Catch::Contains("missing.key") && Catch::Contains("No such file"));

  const std::string garbage = write_file(dir.file("garbage.key"), "-----BEGIN PRIVATE KEY-----\nAAAA\n", 0600);
  CHECK_FALSE(Signer::from_file(garbage).ok());

  // A public key file may be world-readable; a private key in its place is refused.
  const std::string pub_file = write_file(dir.file("k.pub"), key->public_key_pem(), 0644);
  CHECK(public_of(PublicKey::from_file(pub_file)).key_id() == key->key_id());
  CHECK_FALSE(PublicKey::from_file(good).ok());
}

}  // namespace
}  // namespace effectfence
