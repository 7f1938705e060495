#include "scan/source_tree.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

namespace effectfence::scan {
namespace fs = std::filesystem;
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::optional<std::string> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void add_file(const fs::path& path, const std::string& relative, SourceTree* tree) {
  const auto language = language_of_path(relative);
  if (!language) return;
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec || size > kMaxSourceFileBytes) return;
  auto text = read_file(path);
  if (!text) return;
  SourceFile file{relative, *language, std::move(*text), {}};
  file.masked = mask_source(file.text, file.language);
  tree->files.push_back(std::move(file));
}

}  // namespace

bool is_skipped_directory(const std::string& name) {
  static const std::set<std::string> kSkipped = {
      "node_modules", "dist", "build", "out", "target", "vendor", "coverage", "__pycache__", "venv", "env",
      "site-packages", "test", "tests", "__tests__", "spec", "specs", "testdata", "fixtures", "e2e", "example",
      "examples", "bench", "benches", "docs"};
  return kSkipped.count(name) > 0 || (!name.empty() && name[0] == '.');
}

bool is_skipped_file(const std::string& name) {
  for (const char* suffix : {".test.ts", ".test.js", ".test.mjs", ".test.tsx", ".spec.ts", ".spec.js", ".d.ts",
                             ".min.js", "_test.go", "_test.py", "_tests.rs"}) {
    if (ends_with(name, suffix)) return true;
  }
  return name.rfind("test_", 0) == 0 && ends_with(name, ".py");
}

StatusOr<SourceTree> read_source_tree(const std::string& root) {
  std::error_code ec;
  const fs::path base(root);
  const auto status = fs::status(base, ec);
  if (ec || !fs::exists(status)) {
    return Status::Error("no such file or directory: " + root);
  }
  SourceTree tree;
  tree.root = root;
  if (fs::is_regular_file(status)) {
    add_file(base, base.filename().string(), &tree);
    return tree;
  }
  if (!fs::is_directory(status)) {
    return Status::Error(root + " is neither a directory nor a regular file");
  }
  fs::recursive_directory_iterator it(base, fs::directory_options::skip_permission_denied, ec);
  if (ec) {
    return Status::Error("cannot read " + root + ": " + ec.message());
  }
  for (const fs::recursive_directory_iterator end; it != end; it.increment(ec)) {
    if (ec) {
      return Status::Error("cannot read " + root + ": " + ec.message());
    }
    const std::string name = it->path().filename().string();
    const std::string relative = it->path().lexically_relative(base).generic_string();
    std::error_code type_ec;
    if (it->is_symlink(type_ec)) {
      if (it->is_directory(type_ec)) it.disable_recursion_pending();  // no loops, no trees outside root
      continue;
    }
    if (it->is_directory(type_ec)) {
      if (is_skipped_directory(name)) {
        tree.skipped_dirs.push_back(relative);
        it.disable_recursion_pending();
      }
      continue;
    }
    if (it->is_regular_file(type_ec) && !is_skipped_file(name)) add_file(it->path(), relative, &tree);
  }
  std::sort(tree.files.begin(), tree.files.end(),
            [](const SourceFile& a, const SourceFile& b) { return a.path < b.path; });
  std::sort(tree.skipped_dirs.begin(), tree.skipped_dirs.end());
  return tree;
}

}  // namespace effectfence::scan
