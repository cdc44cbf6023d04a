// sophon-server: serves a dataset to training nodes and runs as much of each
// sample's preprocessing as they ask for, on --prep-workers threads.
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "sophon/base/allocator.h"
#include "sophon/cli/cli.h"
#include "sophon/cli/log_level.h"
#include "absl/flags/usage.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "sophon/data/page_cache.h"
#include "spdlog/spdlog.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "server/cli/load_backbone.h"
#include "server/storage_server.h"

ABSL_FLAG(std::string, data, "", "ImageFolder dataset root (DIR/CLASS/*.jpg). Required.");
ABSL_FLAG(std::string, host, "127.0.0.1",
          "Address to listen on. Default 127.0.0.1 (this machine only); 0.0.0.0 for all.");
ABSL_FLAG(int, port, 50051, "Port to listen on; 0 picks a free one. Default 50051.");
ABSL_FLAG(int, prep_workers, 4,
          "Threads that decode and transform samples: the storage node's CPU budget. Default 4.");
ABSL_FLAG(int, max_inflight_per_stream, 128,
          "Samples one stream may have accepted but not yet sent (a client may open several "
          "streams: see --max-streams-per-peer and --max-peer-inflight-bytes). Default 128.");
ABSL_FLAG(int64_t, max_stream_inflight_bytes, int64_t{256} << 20,
          "Bytes of prepared samples one stream may hold before the client takes them (each "
          "sample's output size is reserved when it is admitted). Default 268435456 (256 MiB).");
ABSL_FLAG(int64_t, inflight_budget_bytes, int64_t{1} << 30,
          "Bytes of samples all streams together may have admitted and not yet sent; a stream "
          "over it waits, and waiters are admitted in order, client addresses under their fair "
          "share first. Default 1073741824 (1 GiB).");
ABSL_FLAG(int64_t, max_peer_inflight_bytes, 0,
          "Bytes of samples all the streams of one client address may hold (a backstop behind "
          "the fair shares); 0 = half of --inflight-budget-bytes. Default 0.");
ABSL_FLAG(absl::Duration, write_stall_timeout, absl::Seconds(5),
          "A stream whose client has not taken a response for this long, while other streams "
          "wait for the budget's bytes, is ended so that its bytes go back. Default 5s.");
ABSL_FLAG(int, max_streams, 4096,
          "Open Fetch streams in all. When full, a stream from a client address with fewer "
          "streams ends the oldest stream of the address holding the most; otherwise it is "
          "refused. Default 4096.");
ABSL_FLAG(int64_t, transport_memory_bytes, int64_t{512} << 20,
          "Memory gRPC may use for its own buffers (requests being received, responses being "
          "sent, the state of every call); over it gRPC shrinks its windows, then ends calls. "
          "0 = no quota. Default 536870912 (512 MiB).");
ABSL_FLAG(int, max_calls_per_connection, 100,
          "Concurrent calls (Fetch streams and unary calls) one connection may have open "
          "(HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS). A client's calls over the unary limits wait "
          "in these slots, so this times the connections of a client bounds what it can keep "
          "waiting. Default 100.");
ABSL_FLAG(int, max_unary_calls_per_peer, 8,
          "Unary calls (manifest, pages, paths, stats, health) one client address may have in "
          "progress, counted from before their request is read until their answers are taken; "
          "more wait, unread, for a slot (--unary-wait-timeout); calls wait, not fail, so a "
          "node's ranks that ask more at once are served in turn. Default 8.");
ABSL_FLAG(int, max_unary_calls, 1024,
          "Unary calls in progress from all clients together (each counted in the memory bound "
          "at 16 KiB), shared fairly: an address may hold at most this / (the addresses with "
          "calls + 1), so a share stays free for the next client. Default 1024.");
ABSL_FLAG(int, max_waiting_unary_calls, 16384,
          "Unary calls that may wait for a slot (over --max-unary-calls-per-peer or "
          "--max-unary-calls), unread; one more is answered RESOURCE_EXHAUSTED at once. Waiting "
          "keeps a client that never takes its answers from sending a new call for every "
          "refusal: its connections' call slots stay taken. Each counts 18 KiB in the memory bound. "
          "0 = none wait. Default 16384.");
