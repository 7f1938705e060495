#include "plot.h"

#include <sys/wait.h>

#include <cstdio>
#include <stdexcept>

namespace effectfence::bench {
namespace {

// gnuplot's single-quoted strings end at the next quote; titles have none.
std::string quoted(std::string text) {
  for (char& c : text) {
    if (c == '\'') c = '"';
  }
  return "'" + text + "'";
}

}  // namespace

void plot_pairs_per_second(const std::string& png_path, const std::string& title, const std::string& command,
                           const std::vector<PlotSeries>& series) {
  std::string script =
      "set terminal pngcairo size 1200,700 noenhanced\n"
      "set output " + quoted(png_path) + "\n"
      "set title " + quoted(title) + "\n"
      "set logscale x 2\nset logscale y 10\nset grid\n"
      "set xlabel 'pairs in flight'\nset ylabel 'prepare+commit pairs/s'\n"
      "set key outside right top\nset bmargin 6\n"
      "set label 1 " + quoted(command) + " at screen 0.01, screen 0.02 font ',9'\n";
  std::string plots;
  for (size_t i = 0; i < series.size(); ++i) {
    const PlotSeries& s = series[i];
    if (s.points.empty()) continue;
    const std::string block = "$s" + std::to_string(i);
    script += block + " << EOD\n";
    for (const auto& [x, y] : s.points) script += std::to_string(x) + " " + std::to_string(y) + "\n";
    script += "EOD\n";
    plots += std::string(plots.empty() ? "plot " : ", ") + block + " using 1:2 with linespoints lw 2 pt 7 lc rgb " +
             quoted(s.color) + " dt " + (s.dashed ? "2" : "1") + " title " + quoted(s.title);
  }
  if (plots.empty()) throw std::runtime_error("--plot: nothing was measured to draw");
  script += plots + "\n";
  FILE* gnuplot = ::popen("gnuplot", "w");
  if (gnuplot == nullptr) throw std::runtime_error("--plot: cannot run gnuplot");
  std::fwrite(script.data(), 1, script.size(), gnuplot);
  const int status = ::pclose(gnuplot);
  if (status != 0) {
    throw std::runtime_error("--plot: gnuplot failed (status " + std::to_string(status) +
                             "; is it installed? tools/install-deps --bench)");
  }
}

}  // namespace effectfence::bench
