// Private to the loader (client/loader/*.cc): the implementation behind the
// Loader face (loader.h). One mutex, mu_, guards the epoch's state: the
// links to the servers (server_link.h), the registered batches, the prep
// queue, the statistics. Its threads, per epoch:
//   - the sender (SendLoop, loader.cc) registers each batch and queues its
//     requests to the servers' links; it never blocks on a server;
//   - per server a writer (WriteLoop, server_link.cc) writes what is queued,
//     and after a reconnect first everything the server owes;
//   - per server a receiver (ReceiveLoop, receive_loop.cc) routes the
//     samples that arrive to the prep queue and, when the stream breaks,
//     reconnects, loses the server to its replicas or fails the epoch;
//   - the prep workers (WorkerLoop, local_prep.cc) finish each sample to the
//     target in its batch's slot;
//   - Next (loader.cc) hands the batches out in order.
// No lock is held across I/O, an RPC or a sample's preparation.
#ifndef SOPHON_CLIENT_LOADER_STREAM_LOADER_H_
#define SOPHON_CLIENT_LOADER_STREAM_LOADER_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/loader/batch_share.h"
#include "client/loader/feature_cache.h"
#include "client/loader/loader.h"
#include "client/loader/offload_policy.h"
#include "client/loader/sample_client.h"
#include "client/loader/server_link.h"
#include "client/loader/server_set.h"
#include "sophon/data/batch.h"
#include "sophon/net/grpc_util.h"
#include "sophon/ops/pipeline.h"

namespace sophon {

// Names one of the loader's threads (the first 15 characters, as the OS keeps).
void NameLoaderThread(std::thread& thread, const std::string& name);

class StreamLoader {
 public:
  // `vector_size`: the values per sample of a vector target (F for FEATURES,
  // 2k for PREDICTIONS; 0 otherwise). The options are valid and the servers
  // checked against them (Loader::Create).
  StreamLoader(ServerSet* servers, const LoaderOptions& options, OffloadPolicy* policy,
               int vector_size);
  ~StreamLoader();  // Stop()

  // The Loader face's methods, with its contracts (loader.h).
  absl::Status StartEpoch(uint64_t epoch, int64_t max_batches, int64_t start_position);
  absl::StatusOr<bool> Next(Batch* batch);
  bool WaitForNext(absl::Duration timeout) const;
  int64_t num_batches() const;
  int64_t epoch_samples() const;
  ServerSet* servers() const { return servers_; }
  const LoaderOptions& options() const { return options_; }
  LoaderEpochStats stats() const;
  OffloadPolicy* policy() const { return policy_; }
  std::vector<uint64_t> order() const;
  void Stop();

  // The loader owns `servers` (Loader::Create over one SampleClient).
  // REQUIRES: before the first StartEpoch.
  void Own(std::unique_ptr<ServerSet> servers) { owned_servers_ = std::move(servers); }

 private:
  struct PendingBatch {
    int64_t index = 0;
    int n = 0;
    int64_t first_position = 0;  // in the plan's order
    std::vector<float> images;    // target TENSOR
    std::vector<uint8_t> pixels;  // a uint8 HWC target
    std::vector<int64_t> labels;
    std::vector<uint64_t> ids;  // global ids
    std::vector<SampleAssignment> assigned;  // as requested (the server after any failover)
    std::vector<char> bad;
    std::vector<char> arrived;   // a reply came (counts against `remaining` in WorkerLoop)
    int remaining = 0;
    // Shared batches (LoaderOptions.batch_share): the batch's seq, and the
    // claim while this job makes it for the others; `publishing` while a
    // prep thread writes it (Next waits for that).
    uint64_t seq = 0;
    BatchShare::Claim claim;
    bool publishing = false;
  };
  struct WorkItem {
    v1::Sample sample;
    uint64_t id = 0;  // global
    int server = 0;   // the server that sent it (for a cache hit: the one it was routed to)
    bool from_cache = false;  // taken from LoaderOptions.sample_cache, not received
    PendingBatch* batch = nullptr;
    int slot = 0;
  };

  // What StartEpoch fixed for one epoch: immutable once published in plan_,
  // shared (by shared_ptr) with the epoch's threads, which read it without
  // the lock.
  struct EpochPlan {
    uint64_t epoch = 0;
    int64_t start_position = 0;
    std::vector<uint64_t> order;
    std::vector<int64_t> position_of_id;  // -1 if not in this epoch
    int64_t num_batches = 0;
  };

