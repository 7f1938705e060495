// SHA-256 digests in the form certificates and fingerprints store them.
#pragma once

#include <string>
#include <string_view>

namespace effectfence {

// Lower-case hex SHA-256 of bytes (64 characters).
std::string sha256_hex(std::string_view bytes);

}  // namespace effectfence
