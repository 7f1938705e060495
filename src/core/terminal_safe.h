// Text from agents and clients, made safe to show on a terminal or to write
// as one line of a log.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace effectfence {

// value as a terminal shows it safely: control characters (C0, DEL, the C1
// controls, e.g. ESC or a newline) become \xNN or \u00NN, bidirectional
// controls \uNNNN, and a backslash \\, so text an agent supplied cannot
// move the cursor, hide itself, reorder a line or forge another line of a
// report or a log.
std::string terminal_safe(std::string_view value);

// The text that terminal_safe showed as shown, so that a name copied from a
// report can be given back; nullopt if shown is not exactly what
// terminal_safe prints for some text (a stray backslash, an escape it
// never writes).
std::optional<std::string> terminal_unescape(std::string_view shown);

}  // namespace effectfence