  // What one server's receiver keeps from stream to stream (its thread's
  // own; the link's copy of the stream is under mu_).
  struct Receiver {
    Receiver(int server, SampleClient* client);
    const int server;
    SampleClient* const client;
    const std::string& address;
    uint64_t key_offset = 0;  // constant; read once under the lock
    std::shared_ptr<FetchCall> call;
    v1::FetchResponse response;
    Backoff refusal_backoff;
    // Between streams a live server ended (reset under memory pressure,
    // shed): exponential up to 1 s, restarted by a stream that delivered
    // something.
    Backoff reset_backoff;
    int refusals = 0;  // streams refused in a row for want of a slot
    absl::Time refused_since;
  };
  // How a stream ended, for the receiver to go on from.
  struct StreamEnd {
    bool done = false;  // the receiver ends (the epoch has all it needs, or failed)
    absl::Status status;  // the stream's
    // Refused for want of a slot: open again after this wait.
    absl::Duration refusal_wait;
    int64_t outstanding = 0;  // requested from the server, not received
  };

  // At the start of an epoch: probes each server lost or marked down, once
  // (SampleClient::Probe); one that answers takes part again, one that does
  // not is left out of the epoch while a replica of its shard is up (a shard
  // with none is awaited as a broken stream is). The health service of every
  // other server whose shard has replicas is asked at the same time
  // (SampleClient::CheckServing): one that drains is lost to its replicas
  // before a stream is opened to it.
  // FAILED_PRECONDITION if one came back with another dataset.
  // (server_link.cc)
  absl::Status ProbeServers(uint64_t epoch);
  void SendLoop(const EpochPlan& plan);
  // Per server: writes what the sender queued, and after a reconnect first
  // everything owed; WritesDone once the epoch has all it needs.
  // (server_link.cc)
  void WriteLoop(int server, const EpochPlan& plan);

  // Per server (receive_loop.cc): reads each stream to its end, then goes on
  // from how it ended: a new stream, the server lost, or the epoch failed.
  void ReceiveLoop(int server, const EpochPlan& plan);
  // Reads the current stream until it ends; the samples delivered.
  int64_t ReadStream(const EpochPlan& plan, Receiver* r);
  // Puts the samples of one response into their batches' slots and on the
  // prep queue; the samples taken. A sample not requested from the server,
  // or sent twice, fails the epoch (DATA_LOSS) and ends the response.
  int64_t RouteSamplesLocked(const EpochPlan& plan, const Receiver& r,
                             v1::FetchResponse* response) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After the stream ended: its status, decided (DecideStreamBreak) and
  // counted; whether the receiver is done, waits for a slot, or has a broken
  // stream to recover.
  StreamEnd EndStream(int64_t delivered, Receiver* r);
  // A broken stream: the server lost at once if it drains or does not answer
  // while a replica can serve, a new stream after a backoff if it answers,
  // else awaited up to connect_timeout (AwaitServerBack). false: the
  // receiver ends.
  bool RecoverBrokenStream(const StreamEnd& end, int64_t delivered, Receiver* r);
  // Waits for the server to come back, then opens a new stream; lost or the
  // epoch failed if it does not. false: the receiver ends.
  bool AwaitServerBack(const StreamEnd& end, const std::string& broke_with, Receiver* r);
  // Waits `wait` (cut short if the loader stops or fails meanwhile), then
  // puts a new stream in the link's place; false if the loader stopped.
  bool ReopenAfter(absl::Duration wait, Receiver* r);
  // `fresh` becomes the link's stream; the writer requests again what had
  // not arrived.
  void AdoptStreamLocked(std::shared_ptr<FetchCall> fresh, Receiver* r)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // A prep thread (local_prep.cc).
  void WorkerLoop(const EpochPlan& plan);
  // Takes a received sample to options_.target into its slot of `batch`.
  absl::Status Finish(StageData data, uint64_t epoch, uint64_t id, PendingBatch* batch, int slot,
                      OpTimes* times, PerStage<uint64_t>* stage_bytes);

