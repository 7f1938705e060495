// Repository-wide evidence, read off masked code (lexer.h): where writes
// happen, which idempotency guards the code names, and which retries wrap a
// write. Context for a person to weigh, never a claim about one tool.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "scan/source_tree.h"

namespace effectfence::scan {

// One place that changes something outside the process.
struct WriteSite {
  size_t file_index = 0;
  size_t offset = 0;
  int line = 0;
  std::string kind;  // "http POST", "sdk create", "file write", "sql insert", ...
  std::string code;  // what matched, e.g. "axios.post(" or "method: \"POST\""
};

// One idempotency guard named in code (an identifier, or a header name
// given as a whole string literal such as "Idempotency-Key").
struct Guard {
  size_t file_index = 0;
  size_t offset = 0;
  int line = 0;
  std::string name;
};

// A retry (a loop about attempts, or a retry helper) whose extent holds a write.
struct RetryAroundWrite {
  size_t file_index = 0;
  int line = 0;          // of the loop or the helper call
  std::string how;       // "loop" or "retry helper"
  WriteSite write;       // the first write inside it
  bool guarded = false;  // a guard is named inside the retry too
};

struct Evidence {
  std::vector<WriteSite> writes;
  std::vector<Guard> guards;
  std::vector<RetryAroundWrite> retries;
};

std::vector<WriteSite> find_writes(const SourceFile& file, size_t file_index);
std::vector<Guard> find_guards(const SourceFile& file, size_t file_index);
std::vector<RetryAroundWrite> find_retries_around_writes(const SourceFile& file, size_t file_index,
                                                         const std::vector<WriteSite>& writes_in_file,
                                                         const std::vector<Guard>& guards_in_file);

// All three over the tree, in file order.
Evidence collect_evidence(const SourceTree& tree);

}  // namespace effectfence::scan
