// effectfence keygen: a new Ed25519 key pair for signing certificates.
//
// The private key goes to --out (PKCS#8 PEM, mode 0600, created exclusively:
// an existing key is never overwritten, since the certificates it signed
// would then verify against nothing); the public key beside it (FILE.pub,
// X.509 PEM), which is also printed with its key id.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "cli/options.h"
#include "cli/output.h"
#include "cli/subcommand.h"
#include "cli/commands.h"
#include "core/signing.h"

namespace effectfence::cli {
namespace {

constexpr const char* kCommand = "keygen";

void print_usage(std::FILE* out) {
  std::fprintf(out,
               "usage: effectfence keygen --out FILE [--json]\n\n"
               "Writes a new Ed25519 key pair for signing certificates: the private key to FILE\n"
               "(PKCS#8 PEM, mode 0600) and the public key to FILE.pub (X.509 PEM), and prints\n"
               "the key id (the first 16 hex digits of SHA-256 over the raw public key) and the\n"
               "public key. Neither file is ever overwritten.\n\n"
               "Give FILE to the processes that issue certificates (serve, wrap, serve --shared:\n"
               "--signing-key FILE or EFFECTFENCE_SIGNING_KEY=FILE) and FILE.pub to whoever checks\n"
               "them (verify --public-key FILE.pub). Keep FILE away from the ledger and its\n"
               "backups: whoever holds it can sign a rewritten certificate.\n\n"
               "options:\n"
               "  --out FILE  where to write the private key (FILE.pub gets the public key)\n"
               "  --json      one JSON object: {key_id, private_key_file, public_key_file, public_key}\n"
               "  --help      this text\n\n"
               "exit status: 0 written, 2 nothing written (a file exists, or cannot be created)\n");
}

// Creates path (never an existing file or link) with mode, writes text and
// syncs it. Returns "" or what failed.
std::string write_new_file(const std::string& path, const std::string& text, mode_t mode) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) {
    return errno == EEXIST ? path + " already exists; refusing to overwrite it (choose another --out, or "
                                    "remove the old key only once nothing needs to verify with it)"
                           : "cannot create " + path + ": " + std::strerror(errno);
  }
  std::string error;
  // The umask may have taken bits away, never added them; set exactly mode.
  if (::fchmod(fd, mode) != 0) error = "cannot set the mode of " + path + ": " + std::strerror(errno);
  size_t written = 0;
  while (error.empty() && written < text.size()) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) error = "writing " + path + ": " + std::strerror(errno);
    if (n > 0) written += static_cast<size_t>(n);
  }
  if (error.empty() && ::fsync(fd) != 0) error = "syncing " + path + ": " + std::strerror(errno);
  if (::close(fd) != 0 && error.empty()) error = "closing " + path + ": " + std::strerror(errno);
  if (!error.empty()) ::unlink(path.c_str());
  return error;
}

// The directory holding path, synced so both new names survive a crash.
void sync_directory_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

int keygen(const ParsedArgs& parsed) {
  std::string error;
  const auto out = parsed.value("out");
  if (!out) {
    print_error(kCommand, "reading options", "--out FILE is required: where to write the private key");
    return kExitFailure;
  }
  const std::string private_file = *out;
  const std::string public_file = private_file + ".pub";
  // Both names are checked first: a key whose .pub cannot be written
  // would be created only to be removed again.
  struct stat st {};
  for (const std::string& file : {private_file, public_file}) {
    if (::lstat(file.c_str(), &st) == 0) {
      print_error(kCommand, "checking the output",
                  file + " already exists; refusing to overwrite it (choose another --out, or remove the old key "
                         "only once nothing needs to verify with it)");
      return kExitFailure;
    }
  }
  std::shared_ptr<const Signer> key;
  try {
    key = Signer::generate();
  } catch (const std::exception& e) {
    print_error(kCommand, "generating the key", std::string("the system's random number generator failed: ") + e.what());
    return kExitFailure;
  }
  std::string private_pem = key->private_key_pem();
  error = write_new_file(private_file, private_pem, 0600);
  std::fill(private_pem.begin(), private_pem.end(), '\0');
  if (!error.empty()) {
    print_error(kCommand, "writing the private key", error);
    return kExitFailure;
  }
  const std::string public_pem = key->public_key_pem();
  error = write_new_file(public_file, public_pem, 0644);
  if (!error.empty()) {
    ::unlink(private_file.c_str());  // ours, created above: no half key pair is left
    print_error(kCommand, "writing the public key", error);
    return kExitFailure;
  }
  sync_directory_of(private_file);
  if (parsed.has("json")) {
    print_json_line({{"key_id", key->key_id()},
                     {"private_key_file", private_file},
                     {"public_key_file", public_file},
                     {"public_key", public_pem}});
  } else {
    std::printf("key id %s\nprivate key: %s (mode 0600)\npublic key:  %s\n%s", key->key_id().c_str(),
                terminal_safe(private_file).c_str(), terminal_safe(public_file).c_str(), public_pem.c_str());
  }
  return kExitOk;
}

}  // namespace

int run_keygen(const Args& args) {
  return run_command({kCommand, {{"out", true}, {"json", false}}, print_usage}, args, keygen);
}

}  // namespace effectfence::cli
