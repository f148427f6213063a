#pragma once
// Progress of a long command on stderr: a bar redrawn in place on a terminal, plain lines
// otherwise (so logs and pipes get one line per step).
#include <fmt/format.h>
#include <unistd.h>

#include <iostream>
#include <string>

namespace tilec::autotune {

class Progress {
public:
  Progress(std::string what, size_t total) : what_(std::move(what)), total_(total), tty_(::isatty(2)) {}
  void step(const std::string& line) { set(done_ + 1, line); }
  // Jumps to `done` steps (work finished out of order by several threads).
  void set(size_t done, const std::string& line) {
    done_ = done;
    if (tty_) {
      const int width = 30;
      int filled = total_ ? int(width * done_ / total_) : width;
      std::cerr << fmt::format("\r\033[K{} [{}{}] {}/{} {}", what_, std::string(size_t(filled), '#'),
                               std::string(size_t(width - filled), '.'), done_, total_, line)
                << std::flush;
      if (done_ == total_) std::cerr << "\n";
    } else {
      std::cerr << fmt::format("{} [{}/{}] {}\n", what_, done_, total_, line);
    }
  }
  // A line of its own (on a terminal, the bar is redrawn by the next step).
  void note(const std::string& line) {
    if (tty_) std::cerr << "\r\033[K";
    std::cerr << line << "\n";
  }

private:
  std::string what_;
  size_t total_, done_ = 0;
  bool tty_;
};

} // namespace tilec::autotune
