#include "shared_server/lease.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <thread>

#include "core/random_token.h"
#include "effectfence/json.h"
#include "ledger/holder.h"
#include "ledger/ledger_files.h"
#include "ledger/open_ledger.h"
#include "ledger/pg_connection.h"

namespace effectfence::shared {
namespace {

constexpr const char* kFormat = "effectfence-shared-server/1";
constexpr uint64_t kMaxPid = static_cast<uint64_t>(std::numeric_limits<pid_t>::max());

std::string errno_text(int err) { return std::strerror(err); }

// Reads a lease file (nullopt: there is none), which must be a regular file
// of this user's that no one else may write: a lease planted by another user
// would send every call to a server of theirs, and a fifo would block the
// reader for good.
StatusOr<std::optional<std::string>> read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) return std::optional<std::string>();
    return Status::Error(errno_text(errno));
  }
  if (Status trusted = why_untrusted(fd); !trusted.ok()) {
    ::close(fd);
    return trusted;
  }
  std::string text;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string error = errno_text(errno);
      ::close(fd);
      return Status::Error(error);
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > 64 * 1024) break;  // no lease is this large: it is corrupt, whatever follows
  }
  ::close(fd);
  return std::optional<std::string>(std::move(text));
}

bool write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

Status why_untrusted(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Status::Error(errno_text(errno));
  if (!S_ISREG(st.st_mode)) return Status::Error("not a regular file");
  if (st.st_uid != ::geteuid()) {
    return Status::Error("owned by uid " + std::to_string(st.st_uid) + ", not this user (" +
                         std::to_string(::geteuid()) + "): not trusted");
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) return Status::Error("writable by other users: not trusted");
  return Status::Ok();
}

int64_t wall_clock_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string default_lease_path(const std::string& ledger_path) { return ledger_path + ".server.json"; }

namespace {

bool is_file_path(const std::string& ledger_path) {
  return ledger_path != "memory" && !is_postgres_ledger(ledger_path);
}

// A pid kill() can be asked about as it is: 4294967297 would probe pid 1
// (init, always there) and a corrupt lease would read as live.
bool is_process_id(const Json& pid) {
  if (pid.is_number_unsigned()) return pid.get<uint64_t>() > 0 && pid.get<uint64_t>() <= kMaxPid;
  return pid.get<int64_t>() > 0 && pid.get<int64_t>() <= static_cast<int64_t>(kMaxPid);
}

}  // namespace

bool names_ledger_relatively(const std::string& leased) {
  return !leased.empty() && leased.front() != '/' && is_file_path(leased);
}

std::string absolute_ledger_path(const std::string& ledger_path) {
  if (!is_file_path(ledger_path)) return printable_ledger(ledger_path);  // a lease file is no place for a password
  const std::string resolved = resolved_path(ledger_path);
  return resolved.empty() ? ledger_path : resolved;
}

bool same_ledger(const std::string& leased, const std::string& mine) {
  if (leased.empty() || mine.empty()) return false;
  if (!is_file_path(leased) || !is_file_path(mine)) {
    // Two strings libpq cannot read print alike and are not one ledger.
    const std::string printed = printable_ledger(mine);
    return printed != pg::kUnparseableConninfo && printed == printable_ledger(leased);
  }
  // A relative path (leases written before they recorded absolute ones) says
  // nothing about which directory it meant: it matches nothing.
  if (names_ledger_relatively(leased) || names_ledger_relatively(mine)) return false;
  if (same_file(leased, mine)) return true;
  return resolved_path(leased) == resolved_path(mine);
}

std::string Lease::to_text() const {
  Json j = {{"format", kFormat},
            {"pid", owner.pid},
            {"started", owner.started},
            {"host", owner.host},
            {"boot", owner.boot},
            {"url", url},
            {"token", token},
            {"created_at_ms", created_at_ms},
            {"ledger", ledger},
            {"lease_ttl_ms", lease_ttl_ms},
            {"result_ttl_ms", result_ttl_ms}};
  return j.dump(2) + "\n";
}

std::optional<Lease> Lease::from_text(const std::string& text) {
  JsonError error;
  const std::optional<Json> j = parse_strict(text, &error);
  if (!j || !j->is_object()) return std::nullopt;
  auto string_at = [&](const char* key) -> const Json* {
    auto it = j->find(key);
    return it != j->end() && it->is_string() ? &*it : nullptr;
  };
  auto integer_at = [&](const char* key) -> const Json* {
    auto it = j->find(key);
    return it != j->end() && it->is_number_integer() ? &*it : nullptr;
  };
  const Json* format = string_at("format");
  const Json* pid = integer_at("pid");
  const Json* started = integer_at("started");
  const Json* host = string_at("host");
  const Json* url = string_at("url");
  const Json* token = string_at("token");
  const Json* created = integer_at("created_at_ms");
  if (!format || format->get<std::string>() != kFormat || !pid || !started || !host || !url || !token ||
      !created || !is_process_id(*pid)) {
    return std::nullopt;
  }
  Lease lease;
  lease.owner.pid = pid->get<int64_t>();
  lease.owner.started = started->get<int64_t>();
  lease.owner.host = host->get<std::string>();
  if (const Json* boot = string_at("boot")) lease.owner.boot = boot->get<std::string>();
  lease.url = url->get<std::string>();
  lease.token = token->get<std::string>();
  lease.created_at_ms = created->get<int64_t>();
  if (const Json* ledger = string_at("ledger")) lease.ledger = ledger->get<std::string>();
  const Json* lease_ttl = integer_at("lease_ttl_ms");
  const Json* result_ttl = integer_at("result_ttl_ms");
  lease.lease_ttl_ms = lease_ttl ? lease_ttl->get<int64_t>() : 0;
  lease.result_ttl_ms = result_ttl ? result_ttl->get<int64_t>() : 0;
  return lease;
}

