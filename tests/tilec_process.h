#pragma once
// Runs the `tilec` built beside the tests in a child process and reports how it ended: its
// exit code or the signal that ended it, and its stdout and stderr apart. The child inherits
// the environment (a sanitizer build's ASAN_OPTIONS too) and runs without a shell, so
// arguments reach it exactly as given.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

extern char** environ;

#include "tests/build_paths.h"

namespace tilec::test {

struct Process {
  int exit_code = -1; // -1 when a signal ended it
  int signal = 0;     // the signal that ended it; 0 when it exited
  bool timed_out = false;
  std::string out, err;

  bool exited() const { return signal == 0; }
  // Both streams, for failure messages.
  std::string text() const { return out + err; }
};

// `args` as separate arguments; `timeout_s` later the child is killed (SIGKILL, timed_out).
inline Process run_process(const std::string& program, const std::vector<std::string>& args, int timeout_s = 600) {
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0)
    throw std::runtime_error("pipe failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], 2);
  std::vector<char*> argv{const_cast<char*>(program.c_str())};
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, program.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  if (rc != 0) {
    ::close(out_pipe[0]);
    ::close(err_pipe[0]);
    throw std::runtime_error("cannot start " + program);
  }

  Process p;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&p.out, &p.err};
  int open_streams = 2;
  while (open_streams > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      ::kill(pid, SIGKILL);
      p.timed_out = true;
      break;
    }
    int n = ::poll(fds, 2, int(std::min<long long>(left.count(), 1000)));
    if (n < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[4096];
      ssize_t got = ::read(fds[i].fd, buf, sizeof buf);
      if (got > 0) {
        sinks[i]->append(buf, size_t(got));
      } else if (got == 0 || errno != EINTR) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_streams;
      }
    }
  }
  for (pollfd& f : fds)
    if (f.fd >= 0) ::close(f.fd);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) p.exit_code = WEXITSTATUS(status);
  else if (WIFSIGNALED(status)) p.signal = WTERMSIG(status);
  return p;
}

inline Process run_tilec(const std::vector<std::string>& args, int timeout_s = 600) {
  return run_process(tilec_binary(), args, timeout_s);
}

// `args` split at whitespace (no quoting: for arguments without spaces).
inline Process run_tilec(const std::string& args, int timeout_s = 600) {
  std::vector<std::string> split;
  std::istringstream in(args);
  for (std::string a; in >> a;) split.push_back(a);
  return run_tilec(split, timeout_s);
}

// The last non-empty line of `s` (the JSON object of a --json run is the last line of stdout).
inline std::string last_line(const std::string& s) {
  size_t end = s.find_last_not_of('\n');
  if (end == std::string::npos) return "";
  size_t start = s.rfind('\n', end);
  start = start == std::string::npos ? 0 : start + 1;
  return s.substr(start, end - start + 1);
}

inline int count_lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

} // namespace tilec::test