  // Another job's batch into `batch` (read whole), or this job claims it:
  // false when the batch was read, true when it is to be made here (or the
  // loader stops meanwhile: the caller checks). (loader.cc)
  bool TakeSharedBatch(const EpochPlan& plan, PendingBatch* batch);
  // Writes a batch made here for the other jobs (outside the lock; `batch`
  // marked publishing by the caller), then lets Next have it.
  void PublishBatch(PendingBatch* batch);

  // Next without the count of callers inside it (waiting_callers_).
  absl::StatusOr<bool> NextBatch(Batch* batch);
  bool NextReadyLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `server` is down: moves what it owes to replicas, or fails the epoch
  // naming it and the samples missing when its shard has none left. Marks
  // its client down (SampleClient::MarkDown). (server_link.cc)
  void LoseServerLocked(int server, const absl::Status& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The epoch ends (stopping or failed): every thread of it returns.
  bool EndingLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopping_ || !error_.ok();
  }
  // Every requested sample has arrived and every batch is registered.
  bool AllReceivedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The epoch fails: the first error is kept, and the batches this job
  // claimed for the node's other jobs and will not make are let go.
  void FailLocked(absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Updates the peaks of LoaderEpochStats from the current holdings.
  void NotePeaksLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the epoch: marks it stopping (waking Next), cancels the streams,
  // joins the threads.
  void StopLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(lifecycle_mu_);
  void JoinThreads() ABSL_EXCLUSIVE_LOCKS_REQUIRED(lifecycle_mu_);

  // Constant after construction (owned_servers_: set once, before any epoch).
  std::unique_ptr<ServerSet> owned_servers_;  // Create(SampleClient*)
  ServerSet* const servers_;
  const LoaderOptions options_;
  OffloadPolicy* const policy_;
  const bool vector_target_;     // the target's layout is a vector (FEATURES, PREDICTIONS)
  const int64_t sample_values_;  // values per sample: 3 * S * S, or the vector's
  const bool float_target_;      // TENSOR or FEATURES: floats (Batch.images), not uint8
  const std::unique_ptr<FeatureCache> feature_cache_;  // null unless feature_cache_bytes

  // Serializes StartEpoch, Stop and the destructor: one caller at a time
  // starts or joins the epoch's threads. Taken before mu_, never by the
  // epoch's threads nor by Next, so a wait for data never waits for it.
  absl::Mutex lifecycle_mu_;
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(lifecycle_mu_);

  mutable absl::Mutex mu_ ABSL_ACQUIRED_AFTER(lifecycle_mu_);
  // The current epoch (an empty one before the first StartEpoch).
  std::shared_ptr<const EpochPlan> plan_ ABSL_GUARDED_BY(mu_);
  // Callers inside Next or WaitForNext: StartEpoch refuses while there is one.
  mutable int waiting_callers_ ABSL_GUARDED_BY(mu_) = 0;
  ServerLinks links_ ABSL_GUARDED_BY(mu_);  // one per server, for the loader's life
  std::map<int64_t, std::unique_ptr<PendingBatch>> pending_ ABSL_GUARDED_BY(mu_);
  std::deque<WorkItem> work_ ABSL_GUARDED_BY(mu_);
  int64_t next_batch_ ABSL_GUARDED_BY(mu_) = 0;     // next to hand to the trainer
  int64_t opened_batches_ ABSL_GUARDED_BY(mu_) = 0; // requested so far
  int64_t requested_ ABSL_GUARDED_BY(mu_) = 0;  // samples asked for so far
  int64_t received_ ABSL_GUARDED_BY(mu_) = 0;
  int streams_open_ ABSL_GUARDED_BY(mu_) = 0;   // receivers still running
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  LoaderEpochStats stats_ ABSL_GUARDED_BY(mu_);
  // Image buffers handed back through Next(), reused for later batches (one
  // kind is used: floats for a TENSOR target, uint8 otherwise).
  std::vector<std::vector<float>> spare_images_ ABSL_GUARDED_BY(mu_);
  std::vector<std::vector<uint8_t>> spare_pixels_ ABSL_GUARDED_BY(mu_);
  bool sender_has_buffer_ ABSL_GUARDED_BY(mu_) = false;  // a batch being set up
  uint64_t queued_payload_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // received, not yet prepared
  bool share_failed_logged_ ABSL_GUARDED_BY(mu_) = false;  // a failed publish said once
};

}  // namespace sophon

#endif  // SOPHON_CLIENT_LOADER_STREAM_LOADER_H_
