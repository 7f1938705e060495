#include "core/sha256.h"

#include <memory>

#include <botan/hash.h>
#include <botan/hex.h>

namespace effectfence {

std::string sha256_hex(std::string_view bytes) {
  // SHA-256 is part of every Botan 2 build, so the lookup cannot fail on a
  // working installation. One per thread, looked up once: final() leaves it
  // ready for the next message.
  thread_local const std::unique_ptr<Botan::HashFunction> hash = Botan::HashFunction::create_or_throw("SHA-256");
  hash->update(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  return Botan::hex_encode(hash->final(), false);
}

}  // namespace effectfence
