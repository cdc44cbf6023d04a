// The main() of every test binary: GoogleTest's, and a symbolized stack trace when the test
// dies (SIGSEGV, SIGABRT, ctest's SIGTERM at its timeout ...), so that a crash on a machine
// without a debugger still says where it happened. The frames come from glibc's backtrace()
// (the unwind tables: no frame pointers needed), their names from Abseil's symbolizer (the
// ELF symbol tables: functions of the test binary that no dynamic symbol names as well).
// Each run also gets a temporary folder of its own (TEST_TMPDIR, where the tests' files go,
// GoogleTest's TempDir() included), removed when the run ends, whatever its result, unless the
// caller set TEST_TMPDIR itself or SOPHON_KEEP_TEST_FILES is set (a crashed run leaves it).
#include <execinfo.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "absl/debugging/symbolize.h"

namespace {

void Write(const char* text) {
  for (size_t left = std::strlen(text); left > 0;) {
    const ssize_t n = write(STDERR_FILENO, text, left);
    if (n <= 0) return;
    text += n;
    left -= static_cast<size_t>(n);
  }
}

void OnFatalSignal(int sig, siginfo_t*, void*) {
  char line[1200];
  std::snprintf(line, sizeof(line), "\n*** %s (signal %d): stack trace of the thread it hit:\n",
                strsignal(sig), sig);
  Write(line);
  void* frames[64];
  const int n = backtrace(frames, 64);
  for (int i = 1; i < n; ++i) {  // frame 0 is this handler
    char name[1024];
    if (absl::Symbolize(frames[i], name, sizeof(name))) {
      std::snprintf(line, sizeof(line), "  #%-2d %p  %s\n", i, frames[i], name);
      Write(line);
    } else {
      std::snprintf(line, sizeof(line), "  #%-2d ", i);
      Write(line);
      backtrace_symbols_fd(&frames[i], 1, STDERR_FILENO);
    }
  }
  signal(sig, SIG_DFL);  // and die of it, as the test would have
  raise(sig);
}

void InstallCrashTraces() {
  void* warm[1];
  backtrace(warm, 1);  // loads the unwinder now: it allocates on its first call
  static std::vector<char> alt_stack(256 << 10);  // a stack overflow still gets its trace
  stack_t ss{};
  ss.ss_sp = alt_stack.data();
  ss.ss_size = alt_stack.size();
  sigaltstack(&ss, nullptr);
  struct sigaction sa{};
  sa.sa_sigaction = OnFatalSignal;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTERM}) sigaction(sig, &sa, nullptr);
}

// A fresh folder for this run's files, or "" when the caller chose one (TEST_TMPDIR set: a
// death test's child inherits its parent's) or none could be made.
std::string MakeRunFolder() {
  if (std::getenv("TEST_TMPDIR") != nullptr) return "";
  std::error_code error;
  const std::filesystem::path base = std::filesystem::temp_directory_path(error);
  std::string pattern = (error ? std::filesystem::path("/tmp") : base) / "sophon_test_XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) return "";
  setenv("TEST_TMPDIR", pattern.c_str(), 1);
  return pattern;
}

}  // namespace

int main(int argc, char** argv) {
  absl::InitializeSymbolizer(argv[0]);
  InstallCrashTraces();
  testing::InitGoogleTest(&argc, argv);
  const std::string folder = MakeRunFolder();
  const int result = RUN_ALL_TESTS();
  if (!folder.empty() && std::getenv("SOPHON_KEEP_TEST_FILES") == nullptr) {
    std::error_code error;  // a file a test left read-only is no reason to fail the run
    std::filesystem::remove_all(folder, error);
  }
  return result;
}
