// The fence_* MCP tools: JSON arguments to the Fence API and its outcomes
// back to structured tool results a model can act on.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "effectfence/fence.h"
#include "mcp/decision_metrics.h"
#include "mcp/json_text.h"
#include "mcp/log.h"
#include "mcp/server.h"
#include "mcp/session_admissions.h"

namespace effectfence::mcp {

// Which call a refusal answers; the advice differs (a stale read-set before
// the effect means "decide again", after it means "tell an operator").
enum class FenceStep { prepare, commit, abort, heartbeat, read };

// fence_prepare, fence_commit, fence_abort, fence_heartbeat, fence_status,
// fence_stats over fence. fence and log must outlive the tools. With
// admissions, the tools keep there the tickets this client holds; with
// metrics, they count and time there what they decide.
std::vector<Tool> fence_tools(Fence& fence, Logger& log, std::shared_ptr<SessionAdmissions> admissions = nullptr,
                              std::shared_ptr<DecisionMetrics> metrics = nullptr);

// {status:"refused", reason, message, explanation?, detail?}: message says
// what to do next (refusal_advice), explanation is the fence's own account,
// detail its facts, e.g. {domain, expected, actual}.
Json refusal_json(const Refusal& refusal, FenceStep step);
// What a model should do about a refusal at step, e.g. "another attempt of
// this intent is in flight; do not run the tool; retry fence_prepare in a
// few seconds".
std::string refusal_advice(Reason reason, FenceStep step);

// A ticket and a certificate written into text, byte for byte as
// jsonrpc::serialize writes their to_json().
void write_ticket(JsonText& out, const Ticket& ticket);
void write_certificate(JsonText& out, const Certificate& cert);

// Guidance for hosts to show the model (initialize's "instructions").
extern const char* const kFenceInstructions;

}  // namespace effectfence::mcp
