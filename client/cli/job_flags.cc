#include "client/cli/job_flags.h"

#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/loader/server_list.h"

ABSL_FLAG(std::string, server, "",
          "Storage server(s) HOST:PORT, comma-separated. Servers with the same dataset "
          "fingerprint are replicas (any of them serves any of its samples); servers with "
          "different ones hold shards, whose union is the dataset (the layout is printed at "
          "start). Default: 127.0.0.1:50051 for sophon-train; sophon-infer needs this, "
          "--servers-file or --data.");
ABSL_FLAG(std::string, servers_file, "",
          "File listing the storage servers, one HOST:PORT a line ('#' comments); replaces "
          "--server. Default none.");
ABSL_FLAG(absl::Duration, connect_timeout, absl::Seconds(30),
          "How long to keep retrying a storage server, with exponential backoff and jitter: "
          "while it is unreachable at start, after it went away mid-epoch, and while it "
          "refuses the fetch stream because it is full (its --max-streams or "
          "--max-streams-per-peer). Default 30s.");
ABSL_FLAG(std::string, credentials, "auto",
          "Transport security: insecure (plaintext), tls, or auto (tls when any --tls-* flag is "
          "given, else insecure). --credentials=tls alone checks the server against the "
          "system's CA roots. Default auto.");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA certificate(s) the server's certificate must be signed by; implies TLS. "
          "Default none (the system's roots when TLS is on).");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM client certificate for a server that requires one (mutual TLS); with --tls-key. "
          "Default none.");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls-cert (unencrypted). Default none.");
ABSL_FLAG(std::string, tls_server_name, "",
          "Name to check in the server's certificate instead of the host of --server (e.g. when "
          "connecting by IP address to a certificate that names a host). Default: the host.");
ABSL_FLAG(std::string, auth_token_file, "",
          "File holding the bearer token the server requires (its --auth-token-file); sent on "
          "every call, over TLS only. Default none.");
ABSL_FLAG(int, workers, 2, "Local prep threads that finish each sample's ops. Default 2.");
ABSL_FLAG(int, prefetch_batches, 3,
          "Batches requested ahead of the consumer, P. Bounds the loader's memory: up to 2P+1 "
          "image buffers of batch*12*S^2 bytes (P requested, 1 being set up, up to P kept for "
          "reuse; P+2 in training, which hands each batch back), plus the received payloads of "
          "the P requested batches waiting for --workers (per sample 12*S^2 bytes with alloff, "
          "3*S^2 with resizeoff, the file's size with nooff). Default 3.");
ABSL_FLAG(int, crop_size, 224,
          "Side S of the crop the model sees (sophon-train: RandomResizedCrop's output, or the "
          "centre crop with --augment=none; sophon-infer: the centre crop). Default 224.");
ABSL_FLAG(bool, lenient_jpeg, false,
          "Accept JPEGs that libjpeg decodes with corrupt-data warnings when this node decodes "
          "(samples fetched at the raw stage); by default such a sample fails, as on a server "
          "without --lenient-jpeg. Must match the server's --lenient-jpeg (it says which in "
          "its manifest), or the run refuses to start. Default false.");
ABSL_FLAG(int64_t, local_cache_bytes, 0,
          "Keep up to this many bytes of whole sample files on this node (each file's size plus "
          "256 bytes of bookkeeping), filled from samples that arrive whole; a held sample is "
          "not fetched again but prepared by this node's --workers. 0 = off. Default 0.");
ABSL_FLAG(std::string, local_cache_policy, "noevict",
          "What --local-cache-bytes keeps: noevict (the first files that fit, never evicted: "
          "under a random order every later epoch hits capacity/dataset of its samples) or lru "
          "(evicts the least recently used). Default noevict.");
ABSL_FLAG(std::string, local_cache_dir, "",
          "A folder on this node's local disk that keeps whole sample files across runs (a "
          "folder per dataset fingerprint: another dataset never reads them), shared by every "
          "process of the node that names it (ranks, Python loaders): a restarted or later job "
          "starts warm. Needs --local-cache-dir-bytes. Default: none.");
ABSL_FLAG(int64_t, local_cache_dir_bytes, 0,
          "What --local-cache-dir may hold, every dataset's folder together, in bytes (each "
          "file plus a 40-byte header): a dataset that needs room reclaims the folders of those "
          "opened longest ago that no process uses; once full nothing more is written, and a "
          "write that fails (a full disk) stops the filling. Default 0.");
ABSL_FLAG(std::string, profile_folder, "",
          "smartoff: where this dataset's profile (sample_profile.csv) is looked up and, "
          "without one, written. Default profiles/<dataset>/.");
ABSL_FLAG(std::string, net_bw, "auto",
          "smartoff: network bandwidth in Mbit/s, or auto to measure it by fetching raw samples. "
          "Default auto.");

