// Unguessable tokens: a fence token is a capability, so it comes from the
// operating system's CSPRNG, never from a seeded PRNG.
#pragma once

#include <cstddef>
#include <string>

namespace effectfence {

// Lower-case hex of `bytes` random bytes (2 * bytes characters).
// Returns "" when the system RNG is unavailable (or bytes is 0); a caller
// must then refuse to issue a token rather than fall back to something
// guessable.
std::string random_token_hex(size_t bytes = 16);

}  // namespace effectfence
