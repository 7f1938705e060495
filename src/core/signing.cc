#include "core/signing.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>

#include <botan/data_src.h>
#include <botan/ed25519.h>
#include <botan/hex.h>
#include <botan/pkcs8.h>
#include <botan/pubkey.h>
#include <botan/system_rng.h>
#include <botan/x509_key.h>

#include "core/sha256.h"
#include "core/status.h"

namespace effectfence {
namespace {

constexpr const char* kDomain = "effectfence certificate signature v1\n";
// A PEM key is a few hundred bytes; anything much larger is not one.
constexpr off_t kMaxKeyFileBytes = 64 * 1024;

char octal_digit(unsigned bits) { return static_cast<char>('0' + (bits & 7u)); }

std::string mode_text(mode_t mode) {
  return std::string("0") + octal_digit(mode >> 6) + octal_digit(mode >> 3) + octal_digit(mode);
}

// Reads a whole small file. The key's bytes stay in *text only (not in a
// StatusOr: the caller wipes them); errors name the file and the step.
Status read_small_file(const std::string& path, const char* what, bool owner_only, std::string* text) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    return Status::Error(std::string("cannot read the ") + what + " " + path + ": " + std::strerror(errno));
  }
  struct stat st {};
  std::string error;
  if (::fstat(fd, &st) != 0) {
    error = std::string("cannot read the ") + what + " " + path + ": " + std::strerror(errno);
  } else if (!S_ISREG(st.st_mode)) {
    error = std::string("the ") + what + " " + path + " is not a regular file";
  } else if (owner_only && (st.st_mode & 077) != 0) {
    // As ssh does: a key others can read is a key others may have.
    error = std::string("the ") + what + " " + path + " has mode " + mode_text(st.st_mode & 0777) +
            ": it must be readable by its owner only. Run chmod 600 " + path +
            ", and if others could read it, make a new key and retire this one";
  } else if (st.st_size > kMaxKeyFileBytes) {
    error = std::string("the ") + what + " " + path + " is " + std::to_string(st.st_size) +
            " bytes, too large to be a PEM key";
  }
  if (error.empty()) {
    char buffer[4096];
    for (;;) {
      const ssize_t n = ::read(fd, buffer, sizeof buffer);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        error = std::string("cannot read the ") + what + " " + path + ": " + std::strerror(errno);
        break;
      }
      if (n == 0) break;
      text->append(buffer, static_cast<size_t>(n));
      if (text->size() > static_cast<size_t>(kMaxKeyFileBytes)) {
        error = std::string("the ") + what + " " + path + " is too large to be a PEM key";
        break;
      }
    }
    std::memset(buffer, 0, sizeof buffer);
  }
  ::close(fd);
  return error.empty() ? Status::Ok() : Status::Error(error);
}

// Overwrites a string that held key material before it is freed.
void wipe(std::string& s) {
  volatile char* p = s.data();
  for (size_t i = 0; i < s.size(); ++i) p[i] = 0;
  s.clear();
}

}  // namespace

std::string key_id_of(const std::vector<uint8_t>& raw_public_key) {
  return sha256_hex(std::string(raw_public_key.begin(), raw_public_key.end())).substr(0, kKeyIdHexDigits);
}

std::string signing_message(const std::string& certificate_hash, const std::string& key_id, int64_t unsigned_before) {
  return kDomain + key_id + "\n" + certificate_hash + "\n" + std::to_string(unsigned_before);
}

Signer::Signer(std::unique_ptr<Botan::Ed25519_PrivateKey> key)
    : key_(std::move(key)), key_id_(key_id_of(key_->get_public_key())) {}

Signer::~Signer() = default;

