#include "cli/options.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "effectfence/fence.h"
#include "ledger/ledger_files.h"

namespace effectfence::cli {
namespace {

const OptionSpec* find_spec(const std::vector<OptionSpec>& specs, const std::string& name) {
  for (const auto& spec : specs) {
    if (spec.name == name) return &spec;
  }
  return nullptr;
}

}  // namespace

std::optional<std::string> ParsedArgs::value(const std::string& name) const {
  auto found = values.find(name);
  if (found == values.end()) return std::nullopt;
  return found->second;
}

std::vector<std::string> ParsedArgs::all(const std::string& name) const {
  auto found = repeated.find(name);
  return found == repeated.end() ? std::vector<std::string>{} : found->second;
}

StatusOr<ParsedArgs> parse_args(const Args& args, const std::vector<OptionSpec>& specs) {
  ParsedArgs parsed;
  bool options_ended = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (options_ended || arg.size() < 2 || arg[0] != '-') {
      parsed.positionals.push_back(arg);
      continue;
    }
    if (arg == "--") {
      options_ended = true;
      continue;
    }
    if (arg == "-h" || arg == "--help") {
      parsed.switches.insert("help");
      continue;
    }
    if (arg.rfind("--", 0) != 0) {
      return Status::Error("unknown option '" + arg + "'");
    }
    const size_t equals = arg.find('=');
    const std::string name = arg.substr(2, equals == std::string::npos ? std::string::npos : equals - 2);
    const OptionSpec* spec = find_spec(specs, name);
    if (!spec) {
      return Status::Error("unknown option '--" + name + "'");
    }
    if (!spec->takes_value) {
      if (equals != std::string::npos) {
        return Status::Error("--" + name + " takes no value");
      }
      parsed.switches.insert(name);
      continue;
    }
    std::string value;
    if (equals != std::string::npos) {
      value = arg.substr(equals + 1);
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      return Status::Error("--" + name + " needs a value");
    }
    if (value.empty()) {
      return Status::Error("--" + name + " needs a non-empty value");
    }
    if (spec->repeatable) parsed.repeated[name].push_back(value);
    // Which of two ledgers (or reasons) was meant is not ours to guess.
    if (!parsed.values.emplace(name, value).second && !spec->repeatable) {
      return Status::Error("--" + name + " is given twice");
    }
  }
  return parsed;
}


std::string resolve_ledger_path(const ParsedArgs& parsed, const std::string& command) {
  if (auto db = parsed.value("db")) return *db;
  const char* env = std::getenv("EFFECTFENCE_LEDGER");
  if (env && *env) return env;
  const std::string path = Settings::default_ledger_path("server");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (const std::string others = ledgers_beside(path, path); !others.empty()) {
      std::fprintf(stderr, "effectfence %s: note: reading the default ledger %s%s\n", command.c_str(), path.c_str(),
                   others.c_str());
    }
  }
  return path;
}

std::string ledgers_beside(const std::string& path, const std::string& except) {
  std::error_code ignored;
  std::vector<std::string> found;
  for (const auto& entry : std::filesystem::directory_iterator(directory_of(path), ignored)) {
    const std::string name = entry.path().filename().string();
    if (entry.path().string() == except) continue;
    if (entry.is_regular_file(ignored) && name.size() > 7 && name.compare(name.size() - 7, 7, ".sqlite") == 0) {
      found.push_back(entry.path().string());
    }
  }
  if (found.empty()) return "";
  std::sort(found.begin(), found.end());
  std::string list;
  for (size_t i = 0; i < found.size() && i < 10; ++i) list += (i ? ", " : "") + found[i];
  if (found.size() > 10) list += ", and " + std::to_string(found.size() - 10) + " more";
  // Only the default place is where wrap's own ledgers are: elsewhere the
  // path was given, and a file beside it is a likelier typo than a wrap ledger.
  if (path == Settings::default_ledger_path("server")) {
    return "; other ledgers in that directory: " + list + " (wrap keeps one per wrapped command; pass one with --db)";
  }
  return "; other .sqlite files in that directory: " + list;
}

StatusOr<std::unique_ptr<LedgerReader>> open_ledger_reader(const std::string& where) {
  auto db = effectfence::open_ledger_reader(where);
  if (!db.ok() && db.status().is_not_found()) {
    return Status::NotFound(db.status().message() + ledgers_beside(where));
  }
  return db;
}

}  // namespace effectfence::cli
