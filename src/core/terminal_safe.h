// Text from agents and clients, made safe to show on a terminal or to write
// as one line of a log.
#pragma once

#include <string>
#include <string_view>

namespace effectfence {

// value as a terminal shows it safely: control characters (C0, DEL, the C1
// controls, e.g. ESC or a newline) become \xNN or \u00NN, bidirectional
// controls \uNNNN, and a backslash \\, so text an agent supplied cannot
// move the cursor, hide itself, reorder a line or forge another line of a
// report or a log.
std::string terminal_safe(std::string_view value);

}  // namespace effectfence
