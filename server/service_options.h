// What a storage node's service may spend on its clients: prep threads, and
// the limits that keep one client (or a thousand) from exhausting the node.
// Every limit is in bytes, counts or time an operator can reason about, and
// is enforced before the memory it guards is allocated.
#ifndef SOPHON_SERVER_SERVICE_OPTIONS_H_
#define SOPHON_SERVER_SERVICE_OPTIONS_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "sophon/base/memory_releaser.h"
#include "sophon/data/cached_source.h"
#include "sophon/image/jpeg_codec.h"
#include "sophon/ops/feature_extractor.h"

namespace sophon {

// What gRPC accepts of a request message beyond max_request_bytes (its
// max_receive_message_size, set in StorageServer::Start, one value for every
// method, checked once a message is whole): the service refuses what lies
// between with a message that names its limit. The unary methods have limits
// of their own, far below (server/request_limits.h).
inline constexpr int64_t kGrpcMessageSlackBytes = 4096;
// Read slots take at most 1/kReadSlotQuotaShare of transport_memory_bytes.
inline constexpr int kReadSlotQuotaShare = 4;

struct ServiceOptions {
  int prep_workers = 4;  // threads that decode/transform; >= 1
  // CPUs of time this server may use, as reported to clients for planning;
  // 0 = detected (CPU affinity capped by a cgroup quota).
  double cpu_limit = 0;

  // --- Per stream.
  int max_inflight_per_stream = 128;  // samples accepted but not yet written
  // Bytes of samples one stream may have accepted but not yet written (its
  // output size is reserved when a sample is admitted). A single sample larger
  // than this is refused with RESOURCE_EXHAUSTED.
  int64_t max_stream_inflight_bytes = int64_t{256} << 20;
  // A stream that neither sends a request nor takes a response for this long
  // is ended (RESOURCE_EXHAUSTED); time spent waiting for the server itself
  // (samples being prepared, bytes of the budget) with nothing to send does
  // not count.
  absl::Duration idle_stream_timeout = absl::Minutes(5);

  // A response the client has not taken for this long, while other streams
  // wait for bytes of the budget, ends its stream (RESOURCE_EXHAUSTED) so that
  // its bytes go back; when nobody waits, only idle_stream_timeout applies.
  absl::Duration write_stall_timeout = absl::Seconds(5);

  // --- All streams together.
  // Bytes of samples admitted and not yet written, across all streams; a
  // stream over it waits (stops reading requests) until bytes are released.
  // Waiters are admitted in order, an address under its fair share
  // (inflight_budget_bytes / addresses holding or waiting) first.
  int64_t inflight_budget_bytes = int64_t{1} << 30;
  // Bytes of samples all the streams of one client address may hold: the
  // backstop behind the fair shares. 0 = half of inflight_budget_bytes (but
  // at least max_stream_inflight_bytes).
  int64_t max_peer_inflight_bytes = 0;
  // Open Fetch streams; when full, a stream from an address with fewer
  // streams than the largest holder ends that holder's oldest stream.
  int max_streams = 4096;
  int max_streams_per_peer = 256;   // open Fetch streams from one client address

