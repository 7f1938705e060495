// Clang's thread-safety attributes, spelled as macros so that GCC (which has
// no such analysis) compiles the same code with every one of them empty.
//
// With clang++ -Wthread-safety the compiler proves, per function, that a
// member declared GUARDED_BY(mu) is touched only while mu is held, that a
// function declared REQUIRES(mu) is only called with mu held, and that locks
// are taken in their declared order. tools/test-thread-safety runs that build.
#pragma once

#if defined(__clang__)
#define EFFECTFENCE_THREAD_ATTRIBUTE(x) __attribute__((x))
#else
#define EFFECTFENCE_THREAD_ATTRIBUTE(x)
#endif

// On a class: objects of it are locks ("capabilities") the analysis tracks.
#define CAPABILITY(name) EFFECTFENCE_THREAD_ATTRIBUTE(capability(name))
// On a class: an RAII object that holds a lock for its lifetime.
#define SCOPED_CAPABILITY EFFECTFENCE_THREAD_ATTRIBUTE(scoped_lockable)

// On a data member: read or written only while the lock is held.
#define GUARDED_BY(x) EFFECTFENCE_THREAD_ATTRIBUTE(guarded_by(x))
// On a pointer member: what it points to is touched only under the lock.
#define PT_GUARDED_BY(x) EFFECTFENCE_THREAD_ATTRIBUTE(pt_guarded_by(x))

// On a lock member: the lock orders. A lock declared ACQUIRED_AFTER(a) is
// never taken before a while a is held; ACQUIRED_BEFORE is the mirror.
#define ACQUIRED_AFTER(...) EFFECTFENCE_THREAD_ATTRIBUTE(acquired_after(__VA_ARGS__))
#define ACQUIRED_BEFORE(...) EFFECTFENCE_THREAD_ATTRIBUTE(acquired_before(__VA_ARGS__))

// On a function: the caller holds the lock(s) on entry and on return.
#define REQUIRES(...) EFFECTFENCE_THREAD_ATTRIBUTE(requires_capability(__VA_ARGS__))
// On a function: the caller does not hold the lock(s); the function takes them.
#define EXCLUDES(...) EFFECTFENCE_THREAD_ATTRIBUTE(locks_excluded(__VA_ARGS__))
// On a function: takes the lock(s) and returns holding them.
#define ACQUIRE(...) EFFECTFENCE_THREAD_ATTRIBUTE(acquire_capability(__VA_ARGS__))
// On a function: releases the lock(s) it was called holding.
#define RELEASE(...) EFFECTFENCE_THREAD_ATTRIBUTE(release_capability(__VA_ARGS__))
// On a function: tries to take the lock; holds it when it returns the value.
#define TRY_ACQUIRE(...) EFFECTFENCE_THREAD_ATTRIBUTE(try_acquire_capability(__VA_ARGS__))
// On a function: checks at run time that the lock is held; the analysis
// trusts it from there on.
#define ASSERT_CAPABILITY(x) EFFECTFENCE_THREAD_ATTRIBUTE(assert_capability(x))
// On a function: returns the given lock (lets an accessor name a member lock).
#define RETURN_CAPABILITY(x) EFFECTFENCE_THREAD_ATTRIBUTE(lock_returned(x))

// On a function: not analysed. Each use says in a comment why the analysis
// cannot follow the function (it is kept for lock plumbing, never to silence
// a finding).
#define NO_THREAD_SAFETY_ANALYSIS EFFECTFENCE_THREAD_ATTRIBUTE(no_thread_safety_analysis)
