#!/usr/bin/env bash
# Clang's thread-safety analysis (ABSL_GUARDED_BY, ABSL_EXCLUSIVE_LOCKS_REQUIRED,
# ...) over the translation units whose code uses the annotations, whatever
# compiler the build itself uses: `clang++ -fsyntax-only -Wthread-safety
# -Werror=thread-safety` with each unit's flags from compile_commands.json.
# Usage: tools/thread_safety.sh [build-dir]   (default: build; it must have been
# configured, and the generated protobuf headers built, as ctest's run ensures)
# A unit is analysed when it or a project header it includes names an
# annotation; LibTorch units are left out (none is annotated, and parsing
# LibTorch is slow). Exits 0 with a message when clang++ is missing.
# Environment: JOBS (parallel clang processes, default: the number of CPUs).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=$(readlink -f "${1:-build}")
if ! command -v clang++ >/dev/null; then
  echo "thread_safety.sh: clang++ not found, analysis skipped"
  exit 0
fi
db="$build/compile_commands.json"
[ -f "$db" ] || { echo "thread_safety.sh: no $db (configure the build first)" >&2; exit 1; }

python3 - "$db" "$PWD" <<'EOF'
import json, os, re, shlex, subprocess, sys, time
from concurrent.futures import ThreadPoolExecutor
db, root = sys.argv[1], sys.argv[2]
start = time.monotonic()
annotation = re.compile(r"\bABSL_(GUARDED_BY|PT_GUARDED_BY|EXCLUSIVE_LOCKS_REQUIRED|"
                        r"SHARED_LOCKS_REQUIRED|LOCKS_EXCLUDED|LOCK_RETURNED|"
                        r"EXCLUSIVE_LOCK_FUNCTION|UNLOCK_FUNCTION|ACQUIRED_(BEFORE|AFTER)|"
                        r"NO_THREAD_SAFETY_ANALYSIS|ASSERT_EXCLUSIVE_LOCK)\b")
include = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)

def read(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""

def annotated(path):
    """The file, or a project header it includes, names an annotation."""
    text = read(path)
    if annotation.search(text):
        return True
    for name in include.findall(text):
        for base in (root, os.path.join(root, "include"), os.path.dirname(path)):
            header = os.path.join(base, name)
            if os.path.isfile(header):
                if annotation.search(read(header)):
                    return True
                break
    return False

units = []
for entry in json.load(open(db)):
    source = os.path.realpath(os.path.join(entry["directory"], entry["file"]))
    if not source.startswith(root + os.sep) or "/gen/" in source:
        continue
    args = entry.get("arguments") or shlex.split(entry["command"])
    if any("torch" in a for a in args) or not annotated(source):
        continue
    # The flags only: no launcher, compiler, output, dependency files or -c.
    while args and not args[0].startswith("-"):
        args = args[1:]
    flags, skip = [], False
    for i, a in enumerate(args):
        if skip:
            skip = False
        elif a in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
        elif a == "-include" and i + 1 < len(args) and args[i + 1].endswith("cmake_pch.hxx"):
            # GCC's precompiled header (CMake's -include of it): clang cannot read the .gch,
            # and parses the unit's own includes instead.
            skip = True
        elif a == "-Winvalid-pch":
            pass
        elif a in ("-c", "-MD", "-MMD"):
            pass
        elif os.path.realpath(os.path.join(entry["directory"], a)) == source:
            pass
        else:
            flags.append(a)
    units.append((entry["directory"], source, flags))

def analyse(unit):
    directory, source, flags = unit
    p = subprocess.run(["clang++", "-fsyntax-only", "-Wthread-safety", "-Werror=thread-safety",
                        "-Wno-unknown-warning-option", *flags, source], cwd=directory,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return source, p.returncode, p.stdout

failed = []
with ThreadPoolExecutor(int(os.environ.get("JOBS") or os.cpu_count())) as pool:
    for source, rc, out in pool.map(analyse, units):
        if rc != 0:
            failed.append(os.path.relpath(source, root))
        sys.stdout.write(out)
print(f"thread_safety.sh: {len(units)} translation units, {len(failed)} failed"
      f"{': ' + ' '.join(failed) if failed else ''} ({time.monotonic() - start:.1f}s)")
sys.exit(1 if failed else 0)
EOF
