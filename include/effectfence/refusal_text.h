// The words for a refusal, written once. A Refusal carries a reason, a
// cause and facts; what a model or a person reads is rendered here, by the
// edge that talks to them (the MCP tools, wrap, the shared server, the CLI,
// a library user's own log), from one table keyed by cause and step.
#pragma once

#include <string>

#include "effectfence/types.h"

namespace effectfence {

// Which call a refusal answers. The words differ: a stale read-set before
// the effect means "decide again", after it "tell an operator".
enum class Step { prepare, commit, abort, heartbeat, clear, read };

// The fence's own account of what happened, e.g. "domain 'cluster:a' has
// moved since you read it (you decided at seq 3, it is now at 4). ...".
std::string explain(const Refusal& refusal, Step step);

// What to do about a refusal of this reason at step, e.g. "another attempt
// of this intent is in flight; do not run the tool; retry fence_prepare in a
// few seconds".
std::string advise(Reason reason, Step step);

}  // namespace effectfence
