// Test helper: runs a program to its end (at most a deadline) with its
// stdout and stderr in a file; the exit code and that output.
#ifndef SOPHON_TESTS_CLIENT_JOB_RUN_PROGRAM_H_
#define SOPHON_TESTS_CLIENT_JOB_RUN_PROGRAM_H_

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "tests/test_util.h"

extern char** environ;

namespace sophon::testing {

struct ProgramRun {
  int exit_code = -1;  // -1: killed at the deadline or by a signal
  std::string output;  // stdout and stderr
  std::string command;
};

inline ProgramRun RunProgram(const std::string& binary, const std::vector<std::string>& flags,
                             absl::Duration timeout = absl::Seconds(120)) {
  ProgramRun run;
  const std::string out_path = MakeTempDir("program_run") + "/output";
  std::vector<std::string> args = {binary};
  args.insert(args.end(), flags.begin(), flags.end());
  run.command = absl::StrJoin(args, " ");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, binary.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    run.output = "cannot start " + binary;
    return run;
  }
  const absl::Time deadline = absl::Now() + timeout;
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (absl::Now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      run.output = ReadFile(out_path) + "\n(killed at the deadline)";
      return run;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  if (WIFEXITED(status)) run.exit_code = WEXITSTATUS(status);
  run.output = ReadFile(out_path);
  return run;
}

}  // namespace sophon::testing

#endif  // SOPHON_TESTS_CLIENT_JOB_RUN_PROGRAM_H_
