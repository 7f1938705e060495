// How many bytes the process's allocator has handed out and not had back:
// the number a leak or an unbounded cache grows. Under a sanitizer, RSS
// also holds the sanitizer's own bookkeeping (shadow memory, allocation
// stacks), which grows with the variety of work done; this does not.
#pragma once

#include <cstddef>

namespace effectfence {

struct HeapUsage {
  size_t bytes_in_use = 0;
  const char* allocator = "";  // "glibc", "asan", "tsan"
};

HeapUsage heap_usage();

}  // namespace effectfence
