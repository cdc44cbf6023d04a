// sophon-bench-manifest: connects to storage servers as sophon-train does
// (ServerSet::Connect: every server's manifest, then the global manifest) and
// prints what that cost on this side as one JSON line: wall time, resident
// memory before and after (and the peak), and the TCP bytes its connections
// received and sent. tools/bench/manifest_scale.sh runs it against old and
// new servers on a large dataset.
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/cli/job_flags.h"
#include "client/loader/server_set.h"
#include "sophon/base/process_status.h"
#include "sophon/cli/cli.h"

ABSL_FLAG(absl::Duration, rpc_timeout, absl::Seconds(300),
          "Deadline of each manifest call (a server before paged manifests sends the whole "
          "manifest in one reply). Default 300s.");

namespace {

struct TcpBytes {
  uint64_t received = 0;
  uint64_t sent = 0;  // acknowledged by the peer
};

// The TCP payload bytes of every socket this process has open (TCP_INFO):
// after Connect, the gRPC connections to the servers.
TcpBytes OpenTcpBytes() {
  TcpBytes total;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    const int fd = std::atoi(entry.path().filename().c_str());
    tcp_info info{};
    socklen_t len = sizeof(info);
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) continue;
    total.received += info.tcpi_bytes_received;
    total.sent += info.tcpi_bytes_acked;
  }
  return total;
}

}  // namespace

int main(int argc, char** argv) {
  sophon::ParseProgramFlags(
      argc, argv,
      "Connects to storage servers as sophon-train does and prints the manifest's cost.\n"
      "Usage: sophon-bench-manifest --server=HOST:PORT[,HOST:PORT...]");
  // The servers and the transport to them, as every training-node program takes them.
  absl::StatusOr<sophon::ServersSpec> spec = sophon::ServersSpecFromFlags("");
  absl::Status valid = spec.ok() ? spec->Validate() : spec.status();
  if (!valid.ok()) return sophon::FailProgram("sophon-bench-manifest", valid, sophon::JobFlagNames());
  const std::vector<std::string>& servers = spec->addresses;
  std::vector<sophon::ClientOptions> options = spec->Clients();
  for (sophon::ClientOptions& o : options) o.rpc_timeout = absl::GetFlag(FLAGS_rpc_timeout);
  const uint64_t rss_before = sophon::ResidentBytes();
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<sophon::ServerSet>> set = sophon::ServerSet::Connect(options);
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  if (!set.ok()) {
    std::fprintf(stderr, "sophon-bench-manifest: %s\n", set.status().ToString().c_str());
    return 1;
  }
  const uint64_t rss_after = sophon::ResidentBytes();
  absl::StatusOr<sophon::ProcessStatus> status = sophon::ReadProcessStatus();
  const TcpBytes tcp = OpenTcpBytes();
  const sophon::GlobalManifest& m = (*set)->manifest();
  std::printf(
      "{\"servers\": %zu, \"samples\": %llu, \"classes\": %zu, \"fingerprint\": \"%016llx\", "
      "\"connect_seconds\": %.3f, \"rss_before_bytes\": %llu, \"rss_after_bytes\": %llu, "
      "\"rss_growth_bytes\": %lld, \"peak_rss_bytes\": %llu, \"tcp_bytes_received\": %llu, "
      "\"tcp_bytes_sent\": %llu}\n",
      servers.size(), static_cast<unsigned long long>(m.num_samples()), m.class_names().size(),
      static_cast<unsigned long long>(m.fingerprint()), seconds,
      static_cast<unsigned long long>(rss_before), static_cast<unsigned long long>(rss_after),
      static_cast<long long>(rss_after) - static_cast<long long>(rss_before),
      static_cast<unsigned long long>(status.ok() ? status->peak_rss_bytes : 0),
      static_cast<unsigned long long>(tcp.received), static_cast<unsigned long long>(tcp.sent));
  return 0;
}
