// One line of training progress for the tutorials: redrawn in place on a
// terminal, plain lines in a log (CI's).
//
//   Progress progress(steps_per_epoch);
//   progress.show(epoch, step, "loss 0.4321  2310 samples/s");
//   progress.end_epoch();
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

class Progress {
 public:
  explicit Progress(int64_t total) : total_(total), terminal_(isatty(STDOUT_FILENO)) {}

  // A bar for `step` of the total, then `figures`.
  void show(int epoch, int64_t step, const std::string& figures) const {
    const int width = 30;
    std::string bar(static_cast<size_t>(width * step / total_), '#');
    bar.resize(width, '.');
    std::printf("%sepoch %d [%s] %4lld/%lld  %s%s", terminal_ ? "\r" : "", epoch, bar.c_str(),
                static_cast<long long>(step), static_cast<long long>(total_), figures.c_str(),
                terminal_ ? "" : "\n");
    std::fflush(stdout);
  }

  void end_epoch() const {
    if (terminal_) std::printf("\n");
  }

 private:
  int64_t total_;
  bool terminal_;
};
