// Reading a subcommand's options, and which ledger they name.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "ledger/ledger_reader.h"

namespace effectfence::cli {

// One option a subcommand accepts: "--name VALUE" / "--name=VALUE" when
// takes_value, else a switch "--name".
struct OptionSpec {
  std::string name;  // without the leading "--"
  bool takes_value = false;
  bool repeatable = false;  // may be given more than once (a value option; see ParsedArgs::all)
};

struct ParsedArgs {
  std::map<std::string, std::string> values;
  std::set<std::string> switches;
  std::vector<std::string> positionals;

  bool has(const std::string& name) const { return switches.count(name) > 0 || values.count(name) > 0; }
  std::optional<std::string> value(const std::string& name) const;
  // Every value of a repeatable option, in the order given.
  std::map<std::string, std::vector<std::string>> repeated;
  std::vector<std::string> all(const std::string& name) const;
};

// Parses args against specs ("--help"/"-h" is always accepted as the switch
// "help"; "--" ends the options). Returns the error for an unknown
// option, a missing or empty value, or a value given to a switch.
StatusOr<ParsedArgs> parse_args(const Args& args, const std::vector<OptionSpec>& specs);

// --db, else $EFFECTFENCE_LEDGER, else Settings::default_ledger_path("server").
// When it falls back to the default ledger and other ledgers lie beside it
// (wrap keeps one per wrapped command), says so on stderr for command: the
// operator may have meant one of those.
std::string resolve_ledger_path(const ParsedArgs& parsed, const std::string& command);

// The other ledgers next to path (but except), as "; other ledgers in that
// directory: ...", or "": `wrap` names its ledger after the command it
// wraps, so an operator looking in the default place may be looking for one
// of these.
std::string ledgers_beside(const std::string& path, const std::string& except = "");

// The ledger layer's open_ledger_reader, naming the ledgers beside a file
// that is not there: the operator may have meant one of those.
StatusOr<std::unique_ptr<LedgerReader>> open_ledger_reader(const std::string& where);

}  // namespace effectfence::cli
