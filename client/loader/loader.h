// The training node's data loader: epoch order, a window of requests in flight
// on one Fetch stream, --workers threads that finish each sample's remaining
// ops, and in-order collation into batches. No LibTorch here: batches are
// plain buffers (sophon/data/batch.h).
#ifndef SOPHON_CLIENT_LOADER_LOADER_H_
#define SOPHON_CLIENT_LOADER_LOADER_H_

#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "client/offload/offload_policy.h"
#include "client/loader/sample_client.h"
#include "sophon/data/batch.h"
#include "sophon/ops/pipeline.h"

namespace sophon {

enum class BadSamplePolicy { kSkip, kFail };
absl::StatusOr<BadSamplePolicy> ParseBadSamplePolicy(absl::string_view name);

struct LoaderOptions {
  int batch_size = 256;        // samples per batch
  int workers = 2;             // local prep threads (the training node's CPU budget)
  // Batches requested ahead of the trainer, including ready ones (P below).
  // Bounds the loader's memory, with B = batch_size and S = crop size:
  //   - image buffers of B * 12 * S^2 bytes each: at most 2P + 1 (P batches
  //     requested, 1 being set up, up to P handed back through Next and kept
  //     for reuse); P + 2 while the caller hands its previous batch back to
  //     every Next (the train loop does; one is handed back while the next
  //     batch is being set up), plus the caller's own batch;
  //   - received payloads waiting for the prep threads: at most the samples
  //     of the P requested batches, P * B payloads (12 * S^2 bytes at the
  //     tensor stage, 3 * S^2 cropped or flipped, the file's size raw);
  //   - the response message being read (at most the server's message size).
  // LoaderEpochStats.peak_batch_buffers and peak_queued_payload_bytes report
  // the first two as they were.
  int prefetch_batches = 3;
  int requests_per_message = 32;  // sample requests per FetchRequest message
  bool shuffle = true;
  bool drop_last = false;      // drop a final partial batch
  BadSamplePolicy on_bad_sample = BadSamplePolicy::kSkip;
  uint64_t seed = 0;           // drives the shuffle and every augmentation
  int rank = 0;                // this trainer's share of the data ...
  int world = 1;               // ... out of `world` trainers
  PipelineOptions pipeline;

  // The one place these are checked; names the offending field.
  absl::Status Validate() const;
};

struct LoaderEpochStats {
  uint64_t samples = 0;   // delivered in batches
  uint64_t skipped = 0;   // bad samples skipped
  uint64_t batches = 0;
  std::array<uint64_t, kNumStages> samples_by_stage{};  // as received
  std::array<uint64_t, kNumStages> bytes_by_stage{};    // payload bytes received
  double local_cpu_seconds = 0;   // thread CPU of local prep
  double server_cpu_seconds = 0;  // as reported per sample by the server
  int stream_breaks = 0;          // Fetch streams that broke (server gone or restarting)
  int reconnects = 0;             // Fetch streams re-opened after the server went away
  uint64_t requested = 0;         // sample requests made (once each; resends in `resent`)
  uint64_t resent = 0;            // sample requests sent again on a re-opened stream
  // Fetch streams the server refused because it was full (its max_streams or
  // max_streams_per_peer), each retried after a backoff.
  int streams_refused = 0;
  // Memory (see LoaderOptions.prefetch_batches): most image buffers the
  // loader held at once (requested batches, the one being set up, spares),
  // and most received payload bytes waiting for (or in) the prep threads.
  int peak_batch_buffers = 0;
  uint64_t peak_queued_payload_bytes = 0;
  std::vector<std::string> first_errors;  // up to 5 bad-sample messages
};

// OK if the server decodes JPEGs as strictly as `limits` (the manifest's
// lenient_jpeg; a server that does not send it is strict); otherwise
// FAILED_PRECONDITION naming `address` and both sides' setting: a sample
// would succeed where one side decodes it and fail where the other does.
absl::Status CheckJpegDecodingAgrees(const v1::Manifest& manifest, absl::string_view address,
                                     const DecodeLimits& limits);

class Loader {
 public:
  // `client` and `policy` must outlive the loader. The policy is asked where
  // every sample goes just before it is requested, and told what arrived.
  // Fails if the server's JPEG decoding disagrees (CheckJpegDecodingAgrees).
  static absl::StatusOr<std::unique_ptr<Loader>> Create(SampleClient* client,
                                                        const LoaderOptions& options,
                                                        OffloadPolicy* policy);
  ~Loader();

