#!/usr/bin/env bash
# Runs one test program under valgrind's memcheck with the project's options
# and fails on any report: a use of an uninitialised value (also in a syscall's
# buffer, such as the bytes a server sends), an invalid read or write, a bad
# free, a definite leak. Possible and indirect leaks are not errors (gRPC and
# protobuf keep static state alive until exit on purpose).
# Usage: tools/memcheck.sh TEST_BINARY [ARGS...]
# ctest runs it as the memcheck_* tests (CMakeLists.txt).
# Exit: the program's status; 1 when memcheck reported anything; 77 (skipped)
# when valgrind is not installed (tools/install-deps.sh installs it).
# Environment: MEMCHECK_FLAGS (more valgrind flags, e.g. --gen-suppressions=all).
# tools/valgrind.supp, if present, names third-party false positives only, each
# with the reason; never our code, never a library's uninitialised output.
set -euo pipefail
if [ $# -lt 1 ]; then
  echo "usage: tools/memcheck.sh TEST_BINARY [ARGS...]" >&2
  exit 2
fi
if ! command -v valgrind >/dev/null; then
  echo "memcheck.sh: valgrind is not installed (tools/install-deps.sh): skipped" >&2
  exit 77
fi
here=$(cd "$(dirname "$0")" && pwd)
flags=(
  --tool=memcheck
  --error-exitcode=1
  --track-origins=yes  # say where an uninitialised value was allocated
  --leak-check=full --show-leak-kinds=definite --errors-for-leak-kinds=definite
  --num-callers=30
)
if [ -f "$here/valgrind.supp" ]; then flags+=(--suppressions="$here/valgrind.supp"); fi
# shellcheck disable=SC2206  # MEMCHECK_FLAGS is a list of flags
extra=(${MEMCHECK_FLAGS:-})
exec valgrind "${flags[@]}" "${extra[@]}" "$@"
