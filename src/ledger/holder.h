// Who holds an intent, and whether that process is still alive.
#pragma once

#include "effectfence/ledger.h"

namespace effectfence {

// The calling process: host (its name, plus "/pidns:<inode>" outside the
// initial PID namespace), kernel boot id, pid, start time.
const Holder& this_process();

// Returns true iff holder is known to be gone: it ran on this host and
// either the machine rebooted since, or its pid is free, a zombie, or now
// belongs to a process that started at another time. A holder on another
// host is never judged dead here; its lease decides.
bool holder_is_dead(const Holder& holder);

// Returns true iff holder is known to be running: on this host, since this
// boot, its pid alive (not a zombie) and started when the holder says. False
// when it is gone or when it cannot be told (another host, /proc hidden).
bool holder_is_alive_here(const Holder& holder);

}  // namespace effectfence
