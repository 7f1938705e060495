#include "core/heap_usage.h"

#include <malloc.h>

// GCC says which sanitizer with __SANITIZE_*__, clang with __has_feature.
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EFFECTFENCE_ALLOCATOR "asan"
#elif __has_feature(thread_sanitizer)
#define EFFECTFENCE_ALLOCATOR "tsan"
#endif
#endif
#if !defined(EFFECTFENCE_ALLOCATOR) && defined(__SANITIZE_ADDRESS__)
#define EFFECTFENCE_ALLOCATOR "asan"
#endif
#if !defined(EFFECTFENCE_ALLOCATOR) && defined(__SANITIZE_THREAD__)
#define EFFECTFENCE_ALLOCATOR "tsan"
#endif

#ifdef EFFECTFENCE_ALLOCATOR
extern "C" size_t __sanitizer_get_current_allocated_bytes();
#endif

namespace effectfence {

HeapUsage heap_usage() {
#ifdef EFFECTFENCE_ALLOCATOR
  return {__sanitizer_get_current_allocated_bytes(), EFFECTFENCE_ALLOCATOR};
#else
  const struct mallinfo2 info = mallinfo2();  // glibc 2.33+
  return {info.uordblks + info.hblkhd, "glibc"};
#endif
}

}  // namespace effectfence
