#pragma once
namespace effectfence::cli {
constexpr const char* kVersion = "0.1.0";  // CMakeLists.txt's project VERSION must match (checked there)
// The git commit this binary was built from, "-dirty" if tracked files had
// changed, "unknown" when built outside a git checkout. Generated at build
// time by cmake/build_commit.cmake.
extern const char* const kBuildCommit;
}
