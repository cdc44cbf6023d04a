// Test helper: the sophon-server program (SOPHON_SERVER_BIN) as a child
// process, started with flags, its "listening on" and "metrics on" lines read
// from its stdout, its stderr kept in a file for failure messages; killed and
// reaped on destruction.
#ifndef SOPHON_TESTS_SERVER_SERVER_PROCESS_H_
#define SOPHON_TESTS_SERVER_SERVER_PROCESS_H_

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "tests/test_util.h"

extern char** environ;

namespace sophon::testing {

class ServerProcess {
 public:
  explicit ServerProcess(std::string binary) : binary_(std::move(binary)) {}
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;
  ~ServerProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (out_ >= 0) close(out_);
  }

  // Starts the program with `flags` and waits (at most `timeout`) for its
  // "listening on HOST:PORT" line, and for "metrics on HOST:PORT" when
  // `metrics` is true. An error carries the program's stderr.
  absl::Status Start(const std::vector<std::string>& flags, bool metrics,
                     absl::Duration timeout = absl::Seconds(60)) {
    stderr_path_ = MakeTempDir("server_process") + "/stderr";
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return absl::InternalError("pipe failed");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
    posix_spawn_file_actions_addopen(&actions, 2, stderr_path_.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    std::vector<std::string> args = {binary_};
    args.insert(args.end(), flags.begin(), flags.end());
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const int rc = posix_spawn(&pid_, binary_.c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    close(fds[1]);
    out_ = fds[0];
    if (rc != 0) {
      pid_ = -1;
      return absl::InternalError(absl::StrCat("cannot start ", binary_, ": errno ", rc));
    }
    command_ = absl::StrJoin(args, " ");
    const absl::Time deadline = absl::Now() + timeout;
    while (address_.empty() || (metrics && metrics_port_ <= 0)) {
      std::string line;
      if (absl::Status s = ReadLine(deadline, &line); !s.ok()) return s;
      absl::string_view rest = absl::StripAsciiWhitespace(line);
      if (absl::ConsumePrefix(&rest, "listening on ")) {
        address_ = std::string(rest);
      } else if (absl::ConsumePrefix(&rest, "metrics on ")) {
        const size_t colon = rest.rfind(':');
        if (colon == absl::string_view::npos ||
            !absl::SimpleAtoi(rest.substr(colon + 1), &metrics_port_)) {
          return Failed(absl::StrCat("cannot read the port of '", line, "'"));
        }
      }
    }
    return absl::OkStatus();
  }

  // Sends `sig` to the program.
  void Signal(int sig) const {
    if (pid_ > 0) kill(pid_, sig);
  }
  // Waits (at most `timeout`) for the program to exit: its exit code, or
  // -signal if a signal ended it; DeadlineExceeded if it is still running.
  absl::StatusOr<int> WaitExit(absl::Duration timeout) {
    if (pid_ <= 0) return absl::FailedPreconditionError("the program is not running");
    const absl::Time deadline = absl::Now() + timeout;
    int status = 0;
    for (;;) {
      const pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) break;
      if (r < 0) return absl::InternalError("waitpid failed");
      if (absl::Now() > deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat(command_, ": still running after ", absl::FormatDuration(timeout)));
      }
      absl::SleepFor(absl::Milliseconds(5));
    }
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  }

  // What the program wrote to stdout (its log) since its start-up lines, up
  // to its end: call after WaitExit.
  std::string RestOfStdout() {
    std::string out = std::exchange(buffer_, "");
    char chunk[4096];
    for (ssize_t n; out_ >= 0 && (n = read(out_, chunk, sizeof(chunk))) > 0;) {
      out.append(chunk, static_cast<size_t>(n));
    }
    return out;
  }

  const std::string& address() const { return address_; }  // HOST:PORT of the gRPC service
  int metrics_port() const { return metrics_port_; }
  pid_t pid() const { return pid_; }
  std::string Stderr() const { return ReadFile(stderr_path_); }

 private:
  absl::Status Failed(absl::string_view why) const {
    return absl::InternalError(absl::StrCat(command_, ": ", why, "; its stderr:\n", Stderr()));
  }

  // One line of the program's stdout, waiting until `deadline`.
  absl::Status ReadLine(absl::Time deadline, std::string* line) {
    for (;;) {
      if (const size_t nl = buffer_.find('\n'); nl != std::string::npos) {
        *line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        return absl::OkStatus();
      }
      const int64_t wait_ms = absl::ToInt64Milliseconds(deadline - absl::Now());
      if (wait_ms <= 0) return Failed("no 'listening on' line in time");
      pollfd p{out_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(wait_ms)) <= 0) continue;
      char chunk[512];
      const ssize_t n = read(out_, chunk, sizeof(chunk));
      if (n <= 0) {
        int status = 0;
        waitpid(pid_, &status, 0);
        pid_ = -1;
        return Failed(WIFEXITED(status)
                          ? absl::StrCat("exited with code ", WEXITSTATUS(status),
                                         " before it listened")
                          : absl::StrCat("ended by signal ", WTERMSIG(status),
                                         " before it listened"));
      }
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }

  const std::string binary_;
  std::string command_;
  std::string stderr_path_;
  pid_t pid_ = -1;
  int out_ = -1;
  std::string buffer_;
  std::string address_;
  int metrics_port_ = -1;
};

}  // namespace sophon::testing

#endif  // SOPHON_TESTS_SERVER_SERVER_PROCESS_H_