namespace sophon {

bool ServerFlagsGiven() {
  return !absl::GetFlag(FLAGS_server).empty() || !absl::GetFlag(FLAGS_servers_file).empty();
}

absl::StatusOr<ServersSpec> ServersSpecFromFlags(absl::string_view default_server) {
  ServersSpec spec;
  const std::string file = absl::GetFlag(FLAGS_servers_file);
  std::string list = absl::GetFlag(FLAGS_server);
  if (!file.empty() && !list.empty()) {
    return absl::InvalidArgumentError("give one of --server and --servers-file");
  }
  if (file.empty() && list.empty()) {
    if (default_server.empty()) {
      return absl::InvalidArgumentError("give --server=HOST:PORT[,...] or --servers-file=FILE");
    }
    list = std::string(default_server);
  }
  absl::StatusOr<std::vector<std::string>> addresses =
      file.empty() ? ParseServerList(list) : ReadServersFile(file);
  if (!addresses.ok()) {
    return FlagError(file.empty() ? "--server" : "--servers-file", addresses.status());
  }
  spec.addresses = *std::move(addresses);
  spec.connect_timeout = absl::GetFlag(FLAGS_connect_timeout);
  CredentialsOptions& c = spec.credentials;
  c.kind = absl::GetFlag(FLAGS_credentials);
  c.tls_ca = absl::GetFlag(FLAGS_tls_ca);
  c.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  c.tls_key = absl::GetFlag(FLAGS_tls_key);
  c.tls_server_name = absl::GetFlag(FLAGS_tls_server_name);
  c.auth_token_file = absl::GetFlag(FLAGS_auth_token_file);
  return spec;
}

void LoaderFlagsInto(LoaderOptions* loader) {
  loader->workers = absl::GetFlag(FLAGS_workers);
  loader->prefetch_batches = absl::GetFlag(FLAGS_prefetch_batches);
  loader->pipeline.augment.crop_size = absl::GetFlag(FLAGS_crop_size);
  loader->pipeline.limits.lenient = absl::GetFlag(FLAGS_lenient_jpeg);
}

absl::StatusOr<LocalCacheOptions> LocalCacheFromFlags() {
  LocalCacheOptions cache;
  cache.memory_bytes = absl::GetFlag(FLAGS_local_cache_bytes);
  absl::StatusOr<CachePolicy> policy = ParseCachePolicy(absl::GetFlag(FLAGS_local_cache_policy));
  if (!policy.ok()) return FlagError("--local-cache-policy", policy.status());
  cache.policy = *policy;
  cache.dir = absl::GetFlag(FLAGS_local_cache_dir);
  cache.dir_bytes = absl::GetFlag(FLAGS_local_cache_dir_bytes);
  return cache;
}

absl::Status SmartoffFlagsInto(SmartoffOptions* smartoff) {
  smartoff->profile_folder = absl::GetFlag(FLAGS_profile_folder);
  const std::string net_bw = absl::GetFlag(FLAGS_net_bw);
  if (net_bw != "auto" &&
      (!absl::SimpleAtod(net_bw, &smartoff->net_bw_mbit) || smartoff->net_bw_mbit <= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--net-bw must be a positive number of Mbit/s or auto, got '", net_bw, "'"));
  }
  return absl::OkStatus();
}

const FlagNames& JobFlagNames() {
  static const FlagNames* const names = new FlagNames{
      {"ServersSpec.addresses", "--server"},
      {"ClientOptions.address", "--server"},
      {"ClientOptions.connect_timeout", "--connect-timeout"},
      {"CredentialsOptions.kind", "--credentials"},
      {"CredentialsOptions.tls_ca", "--tls-ca"},
      {"CredentialsOptions.tls_cert", "--tls-cert"},
      {"CredentialsOptions.tls_key", "--tls-key"},
      {"CredentialsOptions.tls_server_name", "--tls-server-name"},
      {"CredentialsOptions.auth_token_file", "--auth-token-file"},
      {"LoaderOptions.workers", "--workers"},
      {"LoaderOptions.prefetch_batches", "--prefetch-batches"},
      {"LoaderOptions.pipeline.limits.lenient", "--lenient-jpeg"},
      {"LocalCacheOptions.memory_bytes", "--local-cache-bytes"},
      {"LocalCacheOptions.dir_bytes", "--local-cache-dir-bytes"},
      {"LocalCacheOptions.dir", "--local-cache-dir"},
      {"SmartoffOptions.net_bw_mbit", "--net-bw"},
      {"SmartoffOptions.profile_folder", "--profile-folder"},
      {"Resources.net_bytes_per_s", "--net-bw"},
      {"Resources.local_cpus", "--workers"},
  };
  return *names;
}

}  // namespace sophon
