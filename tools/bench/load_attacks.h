// The attacks sophon-bench-load runs beside its trainers, each on a thread of
// its own over raw HTTP/2 connections (h2_raw.h), from loopback addresses of
// their own (127.0.0.2, ...: the server sees another client than the
// trainers at 127.0.0.1) unless told to share 127.0.0.1:
// - hog: streams that ask for large samples and never read (no window granted);
// - rotating: the same, re-opened on a new connection every rotate_every;
// - halfsent: Fetch streams that announce a large request message and send
//   all of it but its last byte, then hold;
// - halfunary: the same against GetStats (unary);
// - unreadunary: many GetStats calls whose answers are never read (a receive
//   window of 0: the server can send headers but no message);
// - slots: streams that send only their headers;
// - growfile: grows a sample file after the server started, then one stream
//   asks for it many times (RAW stage) and never reads;
// - churn: opens and ends streams as fast as it can.
// Every attack is bounded in count and time and ends by itself (Stop ends it
// sooner); connections close at its end.
#ifndef SOPHON_TOOLS_BENCH_LOAD_ATTACKS_H_
#define SOPHON_TOOLS_BENCH_LOAD_ATTACKS_H_

#include <cstdint>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "client/loader/server_manifest.h"
#include "sophon/ops/stage.h"
#include "sophon/v1/sophon.pb.h"

namespace sophon {

enum class AttackKind { kNone, kHog, kRotating, kHalfSent, kHalfUnary, kUnreadUnary, kSlots,
                        kGrowFile, kChurn };

// "none", "hog", "rotating", "halfsent", "halfunary", "unreadunary", "slots",
// "growfile", "churn".
std::string AttackName(AttackKind kind);
absl::StatusOr<AttackKind> ParseAttackKind(const std::string& name);

struct AttackOptions {
  AttackKind kind = AttackKind::kNone;
  std::string host = "127.0.0.1";  // the server
  int port = 0;
  absl::Duration time = absl::Seconds(60);  // the attack ends by itself after this
  // Connections go from 127.0.0.2 .. 127.0.0.(1 + sources) in turn; 0: from
  // 127.0.0.1 like the trainers; -1: the attack's default (16 for slots,
  // else 1).
  int sources = -1;
  int streams = 0;      // 0: the attack's default (see DefaultStreams)
  int connections = 0;  // 0: the attack's default (see DefaultConnections)
  // halfsent, halfunary: the announced size of the request message.
  int64_t message_bytes = 2'000'000;
  // hog, rotating: what each stream asks for.
  Stage stage = Stage::kTensor;
  int crop_size = 1024;
  int samples_per_stream = 1024;
  int ids_per_request = 32;
  absl::Duration rotate_every = absl::Seconds(20);  // rotating
  // Our HTTP/2 stream receive window; -1: the attack's default (0 for
  // unreadunary, else 65535).
  int64_t receive_window = -1;
  // growfile: a sample file of the server's dataset (absolute path), grown by
  // appending to grow_to_bytes, then requested grow_requests times. Its id
  // comes from listing its dataset (the folder two levels up) as a server
  // with the default ImageFolderOptions does: manifests carry no paths.
  std::string grow_file;
  int64_t grow_to_bytes = int64_t{60} << 20;
  int grow_requests = 40;
  // churn: streams one connection has open at once, at most.
  int churn_inflight = 64;

  absl::Status Validate() const;  // names the field: "AttackOptions.streams ..."
};

int DefaultStreams(AttackKind kind);
int DefaultConnections(AttackKind kind);

struct AttackResult {
  std::string name;
  std::vector<std::string> sources;  // client addresses the server saw
  double seconds = 0;                // how long it ran
  int connections = 0;               // made
  int connections_failed = 0;        // that could not be made
  int connections_lost = 0;          // closed by the server (or broken)
  int goaways = 0;                   // connections the server sent GOAWAY on
  uint64_t streams_started = 0;
  uint64_t streams_reset_by_server = 0;  // RST_STREAM
  uint64_t streams_ended_by_server = 0;  // the server's trailers
  uint64_t streams_open_at_end = 0;      // still open when the attack ended
  uint64_t request_bytes_sent = 0;       // DATA payload sent
  uint64_t response_bytes_received = 0;  // DATA payload the server sent
  std::map<uint32_t, uint64_t> resets_by_code;  // HTTP/2 error code -> streams
  // What the attack made the server take on, by name ("bytes_in_unfinished_messages",
  // "sample_bytes_asked", "calls_sent", "rotations", "file_bytes", ...).
  std::map<std::string, double> figures;
  std::string first_error;  // a connection error, for the report
  // One line for the table: what it achieved.
  std::string Brief() const;
};

// One attack on a thread of its own.
class Attack {
 public:
  // `manifest`: the server's (sample count and sizes); outlives the attack.
  Attack(const AttackOptions& options, const ServerManifest* manifest);
  ~Attack();  // stops and joins
  Attack(const Attack&) = delete;
  Attack& operator=(const Attack&) = delete;

  void Start();
  // Ends the attack if it still runs (closing its connections) and joins it.
  void Stop();
  // Waits for the attack to end by itself (its count or its time) and joins it.
  void Join();
  // Waits up to `timeout` for the attack to have started all its streams
  // (or to have ended); true if it did.
  bool WaitStarted(absl::Duration timeout);
  AttackResult result() const;  // after Stop or Join

 private:
  void Run();

  const AttackOptions options_;
  const ServerManifest* const manifest_;
  absl::Notification stop_;
  absl::Notification started_;
  std::thread thread_;
  mutable absl::Mutex mu_;
  AttackResult result_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sophon

#endif  // SOPHON_TOOLS_BENCH_LOAD_ATTACKS_H_
