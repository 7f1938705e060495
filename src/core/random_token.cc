#include "core/random_token.h"

#include <exception>

#include <botan/hex.h>
#include <botan/system_rng.h>

namespace effectfence {

std::string random_token_hex(size_t bytes) {
  try {
    Botan::System_RNG rng;
    return Botan::hex_encode(rng.random_vec(bytes), false);
  } catch (const std::exception&) {
    return "";
  }
}

}  // namespace effectfence