ABSL_FLAG(absl::Duration, unary_wait_timeout, absl::Seconds(30),
          "How long a unary call may wait for a slot before it is answered RESOURCE_EXHAUSTED "
          "naming the limit it waited on. Default 30s.");
ABSL_FLAG(absl::Duration, unread_connection_timeout, absl::Seconds(5),
          "A connection whose client takes no bytes for this long while the server has bytes "
          "for it is dropped with its calls (TCP_USER_TIMEOUT), so a client that never reads "
          "cannot hold memory or the budget longer. In [1s, 24h]. Default 5s.");
ABSL_FLAG(int64_t, stream_window_bytes, 16 << 10,
          "HTTP/2 receive window of each call before the server reads its request: what a "
          "client can make the server buffer on a call it is not reading. Default 16384.");
ABSL_FLAG(int, max_streams_per_peer, 256,
          "Open Fetch streams from one client address; more are refused. Default 256.");
ABSL_FLAG(int, max_reading_streams_per_peer, 32,
          "Fetch streams of one client address that may have a request read outstanding at "
          "once (a read slot each, kept for the stream's life); the others wait without being "
          "read. gRPC receives all of a request a stream announces once a read is outstanding, "
          "so this bounds what one address can make the server buffer. The slots in all: as "
          "many requests of --max-request-bytes + 4 KiB as a quarter of "
          "--transport-memory-bytes holds (127 at the defaults). A training node needs one per "
          "rank and server it reads from. Default 32.");
ABSL_FLAG(absl::Duration, read_stall_timeout, absl::Seconds(5),
          "A stream holding a read slot that has had no complete request for this long (1s, or "
          "this if shorter, for its first request), while another stream waits for a slot it "
          "could take, is ended; so is a unary call whose request has not arrived whole this "
          "long after the call. Default 5s.");
ABSL_FLAG(absl::Duration, idle_stream_timeout, absl::Minutes(5),
          "A stream that sends no request and takes no response for this long is ended. "
          "Default 5m.");
ABSL_FLAG(int, max_ids_per_request, 4096,
          "Samples one request message may name; a larger message ends its stream. "
          "Default 4096.");
ABSL_FLAG(int64_t, max_request_bytes, int64_t{1} << 20,
          "Encoded size of one Fetch request message (the unary methods have fixed limits of a "
          "few KiB). Default 1048576 (1 MiB).");
ABSL_FLAG(int64_t, manifest_page_bytes, int64_t{4} << 20,
          "Encoded size of one page of the manifest sent to clients (labels and sizes, about 5 "
          "bytes per sample; a client asks for the pages one by one). At least 64, at most 64 "
          "MiB. Default 4194304 (4 MiB).");
ABSL_FLAG(int, max_crop_size, 1024,
          "Largest crop size (output side in pixels) a client may ask for. Default 1024.");
ABSL_FLAG(absl::Duration, memory_release_delay, absl::Seconds(1),
          "Give freed sample memory back to the system once no sample has been in flight for "
          "this long (at most once per 10s); inf = never. Default 1s.");
ABSL_FLAG(absl::Duration, memory_release_busy_interval, absl::Seconds(3),
          "While samples are in flight: every this long, give freed memory back to the "
          "system if 16 MiB or more were freed since the last time (memory an attack or a "
          "burst left while training goes on); inf = only once idle. Default 3s.");
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
ABSL_FLAG(int64_t, pack_buffer_bytes, int64_t{128} << 20,
          "With a pack (--data=PACKDIR): memory for group buffers, the groups being read and "
          "those whose samples are not all read yet (counted in the memory bound). Keep it above "
          "the trainers' --shuffle-window x the group's bytes. Default 128 MiB.");
ABSL_FLAG(int64_t, max_file_bytes, int64_t{64} << 20,
          "Largest sample file read; a larger one fails its sample before it is read. At most "
          "1 GiB. Default 67108864 (64 MiB).");
ABSL_FLAG(std::string, follow_symlinks, "inside",
          "Which symbolic links in the dataset are followed: 'inside' (only those whose target "
          "lies inside the dataset root; others are skipped and refused) or 'all'. Default "
          "inside.");
