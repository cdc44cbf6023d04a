// sophon-bench-memory: does a burst of large buffers stay resident after it is
// freed, does ReleaseFreeMemory() give it back, and what does each allocator
// setting cost while serving?
//
// Burst: --threads threads allocate and fill ~600 KB float tensors (as prep
// workers do) until --burst-mb is held, another thread frees them all (as the
// gRPC side does), then ReleaseFreeMemory(). Prints the RSS at each step.
// Steady: the same threads produce into a FIFO of at most --window-mb that one
// consumer frees (a server streaming to clients), --steady-mb in all, and the
// same again in bursts (fill the window, drain it: a client that stops and
// starts). Prints CPU and system time per buffer.
//
// mallopt settings are process-wide, so one setting per process:
// tools/bench/memory_return.sh runs them all in one go.
#include <malloc.h>

#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include <sys/resource.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "sophon/base/allocator.h"
#include "sophon/base/process_status.h"
#include "sophon/cli/cli.h"

ABSL_FLAG(std::string, allocator, "large-buffers",
          "glibc (its defaults) or large-buffers (ConfigureAllocatorForLargeBuffers(), as the "
          "programs do). Default large-buffers.");
ABSL_FLAG(int, max_arenas, 0,
          "With large-buffers: the cap on malloc arenas (sophon-server uses "
          "kServerMaxArenas = 4); 0 = glibc's default (8 per core). Default 0.");
ABSL_FLAG(int64_t, trim_threshold_mb, 0,
          "With large-buffers: overrides its 1 GB trim threshold (an experiment: allocator.h "
          "says why it stays); 0 = keep it. Default 0.");
ABSL_FLAG(int, threads, 8, "Threads that allocate and fill buffers. Default 8.");
ABSL_FLAG(int64_t, burst_mb, 2048, "MB held at the peak of the burst. Default 2048.");
ABSL_FLAG(int64_t, buffer_bytes, 3 * 224 * 224 * 4,
          "Bytes per buffer: a 224 x 224 float tensor by default (602112).");
ABSL_FLAG(int64_t, window_mb, 128, "MB in flight at most in the steady phases. Default 128.");
ABSL_FLAG(int64_t, steady_mb, 4096, "MB produced in each steady phase. Default 4096.");

namespace {

using Buffer = std::unique_ptr<float[]>;

double Mb(uint64_t bytes) { return bytes / 1048576.0; }

struct Cpu {
  double total = 0, system = 0;
  static Cpu Now() {
    rusage u;
    getrusage(RUSAGE_SELF, &u);
    Cpu c;
    c.system = u.ru_stime.tv_sec + u.ru_stime.tv_usec * 1e-6;
    c.total = c.system + u.ru_utime.tv_sec + u.ru_utime.tv_usec * 1e-6;
    return c;
  }
};

Buffer Produce(int64_t floats) {
  Buffer buffer(new float[floats]);
  std::memset(buffer.get(), 0x3f, floats * sizeof(float));  // like writing a tensor
  return buffer;
}

// A FIFO of at most `capacity` buffers between the producers and one consumer.
// drain_all: the consumer waits for a full window and frees all of it at once.
class Fifo {
 public:
  Fifo(int64_t capacity, bool drain_all) : capacity_(capacity), drain_all_(drain_all) {}
  void Push(Buffer b) {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(this, &Fifo::HasRoom));
    queue_.push_back(std::move(b));
    if (static_cast<int64_t>(queue_.size()) == capacity_) draining_ = drain_all_;
  }
  // Frees `total` buffers; returns when done.
  void Consume(int64_t total) {
    for (int64_t done = 0; done < total;) {
      std::deque<Buffer> taken;
      {
        absl::MutexLock lock(&mu_);
        want_ = drain_all_ ? std::min(capacity_, total - done) : 1;
        mu_.Await(absl::Condition(this, &Fifo::HasWanted));
        for (int64_t i = 0; i < want_; ++i) {
          taken.push_back(std::move(queue_.front()));
          queue_.pop_front();
        }
        draining_ = false;
      }
      done += static_cast<int64_t>(taken.size());
    }  // `taken` freed here, outside the lock
  }

 private:
  bool HasRoom() const {
    return static_cast<int64_t>(queue_.size()) < capacity_ && !draining_;
  }
  bool HasWanted() const { return static_cast<int64_t>(queue_.size()) >= want_; }