StatusOr<std::shared_ptr<const Signer>> Signer::from_pem(const std::string& pem) {
  std::unique_ptr<Botan::Private_Key> key;
  try {
    Botan::DataSource_Memory source(pem);
    key = Botan::PKCS8::load_key(source);
  } catch (const std::exception&) {
    // Botan's message is not passed on: nothing about the key's bytes may
    // reach a log.
    return Status::Error("it is not an unencrypted PKCS#8 PEM private key");
  }
  auto* ed25519 = dynamic_cast<Botan::Ed25519_PrivateKey*>(key.get());
  if (!ed25519) {
    return Status::Error("it holds a key of type " + key->algo_name() + ", not Ed25519");
  }
  key.release();
  return std::shared_ptr<const Signer>(new Signer(std::unique_ptr<Botan::Ed25519_PrivateKey>(ed25519)));
}

StatusOr<std::shared_ptr<const Signer>> Signer::from_file(const std::string& path) {
  std::string pem;
  if (const Status read = read_small_file(path, "signing key", /*owner_only=*/true, &pem); !read.ok()) {
    wipe(pem);
    return read;
  }
  auto signer = from_pem(pem);
  wipe(pem);
  if (!signer.ok()) return Status::Error("the signing key " + path + " is refused: " + signer.status().message());
  return signer;
}

std::shared_ptr<const Signer> Signer::generate() {
  Botan::System_RNG rng;
  return std::shared_ptr<const Signer>(new Signer(std::make_unique<Botan::Ed25519_PrivateKey>(rng)));
}

std::string Signer::public_key_pem() const { return Botan::X509::PEM_encode(*key_); }

std::string Signer::private_key_pem() const { return Botan::PKCS8::PEM_encode(*key_); }

CertificateSignature Signer::sign(const std::string& certificate_hash, int64_t unsigned_before) const {
  return {key_id_, sign_statement(signing_message(certificate_hash, key_id_, unsigned_before)), unsigned_before};
}

std::string Signer::sign_statement(const std::string& message) const {
  // Ed25519 is deterministic; the RNG is only what PK_Signer's interface asks for.
  Botan::System_RNG rng;
  Botan::PK_Signer signer(*key_, rng, "Pure");
  const std::vector<uint8_t> signature =
      signer.sign_message(reinterpret_cast<const uint8_t*>(message.data()), message.size(), rng);
  return Botan::hex_encode(signature, false);
}

StatusOr<PublicKey> PublicKey::from_pem(const std::string& pem) {
  std::unique_ptr<Botan::Public_Key> key;
  try {
    Botan::DataSource_Memory source(pem);
    key.reset(Botan::X509::load_key(source));
  } catch (const std::exception& e) {
    return Status::Error(std::string("it is not a PEM public key (") + e.what() + ")");
  }
  const auto* ed25519 = dynamic_cast<const Botan::Ed25519_PublicKey*>(key.get());
  if (!ed25519) return Status::Error("it holds a key of type " + key->algo_name() + ", not Ed25519");
  PublicKey out;
  out.raw_ = ed25519->get_public_key();
  out.key_id_ = key_id_of(out.raw_);
  return out;
}

StatusOr<PublicKey> PublicKey::from_file(const std::string& path) {
  std::string pem;
  if (const Status read = read_small_file(path, "public key", /*owner_only=*/false, &pem); !read.ok()) {
    return read;
  }
  auto key = from_pem(pem);
  if (!key.ok()) return Status::Error("the public key " + path + " is refused: " + key.status().message());
  return key;
}

bool PublicKey::verifies(const std::string& certificate_hash, int64_t unsigned_before,
                         const std::string& signature_hex) const {
  return verifies_statement(signing_message(certificate_hash, key_id_, unsigned_before), signature_hex);
}

bool PublicKey::verifies_statement(const std::string& message, const std::string& signature_hex) const {
  if (signature_hex.size() != kSignatureHexDigits ||
      signature_hex.find_first_not_of("0123456789abcdef") != std::string::npos) {
    return false;
  }
  try {
    const std::vector<uint8_t> signature = Botan::hex_decode(signature_hex);
    Botan::Ed25519_PublicKey key(raw_);
    Botan::PK_Verifier verifier(key, "Pure");
    return verifier.verify_message(reinterpret_cast<const uint8_t*>(message.data()), message.size(),
                                   signature.data(), signature.size());
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace effectfence
