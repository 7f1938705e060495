// One function per subcommand; each lives in its own file (serve.cc, ...).
// args excludes the program and subcommand names. Returns the exit code.
#pragma once

#include <string>
#include <vector>

namespace effectfence::cli {

using Args = std::vector<std::string>;

int run_serve(const Args& args);
int run_wrap(const Args& args);
int run_demo(const Args& args);
int run_demo_server(const Args& args);
int run_probe(const Args& args);
int run_stats(const Args& args);
int run_clear(const Args& args);
int run_export(const Args& args);
int run_verify(const Args& args);
int run_fenced(const Args& args);
int run_scan(const Args& args);
int run_keygen(const Args& args);
int run_archive(const Args& args);

}  // namespace effectfence::cli
