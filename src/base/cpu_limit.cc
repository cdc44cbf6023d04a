#include "sophon/base/cpu_limit.h"

#include <sched.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "sophon/base/csv.h"

namespace sophon {
namespace internal {

double CpuMaxQuota(const std::string& cpu_max) {
  const std::vector<std::string> parts =
      absl::StrSplit(absl::StripAsciiWhitespace(cpu_max), ' ', absl::SkipEmpty());
  double quota = 0, period = 0;
  if (parts.size() != 2 || !absl::SimpleAtod(parts[0], &quota) ||
      !absl::SimpleAtod(parts[1], &period)) {
    return std::numeric_limits<double>::infinity();  // "max 100000" or unknown
  }
  return CfsQuota(quota, period);
}

double CfsQuota(double quota_us, double period_us) {
  if (quota_us <= 0 || period_us <= 0) return std::numeric_limits<double>::infinity();
  return quota_us / period_us;
}

}  // namespace internal

namespace {

// The file's text, or "" when it cannot be read (no such cgroup file).
std::string ReadFileOrEmpty(const std::string& path) {
  absl::StatusOr<std::string> text = csv::ReadFile(path);
  return text.ok() ? *std::move(text) : std::string();
}

double ReadNumber(const std::string& path) {
  double value = 0;
  const std::string text = ReadFileOrEmpty(path);
  return absl::SimpleAtod(absl::StripAsciiWhitespace(text), &value) ? value : -1;
}

// Where the cgroup hierarchy with `controller` is mounted ("" for v2's
// unified hierarchy, whose mount has type cgroup2).
std::string MountPoint(bool v2, const std::string& controller) {
  std::ifstream mounts("/proc/mounts");
  std::string line;
  while (std::getline(mounts, line)) {
    const std::vector<std::string> f = absl::StrSplit(line, ' ');
    if (f.size() < 4) continue;
    if (v2 && f[2] == "cgroup2") return f[1];
    if (!v2 && f[2] == "cgroup") {
      for (absl::string_view opt : absl::StrSplit(f[3], ',')) {
        if (opt == controller) return f[1];
      }
    }
  }
  return "";
}

// The smallest CFS quota on `path` (relative to the mount) and its ancestors.
double QuotaAlongPath(const std::string& mount, std::string path, bool v2) {
  double limit = std::numeric_limits<double>::infinity();
  while (true) {
    const std::string dir = mount + (path == "/" ? "" : path);
    limit = std::min(limit, v2 ? internal::CpuMaxQuota(ReadFileOrEmpty(dir + "/cpu.max"))
                               : internal::CfsQuota(ReadNumber(dir + "/cpu.cfs_quota_us"),
                                                    ReadNumber(dir + "/cpu.cfs_period_us")));
    if (path.empty() || path == "/") break;
    const size_t slash = path.rfind('/');
    path = slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
  }
  return limit;
}

double CgroupQuota() {
  std::ifstream cgroups("/proc/self/cgroup");
  std::string line;
  double limit = std::numeric_limits<double>::infinity();
  while (std::getline(cgroups, line)) {
    // hierarchy-id:controllers:path
    const std::vector<std::string> f = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (f.size() != 3) continue;
    if (f[0] == "0" && f[1].empty()) {
      const std::string mount = MountPoint(/*v2=*/true, "");
      if (!mount.empty()) limit = std::min(limit, QuotaAlongPath(mount, f[2], true));
      continue;
    }
    for (absl::string_view c : absl::StrSplit(f[1], ',')) {
      if (c != "cpu") continue;
      const std::string mount = MountPoint(/*v2=*/false, "cpu");
      if (!mount.empty()) limit = std::min(limit, QuotaAlongPath(mount, f[2], false));
    }
  }
  return limit;
}

}  // namespace

double ProcessCpuLimit() {
  double cpus = 1;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) cpus = std::max(1, CPU_COUNT(&set));
  return std::max(0.01, std::min(cpus, CgroupQuota()));
}

}  // namespace sophon