ABSL_FLAG(absl::Duration, stats_interval, absl::Seconds(10),
          "Period of the throughput log line while serving; 0 disables it. Default 10s.");
ABSL_FLAG(absl::Duration, drain_timeout, absl::Seconds(10),
          "On SIGTERM or SIGINT the server drains before it stops: the health service reports "
          "NOT_SERVING, new streams are refused, and open streams send the samples already "
          "started and end, handing back the rest (trainers ask a replica for them at once). "
          "The process exits within this of the signal, whatever the clients do (a stream "
          "whose client reads nothing is cancelled); a second signal stops at once. "
          "0 = stop at once. Default 10s.");
ABSL_FLAG(bool, evict_cache, false,
          "Drop the dataset's files from the page cache before serving, so that an experiment "
          "starts cold (posix_fadvise DONTNEED; sophon-cache reports residency). Default false.");
ABSL_FLAG(int64_t, cache_bytes, 0,
          "Memory for a cache of raw sample bytes in front of the dataset's files (each entry "
          "costs its bytes and 256 B more); counted in the memory bound. 0 = no cache. "
          "Default 0.");
ABSL_FLAG(std::string, cache_policy, "noevict",
          "What the cache of --cache-bytes keeps: 'noevict' (the first samples that fit, never "
          "evicted, so each epoch hits the same ones) or 'lru' (evicts the least recently "
          "read). Default noevict.");
ABSL_FLAG(int, metrics_port, -1,
          "Port of the Prometheus endpoint (http://HOST:PORT/metrics); -1 = off, 0 picks a free "
          "one. Default -1.");
ABSL_FLAG(std::string, metrics_host, "127.0.0.1",
          "Address of the Prometheus endpoint: plain HTTP without authentication. Default "
          "127.0.0.1 (this machine only).");
ABSL_FLAG(std::string, credentials, "auto",
          "Transport security: insecure (plaintext, no authentication), tls, or auto (tls when "
          "--tls-cert, --tls-key or --tls-client-ca is given, else insecure). Default auto.");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate (chain) this server presents; with --tls-key, serves over TLS. "
          "Default none (plaintext).");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls-cert (unencrypted). Default none.");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA certificate(s): when given, every client must present a certificate signed by "
          "one of them (mutual TLS). Needs --tls-cert. Default none (no client certificates).");
ABSL_FLAG(std::string, auth_token_file, "",
          "File holding a bearer token that every call must carry (clients give the same file to "
          "their --auth-token-file). Needs TLS. Default none.");
ABSL_FLAG(std::string, backbone, "",
          "Checkpoint written by sophon-train --save whose network, frozen (evaluation mode, no "
          "gradients), takes samples to the features stage: the pooled activations in front of "
          "its classifier, sent as fp16 (resnet18: 512, resnet50: 2048, alexnet: 9216, tinycnn: "
          "128 values), and whose head takes them on to the predictions stage (the top k "
          "classes, for sophon-infer). Its forward passes run on the prep workers. Default none "
          "(a sample asked for at the features or predictions stage fails).");
ABSL_FLAG(int, backbone_threads, 0,
          "Intra-op threads of each forward pass of --backbone (LibTorch's); 0 = LibTorch's "
          "default (the machine's cores). Default 0.");

