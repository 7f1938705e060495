// Certificates sealed before the commit reaches the ledger's writer.
//
// A certificate covers only what its admission recorded (the intent row's
// args, parent, read-set, clock, agent, seq, generation), the result, and
// the clock of its parent certificate. This process knows the first from
// the admissions it made and the last from the certificates it has seen,
// so a commit can be sealed (canonical JSON and SHA-256, the costliest part
// of deciding it) on the caller's thread. The writer, the one thread every
// decision waits for, then only checks that the row it holds is the one the
// certificate was sealed from (rules::commit), and seals it itself if not.
#pragma once

#include <optional>
#include <string>
#include <unordered_map>

#include "core/mutex.h"
#include "effectfence/ledger.h"
#include "fence/rules.h"

namespace effectfence {

class SealedAhead {
 public:
  // An admission this process made: its row as the ledger recorded it.
  void admitted(const IntentRow& row);
  // A certificate this process committed or replayed: its clock is what a
  // commit building on it merges.
  void certified(const Certificate& cert);
  // Forgets the admission ticket holds (it was aborted, or lost).
  void forget(const Ticket& ticket);

  // The certificate for committing ticket with result, sealed here, or
  // nullopt when this process did not make that admission, or does not know
  // its parent's clock. Takes the admission: a retried commit seals anew.
  std::optional<rules::Sealed> seal(const Ticket& ticket, const Json& result);

 private:
  // Bounds memory: a forgotten entry only means sealing on the writer.
  static constexpr size_t kMaxEntries = 4096;

  Mutex mu_;
  std::unordered_map<std::string, IntentRow> admissions_ GUARDED_BY(mu_);  // by token
  std::unordered_map<std::string, VectorClock> clocks_ GUARDED_BY(mu_);    // by certificate hash
};

}  // namespace effectfence
