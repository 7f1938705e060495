// The fence_* MCP tools: JSON arguments to the Fence API and its outcomes
// back to structured tool results a model can act on.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "effectfence/fence.h"
#include "effectfence/refusal_text.h"
#include "mcp/decision_metrics.h"
#include "mcp/json_text.h"
#include "mcp/log.h"
#include "mcp/server.h"
#include "mcp/session_admissions.h"

namespace effectfence::mcp {

// fence_prepare, fence_commit, fence_abort, fence_heartbeat, fence_status,
// fence_stats over fence. fence and log must outlive the tools. With
// admissions, the tools keep there the tickets this client holds; with
// metrics, they count and time there what they decide.
std::vector<Tool> fence_tools(Fence& fence, Logger& log, std::shared_ptr<SessionAdmissions> admissions = nullptr,
                              std::shared_ptr<DecisionMetrics> metrics = nullptr);

// {status:"refused", reason, message, explanation, detail?}: message says
// what to do next (advise), explanation is the fence's own account
// (explain), detail its facts, e.g. {domain, expected, actual}.
Json refusal_json(const Refusal& refusal, Step step);

// A ticket and a certificate written into text, byte for byte as
// jsonrpc::serialize writes their to_json().
void write_ticket(JsonText& out, const Ticket& ticket);
void write_certificate(JsonText& out, const Certificate& cert);

// Guidance for hosts to show the model (initialize's "instructions").
extern const char* const kFenceInstructions;

}  // namespace effectfence::mcp
