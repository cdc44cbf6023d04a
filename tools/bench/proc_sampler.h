// Samples another process's resident memory, thread count and CPU time from
// /proc/<pid> on a thread of its own (sophon-bench-load watches the server
// with it). Optionally kills the process (SIGKILL) once its RSS passes a cap:
// a memory bound for machines where no cgroup can be made.
#ifndef SOPHON_TOOLS_BENCH_PROC_SAMPLER_H_
#define SOPHON_TOOLS_BENCH_PROC_SAMPLER_H_

#include <sys/types.h>

#include <cstdint>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace sophon {

struct ProcSamplerOptions {
  pid_t pid = 0;
  absl::Duration interval = absl::Milliseconds(100);
  int64_t kill_above_rss_bytes = 0;  // 0: never kill
};

struct ProcSample {
  bool alive = false;  // false once /proc/<pid> is gone or a zombie
  int64_t rss_bytes = 0;
  int threads = 0;
  double cpu_seconds = 0;  // user + system, all threads
};

struct ProcSummary {
  int samples = 0;
  ProcSample first;
  ProcSample last;  // the last sample taken while the process was alive
  int64_t peak_rss_bytes = 0;
  int peak_threads = 0;
  bool exited = false;         // it went away while being watched
  double exited_after_s = 0;   // seconds after Start()
  bool killed_by_cap = false;  // this sampler killed it (kill_above_rss_bytes)
};

// One sample of `pid` now.
ProcSample ReadProcSample(pid_t pid);

class ProcSampler {
 public:
  explicit ProcSampler(const ProcSamplerOptions& options) : options_(options) {}
  ~ProcSampler() { Stop(); }
  ProcSampler(const ProcSampler&) = delete;
  ProcSampler& operator=(const ProcSampler&) = delete;

  void Start();
  void Stop();  // idempotent
  ProcSummary Summary() const;

 private:
  void Loop();

  const ProcSamplerOptions options_;
  std::thread thread_;
  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  ProcSummary summary_ ABSL_GUARDED_BY(mu_);
  absl::Time start_;
};

}  // namespace sophon

#endif  // SOPHON_TOOLS_BENCH_PROC_SAMPLER_H_
