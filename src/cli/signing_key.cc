#include "cli/signing_key.h"

#include <cstdlib>
#include <variant>

#include "core/signing.h"

namespace effectfence::cli {

std::string signing_key_path(const std::optional<std::string>& option_value) {
  if (option_value) return *option_value;
  const char* env = std::getenv(kSigningKeyEnv);
  return env ? env : "";
}

Status load_signing_key(const std::string& path, Settings* settings) {
  if (path.empty()) return Status::Ok();
  auto loaded = Signer::from_file(path);
  if (!loaded.ok()) return Status::Error(loaded.status().message() + kKeygenHint);
  settings->signer = *loaded;
  return Status::Ok();
}

std::string signing_note(const Settings& settings) {
  return settings.signer ? ", certificates signed with key " + settings.signer->key_id() : "";
}

}  // namespace effectfence::cli