  // --- The transport (gRPC), below the service's own accounting.
  // Memory gRPC may use for its buffers (requests being received, responses
  // being sent, per-call state); over it gRPC shrinks its windows, then ends
  // calls. 0 = no quota (gRPC's default).
  int64_t transport_memory_bytes = int64_t{512} << 20;
  // Fetch streams of one client address that may have a request read
  // outstanding at once (a read slot each, kept for the stream's life; the
  // others wait, reading nothing, their requests held in their
  // stream_window_bytes). gRPC lets a stream with a read outstanding receive
  // all of a request message it announced, so this bounds what one address
  // can make the server buffer: about this many x the messages it announces
  // (64 MB at 2 MB each). A training node needs one per rank and server it
  // reads from. The server-wide count is ReadingStreams().
  int max_reading_streams_per_peer = 32;
  // A stream holding a read slot whose read has been outstanding this long
  // with no complete request, while another stream waits for a slot it
  // could take, is ended (RESOURCE_EXHAUSTED); FirstRequestTimeout() for a
  // stream that has sent no complete request since it got its slot. A unary
  // call whose request has not arrived whole this long after the call is
  // ended (RESOURCE_EXHAUSTED) whoever waits (server/unary_reactor.h).
  absl::Duration read_stall_timeout = absl::Seconds(5);
  // Concurrent calls (streams and unary calls) on one connection (HTTP/2
  // SETTINGS_MAX_CONCURRENT_STREAMS; RFC 9113 recommends at least 100).
  int max_calls_per_connection = 100;
  // Unary calls (manifest, pages, paths, stats, health Check and Watch) in
  // progress, from the service admitting one (before its request is read)
  // until its answer is taken: per client address and in all. A call over
  // either waits, unread, for a slot (at most stream_window_bytes of its
  // request received), up to unary_wait_timeout, then is answered
  // RESOURCE_EXHAUSTED naming the limit; at most max_waiting_unary_calls
  // wait, one more is refused at once. A client that never takes its answers
  // so finds its connections' call slots (max_calls_per_connection) taken by
  // its waiting calls instead of sending the server a new call for every
  // refusal. The server's cap is shared: an address may hold at most
  // max_unary_calls / (addresses with calls + 1) (unary_calls.h), and at the
  // defaults 128 addresses at their own cap fit in it. A training node makes
  // one at a time per rank.
  int max_unary_calls_per_peer = 8;
  int max_unary_calls = 1024;
  int max_waiting_unary_calls = 16384;
  absl::Duration unary_wait_timeout = absl::Seconds(30);
  // A connection whose client takes no bytes for this long while the server
  // has bytes for it (TCP_USER_TIMEOUT) is dropped, and its calls end: a
  // client that never reads its socket holds its memory at most this long.
  // gRPC clients read their sockets whatever the application does, so only a
  // stopped process or a network outage this long costs a reconnect.
  absl::Duration unread_connection_timeout = absl::Seconds(5);
  // The receive window each stream grants before the service asks to read a
  // message (HTTP/2 initial window; requests are small): what a stream that
  // is not being read can make the server buffer. At least 1 KiB.
  int64_t stream_window_bytes = 16 << 10;

  // --- Per request message.
  int max_ids_per_request = 4096;                 // samples named in one FetchRequest
  // Encoded size of one Fetch request message (each unary method's limit is
  // its own: server/request_limits.h).
  int64_t max_request_bytes = int64_t{1} << 20;
  int max_crop_size = 1024;                       // AugmentConfig.crop_size accepted

  // --- Responses.
  int max_samples_per_message = 16;     // samples batched into one FetchResponse
  int64_t max_message_bytes = 4 << 20;  // payload bytes per FetchResponse (>= 1 sample)
  // Encoded bytes of one manifest page (the first goes with GetManifest's
  // header, the others answer GetManifestPage): a manifest of N samples takes
  // about 5 N / manifest_page_bytes replies. In [64, 64 MiB].
  int64_t manifest_page_bytes = 4 << 20;

  DecodeLimits limits;
  // The cache of raw sample bytes in front of the source (cached_source.h):
  // cache.bytes of memory, counted in the server's memory bound; 0 = off.
  CacheOptions cache;
  // The frozen network that takes samples to FEATURES (sophon-server
  // --backbone); null = none: a sample asked for at FEATURES fails with
  // FAILED_PRECONDITION. Its forward passes run on the prep workers.
  std::shared_ptr<const FeatureExtractor> backbone;
  // When freed sample memory goes back to the system: once the server has
  // had no bytes in flight for memory_release.idle_delay.
  MemoryReleaseOptions memory_release;
  // For tests: runs on the prep worker before each sample (may block, e.g.
  // to hold samples back while the server is shut down). Empty in production.
  std::function<void(uint64_t id)> before_prep;
  // For tests: the clock that idleness and stalls are measured with (the
  // reaper reads it too). Empty in production: absl::Now.
  std::function<absl::Time()> clock;

  // max_peer_inflight_bytes with its default applied.
  int64_t PeerInflightBytes() const;
  // Read slots in all: as many request messages of max_request_bytes + 4 KiB
  // (what gRPC accepts) as a quarter of transport_memory_bytes holds (127 at
  // the defaults), at most max_streams; max_streams without a quota.
  int ReadingStreams() const;
  // max_reading_streams_per_peer, at most ReadingStreams().
  int ReadingStreamsPerPeer() const;
  // The stall limit of a stream that has sent no complete request since it
  // got its read slot: 1 s, or read_stall_timeout if shorter. A stream
  // arriving without a free slot also takes the slot of such a stream at
  // once (see server/read_slots.h).
  absl::Duration FirstRequestTimeout() const;

  // InvalidArgument naming the first field out of range
  // ("ServiceOptions.max_streams must be ...").
  absl::Status Validate() const;
};

}  // namespace sophon

#endif  // SOPHON_SERVER_SERVICE_OPTIONS_H_
