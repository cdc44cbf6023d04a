// sophon-server: serves a dataset to training nodes and runs as much of each
// sample's preprocessing as they ask for, on --prep-workers threads.
#include <csignal>
#include <cstdio>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "sophon/base/allocator.h"
#include "sophon/cli/cli.h"
#include "absl/flags/usage.h"
#include "absl/time/time.h"
#include "sophon/data/page_cache.h"
#include "spdlog/spdlog.h"
#include "server/storage_server.h"

ABSL_FLAG(std::string, data, "", "ImageFolder dataset root (DIR/CLASS/*.jpg). Required.");
ABSL_FLAG(std::string, host, "127.0.0.1",
          "Address to listen on. Default 127.0.0.1 (this machine only); 0.0.0.0 for all.");
ABSL_FLAG(int, port, 50051, "Port to listen on; 0 picks a free one. Default 50051.");
ABSL_FLAG(int, prep_workers, 4,
          "Threads that decode and transform samples: the storage node's CPU budget. Default 4.");
ABSL_FLAG(int, max_inflight_per_stream, 128,
          "Samples a stream may have accepted but not yet sent; bounds server memory per "
          "client. Default 128.");
ABSL_FLAG(double, cpu_limit, 0,
          "CPUs of time this server may use (prep workers, reads and sends together), as "
          "reported to smartoff clients; 0 = detect from the CPU affinity and a cgroup CPU "
          "quota. Default 0.");
ABSL_FLAG(int64_t, max_pixels, 100'000'000,
          "Images whose header claims more pixels are rejected. Default 100000000.");
ABSL_FLAG(int64_t, max_decoder_memory_bytes, int64_t{256} << 20,
          "Memory one JPEG decode may use (libjpeg's working memory; a progressive image needs "
          "about 3 to 6 bytes per pixel). A larger decode fails its sample. Default 268435456 "
          "(256 MiB).");
ABSL_FLAG(int, max_progressive_scans, 256,
          "Scans a progressive JPEG may have (encoders write about 10; each scan is a pass "
          "over the whole image). Default 256.");
ABSL_FLAG(int64_t, max_scan_samples, 2'500'000'000,
          "Work one JPEG decode may do over all its scans, in samples (64 per 8x8 block of each "
          "component in each scan); bounds the CPU time of a progressive file with many scans. "
          "A usual progressive image of P pixels needs about 8 P. Default 2500000000.");
ABSL_FLAG(bool, lenient_jpeg, false,
          "Accept JPEGs that libjpeg decodes with corrupt-data warnings (premature end of data "
          "segment, extraneous bytes, bad Huffman code); by default such a sample fails. A "
          "premature end of file fails either way. Default false.");
ABSL_FLAG(int64_t, max_file_bytes, int64_t{64} << 20,
          "Largest sample file read; a larger one fails its sample before it is read. At most "
          "1 GiB. Default 67108864 (64 MiB).");
ABSL_FLAG(std::string, follow_symlinks, "inside",
          "Which symbolic links in the dataset are followed: 'inside' (only those whose target "
          "lies inside the dataset root; others are skipped and refused) or 'all'. Default "
          "inside.");
ABSL_FLAG(absl::Duration, stats_interval, absl::Seconds(10),
          "Period of the throughput log line while serving; 0 disables it. Default 10s.");
ABSL_FLAG(bool, evict_cache, false,
          "Drop the dataset's files from the page cache before serving, so that an experiment "
          "starts cold (posix_fadvise DONTNEED; sophon-cache reports residency). Default false.");
ABSL_FLAG(std::string, log_level, "info", "trace, debug, info, warn, error. Default info.");

