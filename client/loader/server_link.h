// Private to the loader (client/loader/*.cc): one storage server's Fetch
// stream as the loader sees it (ServerLink: the stream, its generation, the
// outbox of registered requests, what is owed, whether the server is lost),
// the links of a job with the routing of samples around lost servers
// (ServerLinks), and the writing of requests on a stream (WriteRequests).
// Not thread-safe: the loader keeps its links under its one mutex
// (StreamLoader::mu_); its writer and receiver threads read a link there and
// do their I/O after releasing it.
#ifndef SOPHON_CLIENT_LOADER_SERVER_LINK_H_
#define SOPHON_CLIENT_LOADER_SERVER_LINK_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "client/loader/loader.h"
#include "client/loader/sample_client.h"
#include "client/loader/server_set.h"
#include "sophon/ops/stage.h"

namespace sophon {

// Requests as registered: global ids and the stage asked for.
using LinkRequests = std::deque<std::pair<uint64_t, Stage>>;

// One server's Fetch stream and what is owed on it.
struct ServerLink {
  int server = 0;
  SampleClient* client = nullptr;
  uint64_t key_offset = 0;  // its shard's base: global id = key_offset + local id
  // The current stream; the receiver replaces it (and bumps the
  // generation) when the server went away, the writer re-requests on it.
  std::shared_ptr<FetchCall> call;
  uint64_t gen = 0;
  LinkRequests outbox;         // registered, not yet written (global ids)
  int64_t owed = 0;            // requested from it, not arrived
  bool stream_done = false;    // the receiver ended
  bool lost = false;           // down: its samples go to replicas (until a probe finds it back)
  Stage max_stage = kLastStage;  // ServedStage (constant)
  // When the stream last broke or was refused: batches registered before it.
  int64_t opened_at_break = 0;

  // Registers a request for the writer: queued and owed.
  void Queue(uint64_t id, Stage stage) {
    outbox.emplace_back(id, stage);
    ++owed;
  }
  // At the start of an epoch: nothing queued, owed or open; a lost server's
  // receiver is done before it starts.
  void ResetForEpoch();
};

// The links of a job's servers, one per server for the loader's life, and
// which of them serves a sample.
class ServerLinks {
 public:
  // `servers` must outlive the links. `local`: this node's model (may be
  // null), for each server's ServedStage.
  ServerLinks(const ServerSet& servers, const FeatureExtractor* local);

  int size() const { return static_cast<int>(links_.size()); }
  ServerLink& operator[](int server) { return links_[server]; }
  const ServerLink& operator[](int server) const { return links_[server]; }
  std::vector<ServerLink>::iterator begin() { return links_.begin(); }
  std::vector<ServerLink>::iterator end() { return links_.end(); }
  std::vector<ServerLink>::const_iterator begin() const { return links_.begin(); }
  std::vector<ServerLink>::const_iterator end() const { return links_.end(); }

  // The stage to ask `server` for a sample planned at `stage`.
  Stage StageFor(int server, Stage stage) const;
  // The server for global `id` when the policy asked for `wanted`: wanted
  // itself unless it is lost (then the live replica of its shard that owes
  // least); -1 if wanted does not hold the sample or no replica is left.
  int Route(uint64_t id, int wanted) const;
  // Another server of `server`'s shard is neither lost nor marked down.
  bool HasLiveReplica(int server) const;
  // A shard none of whose servers is left is awaited (up to connect_timeout,
  // as any server that broke) rather than failed at once: its servers are
  // no longer lost, one of them may be back by then.
  void AwaitShardsWithoutServers();

 private:
  const GlobalManifest& manifest_;
  std::vector<ServerLink> links_;
};

// Writes `requests` (global ids) on `call` for `epoch`, the options'
// requests_per_message to a message; false at the first failed write (the
// stream broke, and the receiver re-opens it).
bool WriteRequests(const LoaderOptions& options, uint64_t epoch, uint64_t key_offset,
                   FetchCall* call, const LinkRequests& requests);

}  // namespace sophon

#endif  // SOPHON_CLIENT_LOADER_SERVER_LINK_H_