const char* lease_case_name(LeaseCase c) {
  switch (c) {
    case LeaseCase::missing: return "missing";
    case LeaseCase::live: return "live";
    case LeaseCase::starting: return "starting";
    case LeaseCase::stale: return "stale";
    case LeaseCase::corrupt: return "corrupt";
    case LeaseCase::empty: return "empty";
    case LeaseCase::abandoned: return "abandoned";
    case LeaseCase::unreadable: return "unreadable";
  }
  return "unknown";
}

bool may_take_over(LeaseCase c) {
  return c == LeaseCase::missing || c == LeaseCase::stale || c == LeaseCase::corrupt || c == LeaseCase::empty ||
         c == LeaseCase::abandoned;
}

LeaseReading read_lease(const std::string& path, int64_t now_ms, int64_t bind_deadline_ms) {
  LeaseReading reading;
  const auto text = read_file(path);
  if (!text.ok()) {
    reading.kind = LeaseCase::unreadable;
    reading.detail = "cannot read " + path + ": " + text.status().message();
    return reading;
  }
  if (!*text) {
    reading.kind = LeaseCase::missing;
    reading.detail = "no lease file";
    return reading;
  }
  return classify_lease(**text, now_ms, bind_deadline_ms);
}

LeaseReading classify_lease(const std::string& text, int64_t now_ms, int64_t bind_deadline_ms) {
  LeaseReading reading;
  if (text.empty()) {
    reading.kind = LeaseCase::empty;
    reading.detail = "the file is empty: its writer died before writing it";
    return reading;
  }
  reading.lease = Lease::from_text(text);
  if (!reading.lease) {
    reading.kind = LeaseCase::corrupt;
    reading.detail = "not a lease document (" + std::to_string(text.size()) + " bytes)";
    return reading;
  }
  const Lease& lease = *reading.lease;
  const std::string owner = "pid " + std::to_string(lease.owner.pid);
  if (holder_is_dead(lease.owner)) {
    reading.kind = LeaseCase::stale;
    reading.detail = "its owner, " + owner + ", is gone";
  } else if (!lease.url.empty()) {
    reading.kind = LeaseCase::live;
    reading.detail = owner + " at " + lease.url;
  } else if (now_ms - lease.created_at_ms > bind_deadline_ms) {
    reading.kind = LeaseCase::abandoned;
    reading.detail = owner + " published no URL within " + std::to_string(bind_deadline_ms) + " ms";
  } else {
    reading.kind = LeaseCase::starting;
    reading.detail = owner + " is starting the server";
  }
  return reading;
}

DirectoryLock::DirectoryLock(const std::string& lease_path, std::chrono::steady_clock::time_point deadline) {
  const std::string dir = directory_of(lease_path);
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    error_ = "cannot open the lease directory " + dir + ": " + errno_text(errno);
    return;
  }
  for (;;) {
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
      fd_ = fd;
      return;
    }
    if (errno != EWOULDBLOCK && errno != EINTR) {
      error_ = "cannot lock the lease directory " + dir + ": " + errno_text(errno);
      break;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      error_ = "the lease directory " + dir + " stayed locked by another process";
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ::close(fd);
}

DirectoryLock::~DirectoryLock() {
  if (fd_ >= 0) ::close(fd_);  // closing drops the flock
}

Status write_lease(const std::string& path, const Lease& lease) {
  const std::string temp = path + "." + std::to_string(::getpid()) + "." + random_token_hex(4) + ".tmp";
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return Status::Error("cannot create " + temp + ": " + errno_text(errno));
  const bool written = write_all(fd, lease.to_text()) && ::fsync(fd) == 0;
  const int write_errno = errno;
  ::close(fd);
  if (!written) {
    ::unlink(temp.c_str());
    return Status::Error("cannot write " + temp + ": " + errno_text(write_errno));
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    return Status::Error("cannot replace " + path + ": " + errno_text(err));
  }
  return Status::Ok();
}

bool lease_is_ours(const std::string& path, const std::string& token) {
  const auto text = read_file(path);
  if (!text.ok() || !*text) return false;
  const auto lease = Lease::from_text(**text);
  return lease && !token.empty() && lease->token == token;
}

Status remove_lease_if_ours(const std::string& path, const std::string& token,
                            std::chrono::milliseconds lock_wait) {
  DirectoryLock lock(path, std::chrono::steady_clock::now() + lock_wait);
  if (!lock.ok()) return Status::Error(lock.error());
  if (!lease_is_ours(path, token)) {
    return Status::Error("not ours: another process holds the lease now (or it is gone)");
  }
  if (::unlink(path.c_str()) != 0) return Status::Error("cannot remove " + path + ": " + errno_text(errno));
  return Status::Ok();
}

}  // namespace effectfence::shared
