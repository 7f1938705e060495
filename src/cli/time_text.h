// Times as operators read and write them: ISO-8601 UTC and ages ("7d").
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/status.h"

namespace effectfence::cli {

// Milliseconds since the Unix epoch, now.
int64_t now_ms();

// ISO-8601 UTC with milliseconds: "2026-11-29T10:00:00.123Z".
std::string format_utc(int64_t ms);

// Parses a --since value into ms since the epoch: an ISO-8601 UTC time
// ("2026-11-29T10:00:00Z", "2026-11-29T10:00:00.5Z", "2026-11-29") or a
// relative age before now_ms ("90s", "30m", "1h", "7d").
// Returns the error iff text is neither.
StatusOr<int64_t> parse_since(const std::string& text, int64_t now_ms);

}  // namespace effectfence::cli
