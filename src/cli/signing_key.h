// The signing key of the commands that issue certificates (serve, wrap,
// serve --shared): --signing-key FILE, else $EFFECTFENCE_SIGNING_KEY, else
// none (certificates recorded unsigned, as before signing existed).
#pragma once

#include <optional>
#include <string>

#include "core/status.h"
#include "effectfence/fence.h"

namespace effectfence::cli {

constexpr const char* kSigningKeyEnv = "EFFECTFENCE_SIGNING_KEY";
// Added to an error about a key file: the way to make a good one, which
// only the CLI can name.
constexpr const char* kKeygenHint = " (effectfence keygen writes an Ed25519 key pair)";

// The key file to sign with: option_value if given, else the environment's
// ("" for none).
std::string signing_key_path(const std::optional<std::string>& option_value);

// Reads the key at path into settings->signer (nothing for path ""). Returns
// ok or an error naming the file and what to do; never the key's bytes.
Status load_signing_key(const std::string& path, Settings* settings);

// For the startup log line: ", certificates signed with key ID" or "".
std::string signing_note(const Settings& settings);

}  // namespace effectfence::cli
