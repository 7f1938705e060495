// The files a source scan reads: server code in the languages the scan
// knows, without dependencies, build output, tests and examples.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "scan/lexer.h"

namespace effectfence::scan {

struct SourceFile {
  std::string path;  // relative to the scanned root, with '/'
  Language language;
  std::string text;
  MaskedSource masked;
};

struct SourceTree {
  std::string root;
  std::vector<SourceFile> files;          // sorted by path
  std::vector<std::string> skipped_dirs;  // relative paths of directories left out, sorted
};

// Files larger than this are generated or bundled code, not a server's own.
constexpr size_t kMaxSourceFileBytes = 2 * 1024 * 1024;

// True iff a directory of this name is left out (node_modules, dist, build,
// target, vendor, tests, examples, hidden directories, ...).
bool is_skipped_directory(const std::string& name);

// True iff a file of this name is a test or a declaration file (x.test.ts,
// x_test.go, test_x.py, x.d.ts, x.min.js, ...).
bool is_skipped_file(const std::string& name);

// Reads the tree under root (a directory, or one file). Returns the error
// when root does not exist or cannot be read.
StatusOr<SourceTree> read_source_tree(const std::string& root);

}  // namespace effectfence::scan