namespace {

// Which flag sets each option whose errors the library reports by name.
const sophon::FlagNames kFlagNames = {
    {"StorageServerOptions.data_dir", "--data"},
    {"StorageServerOptions.port", "--port"},
    {"StorageServerOptions.drain_timeout", "--drain-timeout"},
    {"PackSourceOptions.follow_symlinks", "--follow-symlinks"},
    {"ServiceOptions.max_unary_calls_per_peer", "--max-unary-calls-per-peer"},
    {"ServiceOptions.max_unary_calls", "--max-unary-calls"},
    {"ServiceOptions.max_waiting_unary_calls", "--max-waiting-unary-calls"},
    {"ServiceOptions.unary_wait_timeout", "--unary-wait-timeout"},
    {"ServiceOptions.unread_connection_timeout", "--unread-connection-timeout"},
    {"ServiceOptions.stream_window_bytes", "--stream-window-bytes"},
    {"ServiceOptions.prep_workers", "--prep-workers"},
    {"ServiceOptions.max_inflight_per_stream", "--max-inflight-per-stream"},
    {"ServiceOptions.cpu_limit", "--cpu-limit"},
    {"ServiceOptions.max_stream_inflight_bytes", "--max-stream-inflight-bytes"},
    {"ServiceOptions.inflight_budget_bytes", "--inflight-budget-bytes"},
    {"ServiceOptions.max_peer_inflight_bytes", "--max-peer-inflight-bytes"},
    {"ServiceOptions.write_stall_timeout", "--write-stall-timeout"},
    {"ServiceOptions.transport_memory_bytes", "--transport-memory-bytes"},
    {"ServiceOptions.max_calls_per_connection", "--max-calls-per-connection"},
    {"ServiceOptions.max_streams", "--max-streams"},
    {"ServiceOptions.max_streams_per_peer", "--max-streams-per-peer"},
    {"ServiceOptions.max_reading_streams_per_peer", "--max-reading-streams-per-peer"},
    {"ServiceOptions.read_stall_timeout", "--read-stall-timeout"},
    {"ServiceOptions.idle_stream_timeout", "--idle-stream-timeout"},
    {"ServiceOptions.max_ids_per_request", "--max-ids-per-request"},
    {"ServiceOptions.max_request_bytes", "--max-request-bytes"},
    {"ServiceOptions.manifest_page_bytes", "--manifest-page-bytes"},
    {"ServiceOptions.max_crop_size", "--max-crop-size"},
    {"ServiceOptions.memory_release.idle_delay", "--memory-release-delay"},
    {"ServiceOptions.memory_release.busy_interval", "--memory-release-busy-interval"},
    {"CacheOptions.bytes", "--cache-bytes"},
    {"CacheOptions.policy", "--cache-policy"},
    {"StorageServerOptions.host", "--host"},
    {"ServiceOptions.limits.max_pixels", "--max-pixels"},
    {"MetricsOptions.port", "--metrics-port"},
    {"MetricsOptions.host", "--metrics-host"},
    {"CredentialsOptions.kind", "--credentials"},
    {"CredentialsOptions.tls_cert", "--tls-cert"},
    {"CredentialsOptions.tls_key", "--tls-key"},
    {"CredentialsOptions.tls_client_ca", "--tls-client-ca"},
    {"CredentialsOptions.auth_token_file", "--auth-token-file"},
    {"DecodeLimits.max_pixels", "--max-pixels"},
    {"DecodeLimits.max_memory_bytes", "--max-decoder-memory-bytes"},
    {"DecodeLimits.max_scans", "--max-progressive-scans"},
    {"DecodeLimits.max_scan_samples", "--max-scan-samples"},
    {"DecodeLimits.lenient", "--lenient-jpeg"},
    {"ImageFolderOptions.max_file_bytes", "--max-file-bytes"},
    {"PackSourceOptions.max_sample_bytes", "--max-file-bytes"},
    {"PackSourceOptions.group_buffer_bytes", "--pack-buffer-bytes"},
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

// The server's options from the flags (and --backbone loaded).
absl::StatusOr<sophon::StorageServerOptions> OptionsFromFlags() {
  sophon::StorageServerOptions options;
  options.data_dir = absl::GetFlag(FLAGS_data);
  options.host = absl::GetFlag(FLAGS_host);
  options.port = absl::GetFlag(FLAGS_port);
  options.service.prep_workers = absl::GetFlag(FLAGS_prep_workers);
  options.service.max_inflight_per_stream = absl::GetFlag(FLAGS_max_inflight_per_stream);
  options.service.cpu_limit = absl::GetFlag(FLAGS_cpu_limit);
  options.service.max_stream_inflight_bytes = absl::GetFlag(FLAGS_max_stream_inflight_bytes);
  options.service.inflight_budget_bytes = absl::GetFlag(FLAGS_inflight_budget_bytes);
  options.service.max_peer_inflight_bytes = absl::GetFlag(FLAGS_max_peer_inflight_bytes);
  options.service.write_stall_timeout = absl::GetFlag(FLAGS_write_stall_timeout);
  options.service.transport_memory_bytes = absl::GetFlag(FLAGS_transport_memory_bytes);
  options.service.max_calls_per_connection = absl::GetFlag(FLAGS_max_calls_per_connection);
  options.service.max_streams = absl::GetFlag(FLAGS_max_streams);
  options.service.max_unary_calls_per_peer = absl::GetFlag(FLAGS_max_unary_calls_per_peer);
  options.service.max_unary_calls = absl::GetFlag(FLAGS_max_unary_calls);
  options.service.max_waiting_unary_calls = absl::GetFlag(FLAGS_max_waiting_unary_calls);
  options.service.unary_wait_timeout = absl::GetFlag(FLAGS_unary_wait_timeout);
  options.service.unread_connection_timeout = absl::GetFlag(FLAGS_unread_connection_timeout);
  options.service.stream_window_bytes = absl::GetFlag(FLAGS_stream_window_bytes);
  options.service.max_streams_per_peer = absl::GetFlag(FLAGS_max_streams_per_peer);
  options.service.max_reading_streams_per_peer =
      absl::GetFlag(FLAGS_max_reading_streams_per_peer);
  options.service.read_stall_timeout = absl::GetFlag(FLAGS_read_stall_timeout);
  options.service.idle_stream_timeout = absl::GetFlag(FLAGS_idle_stream_timeout);
  options.service.max_ids_per_request = absl::GetFlag(FLAGS_max_ids_per_request);
  options.service.max_request_bytes = absl::GetFlag(FLAGS_max_request_bytes);
  options.service.manifest_page_bytes = absl::GetFlag(FLAGS_manifest_page_bytes);
  options.service.max_crop_size = absl::GetFlag(FLAGS_max_crop_size);
  options.service.memory_release.idle_delay = absl::GetFlag(FLAGS_memory_release_delay);
  options.service.memory_release.busy_interval =
      absl::GetFlag(FLAGS_memory_release_busy_interval);
  options.service.limits.max_pixels = absl::GetFlag(FLAGS_max_pixels);
  options.service.limits.max_memory_bytes = absl::GetFlag(FLAGS_max_decoder_memory_bytes);
  options.service.limits.max_scans = absl::GetFlag(FLAGS_max_progressive_scans);
  options.service.limits.max_scan_samples = absl::GetFlag(FLAGS_max_scan_samples);
  options.service.limits.lenient = absl::GetFlag(FLAGS_lenient_jpeg);
  options.source.max_file_bytes = absl::GetFlag(FLAGS_max_file_bytes);
  options.pack.group_buffer_bytes = absl::GetFlag(FLAGS_pack_buffer_bytes);
  absl::StatusOr<sophon::FollowSymlinks> follow =
      sophon::ParseFollowSymlinks(absl::GetFlag(FLAGS_follow_symlinks));
  if (!follow.ok()) return follow.status();
  options.source.follow_symlinks = *follow;
  options.service.cache.bytes = absl::GetFlag(FLAGS_cache_bytes);
  absl::StatusOr<sophon::CachePolicy> cache_policy =
      sophon::ParseCachePolicy(absl::GetFlag(FLAGS_cache_policy));
  if (!cache_policy.ok()) return cache_policy.status();
  options.service.cache.policy = *cache_policy;
  options.stats_interval = absl::GetFlag(FLAGS_stats_interval);
  options.drain_timeout = absl::GetFlag(FLAGS_drain_timeout);
  options.metrics.port = absl::GetFlag(FLAGS_metrics_port);
  options.metrics.host = absl::GetFlag(FLAGS_metrics_host);
  sophon::CredentialsOptions& credentials = options.credentials;
  credentials.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  credentials.tls_key = absl::GetFlag(FLAGS_tls_key);
  credentials.tls_client_ca = absl::GetFlag(FLAGS_tls_client_ca);
  credentials.auth_token_file = absl::GetFlag(FLAGS_auth_token_file);
  credentials.kind = absl::GetFlag(FLAGS_credentials) == "auto"
                         ? sophon::DefaultCredentialsKind(credentials)
                         : absl::GetFlag(FLAGS_credentials);

  if (absl::GetFlag(FLAGS_backbone_threads) < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--backbone-threads must be >= 0 (got ",
                                                   absl::GetFlag(FLAGS_backbone_threads), ")"));
  }
  if (!absl::GetFlag(FLAGS_backbone).empty()) {
    absl::StatusOr<std::shared_ptr<const sophon::FeatureExtractor>> backbone =
        sophon::LoadServerBackbone(absl::GetFlag(FLAGS_backbone),
                                   absl::GetFlag(FLAGS_backbone_threads));
    if (!backbone.ok()) return sophon::FlagError("--backbone", backbone.status());
    options.service.backbone = *std::move(backbone);
    spdlog::info("backbone: {}, {} features per sample (fp16)",
                 options.service.backbone->description(),
                 options.service.backbone->feature_size());
  }
  return options;
}

// Warns when the server listens beyond loopback without TLS, or with TLS
// but no client authentication.
void WarnIfExposed(const std::string& host, const sophon::CredentialsOptions& credentials) {
  if (sophon::IsLoopbackHost(host)) return;
  if (credentials.kind == "insecure") {
    spdlog::warn(
        "listening on {} without TLS: traffic and data are unauthenticated and unencrypted; "
        "anyone who can reach this port can read the dataset. Give --tls-cert and --tls-key "
        "(and --tls-client-ca or --auth-token-file to admit only your clients), or listen on "
        "--host=127.0.0.1",
        host);
  } else if (credentials.kind == "tls" && credentials.tls_client_ca.empty() &&
             credentials.auth_token_file.empty()) {
    spdlog::warn(
        "listening on {} with TLS but no client authentication: anyone who can reach this "
        "port can read the dataset. Give --tls-client-ca or --auth-token-file",
        host);
  }
}

// Serves until SIGTERM or SIGINT, then drains (a second signal cuts the
// drain short) and shuts down.
void ServeUntilSignalled(sophon::StorageServer* server, const sigset_t& signals) {
  int sig = 0;
  sigwait(&signals, &sig);
  const absl::Time signalled = absl::Now();
  spdlog::info("signal {} ({}): draining, then shutting down; a second signal stops at once", sig,
               strsignal(sig));
  // The drain runs on its own thread so that a second signal can cut it short.
  absl::Notification drained;
  absl::Duration grace;
  std::thread drainer([&] {
    grace = server->Drain();
    drained.Notify();
  });
  const timespec poll{0, 20 * 1000 * 1000};
  while (!drained.HasBeenNotified()) {
    if (sigtimedwait(&signals, nullptr, &poll) > 0) server->CutDrainShort();
  }
  drainer.join();
  // What is left of --drain-timeout (none after a second signal): calls
  // still open then, such as a stream ended while its client reads nothing,
  // are cancelled rather than waited for.
  server->Shutdown(grace);
  spdlog::info("stopped {:.2f} s after signal {}", absl::ToDoubleSeconds(absl::Now() - signalled),
               sig);
}

}  // namespace

