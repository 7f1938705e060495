// Draws the benchmark's pairs/s against pairs in flight as a PNG, with
// gnuplot (a Debian package, installed by tools/install-deps --bench).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace effectfence::bench {

struct PlotSeries {
  std::string title;                               // e.g. "serve (scattered)"
  std::string color = "black";                     // gnuplot colour; a system keeps its colour across runs
  bool dashed = false;                             // the second order of intent names
  std::vector<std::pair<double, double>> points;  // (pairs in flight, pairs/s); pairs/s > 0
};

// Writes `png_path`, with `command` printed under the plot; throws a
// runtime_error naming gnuplot if it is missing or fails. Series with no
// points are left out.
void plot_pairs_per_second(const std::string& png_path, const std::string& title, const std::string& command,
                           const std::vector<PlotSeries>& series);

}  // namespace effectfence::bench
