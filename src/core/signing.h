// Ed25519 signatures over certificates, with a key the ledger never holds.
//
// A certificate's hash proves its fields are consistent with each other and
// with its chain, not who wrote them: anyone who can write the ledger can
// rewrite a result and rehash. A signature made with a key kept outside the
// ledger proves that a process holding that key issued the certificate.
//
// What is signed (one rule, here only): the bytes
//   "effectfence certificate signature v1\n" + key_id + "\n" + hash + "\n" +
//   decimal(unsigned_before)
// where hash is the certificate's 64-hex-digit hash, key_id the signer's
// (below) and unsigned_before how many unsigned certificates the ledger
// held when signing began (the same in every signature of a ledger: a
// rewritten certificate, which cannot be signed again, shows as one
// unsigned certificate too many). The domain-separation prefix keeps a signature over a
// certificate from being valid as any other statement made with the key;
// the key id inside keeps a signature from being passed off under another key.
//
// A key id is the first 16 hex digits of SHA-256 over the 32 raw bytes of
// the Ed25519 public key.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace Botan {
class Ed25519_PrivateKey;
class Ed25519_PublicKey;
}  // namespace Botan

namespace effectfence {

// Lengths as stored: a key id of 16 and a signature of 128 lower-case hex digits.
constexpr size_t kKeyIdHexDigits = 16;
constexpr size_t kSignatureHexDigits = 128;

// The key id of a 32-byte raw Ed25519 public key.
std::string key_id_of(const std::vector<uint8_t>& raw_public_key);

// The exact bytes a signature covers (see above).
std::string signing_message(const std::string& certificate_hash, const std::string& key_id, int64_t unsigned_before);

// One certificate's signature, as the ledger stores it.
struct CertificateSignature {
  std::string key_id;        // kKeyIdHexDigits lower-case hex
  std::string signature;     // kSignatureHexDigits lower-case hex (64 bytes)
  int64_t unsigned_before = 0;  // signed with the hash (see above)
};

// A signing key. Thread-safe: sign() may run on any number of threads.
class Signer {
 public:
  ~Signer();
  Signer(const Signer&) = delete;
  Signer& operator=(const Signer&) = delete;

  // From the text of a PKCS#8 PEM private key. Returns the Signer, or an
  // error that says what is wrong, never the key's bytes.
  static StatusOr<std::shared_ptr<const Signer>> from_pem(const std::string& pem);
  // Reads a key file written by `effectfence keygen`. Refuses (with an error
  // naming the file and what to do) a file that cannot be read, is not a
  // regular file, can be read or written by its group or by others, or does
  // not hold an Ed25519 private key in PKCS#8 PEM.
  static StatusOr<std::shared_ptr<const Signer>> from_file(const std::string& path);

  const std::string& key_id() const { return key_id_; }
  // The public half as X.509 SubjectPublicKeyInfo PEM.
  std::string public_key_pem() const;
  // The PKCS#8 PEM of the private key (what keygen writes; nothing else may
  // print or store it).
  std::string private_key_pem() const;
  CertificateSignature sign(const std::string& certificate_hash, int64_t unsigned_before) const;
  // The hex signature over message, for statements other than a
  // certificate's (an archive segment's root). REQUIRES: message begins
  // with its own domain-separation prefix, never the certificates' one.
  std::string sign_statement(const std::string& message) const;

  // A new key from the system's CSPRNG. Throws if the RNG is unavailable.
  static std::shared_ptr<const Signer> generate();

 private:
  explicit Signer(std::unique_ptr<Botan::Ed25519_PrivateKey> key);
  std::unique_ptr<Botan::Ed25519_PrivateKey> key_;
  std::string key_id_;
};

// A public key that checks signatures.
class PublicKey {
 public:
  // From the text of an X.509 SubjectPublicKeyInfo PEM (a .pub file keygen
  // wrote). Returns the key, or an error that says what is wrong.
  static StatusOr<PublicKey> from_pem(const std::string& pem);
  static StatusOr<PublicKey> from_file(const std::string& path);

  const std::string& key_id() const { return key_id_; }
  // Returns true iff signature_hex is this key's signature over
  // signing_message(certificate_hash, key_id(), unsigned_before).
  bool verifies(const std::string& certificate_hash, int64_t unsigned_before, const std::string& signature_hex) const;
  // Returns true iff signature_hex is this key's signature over message
  // (Signer::sign_statement).
  bool verifies_statement(const std::string& message, const std::string& signature_hex) const;

 private:
  std::vector<uint8_t> raw_;  // 32 bytes
  std::string key_id_;
};

}  // namespace effectfence
