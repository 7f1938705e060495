// What Fence keeps off its public face: the duties of a process that serves
// decisions, which Maintenance (effectfence/maintenance.h) carries out on its
// thread and at stop, and which the proxy and tests reach directly. Not part
// of the library's interface.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "effectfence/fence.h"

namespace effectfence {

class FenceInternal {
 public:
  // From now on a prepare that would admit is refused (ledger_error, nothing
  // recorded); replays and other refusals go on. For a process on its way
  // out: whatever it admitted now, nobody could commit through it, and it
  // would have to fence it for an operator.
  static void stop_admitting(Fence& fence);
  // Drops finished intents older than the ledger's result TTL (certificates
  // stay). Returns how many, or -1 on a ledger error.
  static int64_t sweep(Fence& fence);
  // Forgets a domain row that no intent refers to. Returns true iff removed.
  static bool evict_domain(Fence& fence, const std::string& domain);
  // Moves in-flight intents whose holder process on this host is gone to
  // unknown. Returns how many.
  static int64_t reap_dead_holders(Fence& fence);
  // A prepare refused because the ledger connection was lost while its
  // decision was committing (PostgreSQL) may have been admitted all the
  // same, with nobody holding the ticket. Takes each such admission back
  // (aborted and cleared, audited) once the ledger answers, so the next
  // prepare is fresh instead of refused in_flight until this process exits
  // and then fenced unknown. Returns how many; those the ledger could not
  // be asked about are tried again on the next call.
  static int64_t take_back_unanswered(Fence& fence);
  // Takes back the unanswered admissions, then moves every intent this
  // process admitted and has not seen resolved to unknown: nobody is left
  // to commit through it (a stopping process, a wrapped server that died).
  // Returns how many. Intents the ledger would not let it fence (locked
  // past the busy timeout, failing) stay held, so a later call tries them
  // again, and are listed in left_in_flight if given.
  static int64_t fence_own_in_flight(Fence& fence, const std::string& why,
                                     std::vector<std::string>* left_in_flight = nullptr);
};

}  // namespace effectfence
