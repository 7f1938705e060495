// What every harness shares: how an oracle reports a broken promise, and the
// planted bug that shows it would (tools/fuzz --self-test).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

namespace effectfence::fuzz {

// Prints what broke and aborts: libFuzzer saves the input as a crash.
[[noreturn]] inline void oracle_failed(const std::string& what) {
  std::fprintf(stderr, "\nORACLE FAILURE: %s\n", what.c_str());
  std::abort();
}

inline void require(bool holds, const std::string& what) {
  if (!holds) oracle_failed(what);
}

// The same for a fixed message: no string is built unless it fails (a
// literal longer than std::string's inline buffer would be allocated on
// every check, which in a per-byte loop costs more than the code checked).
inline void require(bool holds, const char* what) {
  if (!holds) oracle_failed(what);
}

// True when EFFECTFENCE_FUZZ_PLANT is set: each harness then spoils what
// it checks in one way its oracle must catch on the seed corpus.
inline bool planted() {
  static const bool on = std::getenv("EFFECTFENCE_FUZZ_PLANT") != nullptr;
  return on;
}

}  // namespace effectfence::fuzz
