// Words of names and descriptions: camelCase, snake_case, kebab-case and
// prose all split into lower-case words, and the two vocabularies the scan
// weighs (effect words, read words).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace effectfence::scan {

// "deriveIdempotencyKey" -> derive idempotency key; "request_id" -> request
// id; "HTTPClient" -> http client; "Reads a file." -> reads a file.
std::vector<std::string> split_words(std::string_view text);

// The distinct words of text that say a tool changes something outside
// itself (create, send, charge, delete, ...), in order of appearance.
std::vector<std::string> effect_words(std::string_view text);

// The distinct words of text that say a tool only looks (read, get, list, ...).
std::vector<std::string> read_words(std::string_view text);

// The word that says what a tool mainly does: the first word of its name
// found in either vocabulary, else the first such word of its description;
// "" when there is none. "list_transfers" leads with "list", not "transfers".
std::string leading_word(std::string_view name, std::string_view description);

// True iff word is one of the read words.
bool is_read_word(const std::string& word);

// True iff the identifier names an idempotency guard: its words hold
// idempotency/idempotent/idempotence, dedupe/dedup/deduplicate, or
// "request id" (requestId, request_id, clientRequestId); not MCP's
// idempotentHint, which declares rather than guards.
bool names_guard(std::string_view identifier);

// True iff the identifier's words hold retry/retries/attempt(s)/backoff/tries.
bool names_retry(std::string_view identifier);

}  // namespace effectfence::scan
