// Status and StatusOr<T>: the result of a call below the edges that can
// fail for a reason a person must read (a lease file, a child process, a
// ledger opened read-only, an option). The call returns the message it
// would have printed, naming what failed and what to do; the edge (the CLI,
// the proxy's log) prints it. Decisions are Refusals, ledger failures
// {step, error}, opening a ledger OpenError; everything else is a Status.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>

namespace effectfence {

class [[nodiscard]] Status {
 public:
  static Status Ok() { return Status(); }
  // An error is an error whatever its message: one built from an
  // exception's empty what() still fails closed, and says so.
  static Status Error(std::string message) { return Status(std::move(message), false); }
  // An error whose cause is that the thing named is not there at all (a
  // caller may then say what is there instead).
  static Status NotFound(std::string message) { return Status(std::move(message), true); }

  bool ok() const { return ok_; }
  bool is_not_found() const { return not_found_; }
  // "" when ok.
  const std::string& message() const { return message_; }

 private:
  Status() = default;
  Status(std::string message, bool not_found)
      : ok_(false), message_(message.empty() ? kNoReason : std::move(message)), not_found_(not_found) {}

  static constexpr const char* kNoReason = "failed, and no reason was given";
  bool ok_ = true;
  std::string message_;  // "" exactly when ok
  bool not_found_ = false;
};

// A value, or the Status saying why there is none.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  // Implicit on purpose, as Status's: `return value;` and `return status;`.
  // T&& (not T): a local returned by name is moved, not copied.
  StatusOr(const T& value) : value_(value) {}  // NOLINT
  StatusOr(T&& value) : value_(std::move(value)) {}  // NOLINT
  // REQUIRES: !status.ok() (an ok StatusOr carries a value).
  StatusOr(Status status) : status_(std::move(status)) { assert(!status_.ok()); }  // NOLINT

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }

  // REQUIRES: ok().
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }
  T&& operator*() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }

 private:
  Status status_ = Status::Ok();
  std::optional<T> value_;
};

}  // namespace effectfence