namespace {

// Which flag sets each option whose errors the library reports by name.
const sophon::FlagNames kFlagNames = {
    {"StorageServerOptions.data_dir", "--data"},
    {"StorageServerOptions.port", "--port"},
    {"ServiceOptions.prep_workers", "--prep-workers"},
    {"ServiceOptions.max_inflight_per_stream", "--max-inflight-per-stream"},
    {"ServiceOptions.cpu_limit", "--cpu-limit"},
    {"ServiceOptions.limits.max_pixels", "--max-pixels"},
    {"DecodeLimits.max_pixels", "--max-pixels"},
    {"DecodeLimits.max_memory_bytes", "--max-decoder-memory-bytes"},
    {"DecodeLimits.max_scans", "--max-progressive-scans"},
    {"DecodeLimits.max_scan_samples", "--max-scan-samples"},
    {"DecodeLimits.lenient", "--lenient-jpeg"},
    {"ImageFolderOptions.max_file_bytes", "--max-file-bytes"},
    {"ImageFolderOptions.follow_symlinks", "--follow-symlinks"},
};

sigset_t BlockTerminationSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

}  // namespace

int main(int argc, char** argv) {
  sophon::ConfigureAllocatorForLargeBuffers();
  sophon::InitUsage(
      "Sophon storage node.\nUsage: sophon-server --data=DIR [--port=50051] "
      "[--prep-workers=N]");
  sophon::ArgvHolder args(argc, argv);  // accepts --prep-workers and --prep_workers
  absl::ParseCommandLine(args.argc(), args.argv());
  spdlog::set_level(spdlog::level::from_str(absl::GetFlag(FLAGS_log_level)));
  // Threads started below inherit the blocked mask; main waits for a signal.
  const sigset_t signals = BlockTerminationSignals();

  sophon::StorageServerOptions options;
  options.data_dir = absl::GetFlag(FLAGS_data);
  options.host = absl::GetFlag(FLAGS_host);
  options.port = absl::GetFlag(FLAGS_port);
  options.service.prep_workers = absl::GetFlag(FLAGS_prep_workers);
  options.service.max_inflight_per_stream = absl::GetFlag(FLAGS_max_inflight_per_stream);
  options.service.cpu_limit = absl::GetFlag(FLAGS_cpu_limit);
  options.service.limits.max_pixels = absl::GetFlag(FLAGS_max_pixels);
  options.service.limits.max_memory_bytes = absl::GetFlag(FLAGS_max_decoder_memory_bytes);
  options.service.limits.max_scans = absl::GetFlag(FLAGS_max_progressive_scans);
  options.service.limits.max_scan_samples = absl::GetFlag(FLAGS_max_scan_samples);
  options.service.limits.lenient = absl::GetFlag(FLAGS_lenient_jpeg);
  options.source.max_file_bytes = absl::GetFlag(FLAGS_max_file_bytes);
  absl::StatusOr<sophon::FollowSymlinks> follow =
      sophon::ParseFollowSymlinks(absl::GetFlag(FLAGS_follow_symlinks));
  if (!follow.ok()) return sophon::FailProgram("sophon-server", follow.status(), kFlagNames);
  options.source.follow_symlinks = *follow;
  options.stats_interval = absl::GetFlag(FLAGS_stats_interval);

  absl::StatusOr<std::unique_ptr<sophon::StorageServer>> server =
      sophon::StorageServer::Start(options);
  if (!server.ok()) return sophon::FailProgram("sophon-server", server.status(), kFlagNames);
  if (absl::GetFlag(FLAGS_evict_cache)) {
    absl::StatusOr<sophon::CacheResidency> residency =
        sophon::EvictFromPageCache(sophon::DatasetFilePaths((*server)->source()));
    if (!residency.ok()) {
      std::fprintf(stderr, "sophon-server: --evict-cache: %s\n",
                   std::string(residency.status().message()).c_str());
      return 1;
    }
    spdlog::info("evicted the dataset from the page cache: {}",
                 sophon::FormatResidency(*residency));
  }
  // Print the port for scripts that start us with --port=0.
  std::printf("listening on %s\n", (*server)->address().c_str());
  std::fflush(stdout);
  int sig = 0;
  sigwait(&signals, &sig);
  spdlog::info("signal {}: shutting down", sig);
  (*server)->Shutdown();
  return 0;
}