  absl::Mutex mu_;
  std::deque<Buffer> queue_;
  int64_t want_ = 1;
  const int64_t capacity_;
  const bool drain_all_;
  bool draining_ = false;
};

// CPU seconds (total, system) per buffer to stream `total` buffers.
Cpu Steady(int threads, int64_t total, int64_t window, bool drain_all, int64_t floats) {
  Fifo fifo(window, drain_all);
  const Cpu c0 = Cpu::Now();
  std::vector<std::thread> producers;
  for (int t = 0; t < threads; ++t) {
    const int64_t mine = total / threads + (t < total % threads ? 1 : 0);
    producers.emplace_back([&fifo, mine, floats] {
      for (int64_t i = 0; i < mine; ++i) fifo.Push(Produce(floats));
    });
  }
  fifo.Consume(total);
  for (std::thread& p : producers) p.join();
  const Cpu c1 = Cpu::Now();
  return {(c1.total - c0.total) / total, (c1.system - c0.system) / total};
}

}  // namespace

int main(int argc, char** argv) {
  sophon::ArgvHolder args(argc, argv);
  absl::ParseCommandLine(args.argc(), args.argv());
  const std::string allocator = absl::GetFlag(FLAGS_allocator);
  if (allocator == "large-buffers") {
    sophon::ConfigureAllocatorForLargeBuffers(absl::GetFlag(FLAGS_max_arenas));
    if (const int64_t mb = absl::GetFlag(FLAGS_trim_threshold_mb); mb > 0) {
      mallopt(M_TRIM_THRESHOLD, static_cast<int>(mb << 20));
    }
  } else if (allocator != "glibc") {
    std::fprintf(stderr, "sophon-bench-memory: --allocator must be glibc or large-buffers\n");
    return 2;
  }
  const int threads = absl::GetFlag(FLAGS_threads);
  const int64_t buffer_bytes = absl::GetFlag(FLAGS_buffer_bytes);
  const int64_t floats = buffer_bytes / sizeof(float);
  const int64_t per_thread = (absl::GetFlag(FLAGS_burst_mb) << 20) / buffer_bytes / threads;

  // Burst.
  const uint64_t rss_before = sophon::ResidentBytes();
  std::vector<std::vector<Buffer>> held(threads);
  {
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        for (int64_t i = 0; i < per_thread; ++i) held[t].push_back(Produce(floats));
      });
    }
    for (std::thread& w : workers) w.join();
  }
  const uint64_t rss_peak = sophon::ResidentBytes();
  for (int64_t i = 0; i < per_thread; ++i) {  // in the order they were made, as a FIFO frees
    for (int t = 0; t < threads; ++t) held[t][i].reset();
  }
  held.clear();
  const uint64_t rss_freed = sophon::ResidentBytes();
  const absl::Time t0 = absl::Now();
  sophon::ReleaseFreeMemory();
  const double release_ms = absl::ToDoubleMilliseconds(absl::Now() - t0);
  const uint64_t rss_released = sophon::ResidentBytes();

  // Steady.
  const int64_t window = std::max<int64_t>(1, (absl::GetFlag(FLAGS_window_mb) << 20) / buffer_bytes);
  const int64_t total = (absl::GetFlag(FLAGS_steady_mb) << 20) / buffer_bytes;
  const Cpu stream = Steady(threads, total, window, /*drain_all=*/false, floats);
  const Cpu bursts = Steady(threads, total, window, /*drain_all=*/true, floats);

  const std::string setting =
      allocator == "glibc" ? allocator
                           : absl::StrCat(allocator, " arenas=", absl::GetFlag(FLAGS_max_arenas),
                                          absl::GetFlag(FLAGS_trim_threshold_mb) > 0
                                              ? absl::StrCat(" trim=", absl::GetFlag(FLAGS_trim_threshold_mb), "MB")
                                              : "");
  std::printf(
      "%-33s RSS MB: before %5.0f  peak %5.0f  after free %5.0f  after release %5.0f "
      "(release %4.0f ms) | us per buffer, CPU (system): stream %5.1f (%5.1f)  bursts %5.1f "
      "(%5.1f)\n",
      setting.c_str(), Mb(rss_before), Mb(rss_peak), Mb(rss_freed), Mb(rss_released),
      release_ms, 1e6 * stream.total, 1e6 * stream.system, 1e6 * bursts.total,
      1e6 * bursts.system);
  return 0;
}