  // Starts the policy's epoch and starts fetching `epoch`, only its first `max_batches` batches
  // when > 0 (nothing beyond them is requested). REQUIRES: the previous epoch
  // is over (Next returned false or an error) or none was started.
  absl::Status StartEpoch(uint64_t epoch, int64_t max_batches = 0);
  // The next batch in epoch order. false at the end of the epoch. Errors:
  // a failed stream (naming the server), or a bad sample under kFail.
  // A stream that breaks because the server went away or restarted
  // (UNAVAILABLE, ABORTED, CANCELLED by the server) is re-opened once the
  // server answers again with the same dataset (within the client's
  // connect_timeout), and every requested sample that had not arrived is
  // requested again, so each still arrives exactly once. Three breaks in a row
  // that owed samples and delivered none end the epoch with the last error.
  // A stream the server refuses because it is full (RESOURCE_EXHAUSTED naming
  // its max_streams or max_streams_per_peer) is opened again after a backoff
  // with jitter, for up to the client's connect_timeout since the first
  // refusal in a row; then RESOURCE_EXHAUSTED naming the server. Any other
  // error ends the epoch at once, naming the server.
  // `batch`'s previous image buffer is recycled for a later batch (every slot
  // is overwritten, so buffers are neither zeroed nor faulted in anew).
  absl::StatusOr<bool> Next(Batch* batch);
  // Batches this epoch will yield (an upper bound when samples are skipped).
  int64_t num_batches() const { return num_batches_; }
  int64_t epoch_samples() const { return static_cast<int64_t>(order_.size()); }
  LoaderEpochStats stats() const;
  // The offload policy the loader asks (the train loop reports steps to it).
  OffloadPolicy* policy() const { return policy_; }
  // The epoch's request order (valid after StartEpoch).
  const std::vector<uint64_t>& order() const { return order_; }
  // Cancels the stream and joins the threads. Idempotent.
  void Stop();

 private:
  struct PendingBatch {
    int64_t index = 0;
    int n = 0;
    std::vector<float> images;
    std::vector<int64_t> labels;
    std::vector<uint64_t> ids;
    std::vector<SampleAssignment> assigned;  // as requested
    std::vector<char> bad;
    std::vector<char> arrived;   // a reply came (counts against `remaining` in WorkerLoop)
    int remaining = 0;
  };
  struct WorkItem {
    v1::Sample sample;
    PendingBatch* batch = nullptr;
    int slot = 0;
  };

  Loader(SampleClient* client, const LoaderOptions& options, OffloadPolicy* policy);
  void SendLoop();
  // Writes requests on `call`, requests_per_message to a message; stops at
  // the first failed write (the stream broke, and the receiver re-opens it).
  void WriteRequests(FetchCall* call, const std::vector<std::pair<uint64_t, Stage>>& requests);
  // If the receiver re-opened the stream since `*gen`: adopts the new stream
  // and re-requests every registered sample that has not arrived.
  void ResendIfReconnected(uint64_t* gen, std::shared_ptr<FetchCall>* call);
  void ReceiveLoop();
  void WorkerLoop();
  void FailLocked(absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Updates the peaks of LoaderEpochStats from the current holdings.
  void NotePeaksLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void JoinThreads();

  // Constant after construction.
  SampleClient* const client_;
  const LoaderOptions options_;
  OffloadPolicy* const policy_;
  const int64_t sample_floats_;  // 3 * S * S

  // Set by StartEpoch, read-only while the epoch runs.
  uint64_t epoch_ = 0;
  std::vector<uint64_t> order_;
  std::vector<int64_t> position_of_id_;  // -1 if not in this epoch
  int64_t num_batches_ = 0;
  std::vector<std::thread> threads_;

  mutable absl::Mutex mu_;
  std::map<int64_t, std::unique_ptr<PendingBatch>> pending_ ABSL_GUARDED_BY(mu_);
  std::deque<WorkItem> work_ ABSL_GUARDED_BY(mu_);
  int64_t next_batch_ ABSL_GUARDED_BY(mu_) = 0;     // next to hand to the trainer
  int64_t opened_batches_ ABSL_GUARDED_BY(mu_) = 0; // requested so far
  int64_t requested_ ABSL_GUARDED_BY(mu_) = 0;  // samples asked for so far
  int64_t received_ ABSL_GUARDED_BY(mu_) = 0;
  bool stream_done_ ABSL_GUARDED_BY(mu_) = false;
  // The current Fetch stream; the receiver replaces it (and bumps the
  // generation) when the server went away, the sender re-requests on it.
  std::shared_ptr<FetchCall> call_ ABSL_GUARDED_BY(mu_);
  uint64_t stream_gen_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  LoaderEpochStats stats_ ABSL_GUARDED_BY(mu_);
  // Image buffers handed back through Next(), for SendLoop's next batches.
  std::vector<std::vector<float>> spare_images_ ABSL_GUARDED_BY(mu_);
  bool sender_has_buffer_ ABSL_GUARDED_BY(mu_) = false;  // a batch being set up
  uint64_t queued_payload_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // received, not yet prepared
  // When the stream last broke or was refused: batches registered before it,
  // and samples owed then (for the resend's log line).
  int64_t opened_at_break_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace sophon

#endif  // SOPHON_CLIENT_LOADER_LOADER_H_