int main(int argc, char** argv) {
  sophon::ConfigureAllocatorForLargeBuffers(sophon::kServerMaxArenas);
  // accepts --prep-workers and --prep_workers
  sophon::ParseProgramFlags(
      argc, argv,
      "Sophon storage node.\nUsage: sophon-server --data=DIR [--port=50051] "
      "[--prep-workers=N]");
  if (absl::Status s = sophon::ApplyLogLevelFlag(); !s.ok()) {
    return sophon::FailProgram("sophon-server", s, {});
  }
  // Threads started below inherit the blocked mask; main waits for a signal.
  const sigset_t signals = BlockTerminationSignals();

  absl::StatusOr<sophon::StorageServerOptions> options = OptionsFromFlags();
  if (!options.ok()) return sophon::FailProgram("sophon-server", options.status(), kFlagNames);
  absl::StatusOr<std::unique_ptr<sophon::StorageServer>> server =
      sophon::StorageServer::Start(*options);
  if (!server.ok()) return sophon::FailProgram("sophon-server", server.status(), kFlagNames);
  WarnIfExposed(options->host, options->credentials);
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
  if ((*server)->metrics_port() > 0) {
    std::printf("metrics on %s:%d\n", options->metrics.host.c_str(), (*server)->metrics_port());
  }
  std::fflush(stdout);
  ServeUntilSignalled(server->get(), signals);
  return 0;
}
