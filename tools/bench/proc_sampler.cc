#include "tools/bench/proc_sampler.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "sophon/base/process_status.h"

namespace sophon {

ProcSample ReadProcSample(pid_t pid) {
  ProcSample s;
  // A process that has exited (a zombie not yet reaped) has no VmRSS line.
  const absl::StatusOr<ProcessStatus> status =
      ReadProcessStatus(absl::StrCat("/proc/", pid, "/status"));
  if (!status.ok()) return s;
  s.rss_bytes = static_cast<int64_t>(status->rss_bytes);
  s.threads = status->threads;
  // utime and stime are fields 14 and 15 of /proc/<pid>/stat, counted after
  // the command name, which is in parentheses and may hold spaces.
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');
  if (paren != std::string::npos) {
    const std::vector<absl::string_view> f =
        absl::StrSplit(absl::string_view(text).substr(paren + 1), ' ', absl::SkipWhitespace());
    // f[0] is field 3 (state), so field N is f[N - 3].
    int64_t utime = 0, stime = 0;
    if (f.size() > 12 && absl::SimpleAtoi(f[11], &utime) && absl::SimpleAtoi(f[12], &stime)) {
      s.cpu_seconds =
          static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
    }
  }
  s.alive = true;
  return s;
}

void ProcSampler::Start() {
  start_ = absl::Now();
  thread_ = std::thread([this] { Loop(); });
}

void ProcSampler::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

ProcSummary ProcSampler::Summary() const {
  absl::MutexLock lock(&mu_);
  return summary_;
}

void ProcSampler::Loop() {
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    mu_.Unlock();
    const ProcSample s = ReadProcSample(options_.pid);
    bool kill_now = false;
    mu_.Lock();
    ProcSummary& sum = summary_;
    if (s.alive) {
      if (sum.samples == 0) sum.first = s;
      ++sum.samples;
      sum.last = s;
      sum.peak_rss_bytes = std::max(sum.peak_rss_bytes, s.rss_bytes);
      sum.peak_threads = std::max(sum.peak_threads, s.threads);
      kill_now = options_.kill_above_rss_bytes > 0 && s.rss_bytes > options_.kill_above_rss_bytes &&
                 !sum.killed_by_cap;
      if (kill_now) sum.killed_by_cap = true;
    } else if (!sum.exited) {
      sum.exited = true;
      sum.exited_after_s = absl::ToDoubleSeconds(absl::Now() - start_);
    }
    if (kill_now) {
      mu_.Unlock();
      kill(options_.pid, SIGKILL);
      mu_.Lock();
    }
    if (sum.exited) break;  // nothing more to watch
    auto stopped = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_; };
    mu_.AwaitWithTimeout(absl::Condition(&stopped), options_.interval);
  }
}

}  // namespace sophon
