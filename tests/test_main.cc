// The main() of every test binary: GoogleTest's, and a symbolized stack trace when the test
// dies (SIGSEGV, SIGABRT, or ctest's SIGTERM at its timeout), so that a crash on a machine
// without a debugger still says where it happened.
#include <gtest/gtest.h>

#include "absl/debugging/failure_signal_handler.h"
#include "absl/debugging/symbolize.h"

int main(int argc, char** argv) {
  absl::InitializeSymbolizer(argv[0]);
  absl::InstallFailureSignalHandler(absl::FailureSignalHandlerOptions());
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
