// The training node's data loader: epoch order (this rank's share), a window
// of requests in flight on one Fetch stream per storage server, --workers
// threads that finish each sample's remaining ops, and in-order collation into
// batches. No LibTorch here: batches are plain buffers (sophon/data/batch.h).
// This header is the loader's face: its options, statistics and operations.
// Its state, mutexes and threads are the private StreamLoader's
// (stream_loader.h; the links to the servers in server_link.h, the receive
// loop in receive_loop.cc, the prep threads in local_prep.cc), so neither
// gRPC's nor protobuf's headers reach the files that include this one.
#ifndef SOPHON_CLIENT_LOADER_LOADER_H_
#define SOPHON_CLIENT_LOADER_LOADER_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/loader/offload_policy.h"
#include "sophon/data/batch.h"
#include "sophon/ops/pipeline.h"
#include "sophon/ops/stage.h"

namespace sophon {

// Declared in the loader's other headers: sample_cache.h, sample_client.h,
// server_manifest.h, server_set.h. This header includes none of them, nor
// gRPC's or protobuf's (the narrow_headers test checks).
class BatchShare;
class SampleCache;
class SampleClient;
class ServerSet;
class StreamLoader;
struct ServerManifest;

enum class BadSamplePolicy { kSkip, kFail };
absl::StatusOr<BadSamplePolicy> ParseBadSamplePolicy(absl::string_view name);

struct LoaderOptions {
  int batch_size = 256;        // samples per batch
  int workers = 2;             // local prep threads (the training node's CPU budget)
  // Batches requested ahead of the trainer, including ready ones (P below).
  // Bounds the loader's memory, with B = batch_size and S = crop size:
  //   - image buffers of B * 12 * S^2 bytes each (B * 3 * S^2 for a uint8
  //     target): at most 2P + 1 (P batches
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
  // With shuffle: 0 = a full shuffle (EpochOrder); K >= 1 = the group-aware
  // order (GroupedEpochOrder) over the servers' groups with K groups open at
  // a time, so a pack's server reads each group once.
  int shuffle_window = 0;
  bool drop_last = false;      // drop a final partial batch
  BadSamplePolicy on_bad_sample = BadSamplePolicy::kSkip;
  uint64_t seed = 0;           // drives the shuffle and every augmentation
  // This trainer's share of every epoch: positions rank, rank + world, ... of
  // the epoch's global order padded to a multiple of world (RankSlice), so
  // every rank runs the same number of steps; batch_size is per rank.
  int rank = 0;
  int world = 1;
  PipelineOptions pipeline;
  // The job's last stage: where this node's pipeline ends (Batch.stage).
  // TENSOR (float32 NCHW) for training on this node's CPU; FLIPPED or
  // CROPPED (uint8 NHWC, a quarter of the bytes) when the device finishes the
  // ops; FEATURES (float32 [N, F], a frozen backbone's features) for training
  // a classifier head; PREDICTIONS (float32 [N, 2k]: k pairs of class and
  // probability, k = min(pipeline.top_k, the head's classes)) for inference.
  // A policy's stage past it is taken as the target itself.
  //
  // FEATURES: a sample that arrives before it goes through this node's
  // backbone (pipeline.backbone); a server's backbone must have the same
  // checkpoint (Manifest.backbone_fingerprint). A sample planned at FEATURES
  // on a server without a backbone is asked for at TENSOR instead. Without a
  // backbone here every server needs one.
  // PREDICTIONS: as FEATURES, and this node needs the model (its backbone and
  // head, pipeline.backbone); a sample planned at PREDICTIONS on a server
  // whose head differs is asked for at FEATURES (ServedStage).
  Stage target = Stage::kTensor;
  // Profiling: a sample received at a stage before a skippable one (RAW)
  // also runs the ops of the path it skips (the lossless crop and the decode
  // of its region), timed, their output dropped (MeasureSkippedOps), so that
  // the observations hold every op's time and every stage's size. About
  // doubles this node's CPU per sample.
  bool measure_skipped_ops = false;
  // FEATURES with the evaluation transform (pipeline.augment.eval_resize >
  // 0): keep up to this many bytes of features (fp16, 2 x F bytes a sample)
  // across epochs, and take a held sample from here instead of asking a
  // server. 0 = off. >= 0
  int64_t feature_cache_bytes = 0;
  // This node's cache of whole sample files (shared across epochs and with
  // other loaders of the node; its bytes are its own bound). A sample the
  // policy plans at RAW that is held there is not asked for: its file goes to
  // this node's prep threads as if it had arrived. Samples that arrive RAW are
  // offered to it. Null = none.
  std::shared_ptr<SampleCache> sample_cache;
  // The finished batches this loader shares with the other jobs of the node
  // that make the same ones (BatchShareKey): a batch another job published
  // is read instead of fetched and prepared, and each batch made here is
  // published for them. Null = none. Opened with BatchShareKey of these
  // options.
  std::shared_ptr<BatchShare> batch_share;

  // The one place these are checked; names the offending field.
  absl::Status Validate() const;
};

// What one storage server delivered in an epoch.
struct ServerLoadStats {
  std::string address;
  uint64_t samples = 0;  // received (good or bad)
  uint64_t bytes = 0;    // payload bytes received
  int stream_breaks = 0;
  int reconnects = 0;
  int streams_refused = 0;
  uint64_t resent = 0;
  // Samples owed by this server that went to a replica because it was down
  // (it refused connections, or did not come back within the client's
  // connect_timeout).
  uint64_t failed_over = 0;
  // Down in this epoch (at its start or since): the replicated layout goes on
  // without it; probed again when the next epoch starts.
  bool lost = false;
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
  uint64_t feature_cache_hits = 0;  // samples taken from the feature cache, not requested
  // The sample cache (LoaderOptions.sample_cache) in this epoch: samples taken
  // from it instead of asked for, their bytes (what did not cross the link),
  // samples planned at RAW that it did not hold (fetched), and samples that
  // arrived RAW and were kept.
  uint64_t sample_cache_hits = 0;
  uint64_t sample_cache_misses = 0;
  uint64_t sample_cache_hit_bytes = 0;
  uint64_t sample_cache_inserted = 0;
  // Batches shared with the node's other jobs (LoaderOptions.batch_share):
  // read from another job instead of fetched, made here and published for
  // them, and the seconds the sender spent taking them (waiting for a batch
  // another job was making, and reading it).
  uint64_t shared_batches_read = 0;
  uint64_t shared_batches_published = 0;
  double shared_take_seconds = 0;
  // What the sample cache holds when the stats are read, all epochs' fills.
  int64_t sample_cache_entries = 0;
  int64_t sample_cache_bytes = 0;
  // Fetch streams the server refused because it was full (its max_streams or
  // max_streams_per_peer), each retried after a backoff.
  int streams_refused = 0;
  // Memory (see LoaderOptions.prefetch_batches): most image buffers the
  // loader held at once (requested batches, the one being set up, spares),
  // and most received payload bytes waiting for (or in) the prep threads.
  int peak_batch_buffers = 0;
  uint64_t peak_queued_payload_bytes = 0;
  std::vector<std::string> first_errors;  // up to 5 bad-sample messages
  // Samples of the epoch's global order repeated (wrapped around) so that
  // every rank gets as many: PaddedEpochLength - num_samples, over all ranks.
  int64_t padding = 0;
  std::vector<ServerLoadStats> servers;  // one per storage server, in --server order
};

// OK if the server decodes JPEGs as strictly as `limits` (the manifest's
// lenient_jpeg; a server that does not send it is strict); otherwise
// FAILED_PRECONDITION naming `address` and both sides' setting: a sample
// would succeed where one side decodes it and fail where the other does.
// The key of the batches a loader with `options` makes from the dataset whose
// (global) manifest has `dataset_fingerprint`: loaders with equal keys make
// byte-identical batches (the order, the rank's slice, the batch size, the
// target and every option that shapes a sample's bytes are in it; the mode
// and the caches are not: a sample's bytes do not depend on where it is
// prepared). `served_models`: a digest of the servers' backbones and heads
// (their fingerprints) when the target is FEATURES or later, else 0.
// BatchShare keys its folders by it.
uint64_t BatchShareKey(const LoaderOptions& options, uint64_t dataset_fingerprint,
                       uint64_t served_models = 0);

absl::Status CheckJpegDecodingAgrees(const ServerManifest& manifest, absl::string_view address,
                                     const DecodeLimits& limits);

// For a FEATURES target: the feature size F, checking that every server's
// backbone has the checkpoint of `local` (this node's, may be null), or
// without one that all servers have a backbone of the same checkpoint.
// FailedPrecondition naming the server otherwise.
absl::StatusOr<int> CheckFeatureSources(const ServerSet& servers, const FeatureExtractor* local);

// The furthest stage the server of `manifest` prepares samples to for a node
// whose model is `local` (may be null): TENSOR without a backbone there,
// FEATURES when only its backbone is local's (its head differs), else the
// last stage.
Stage ServedStage(const ServerManifest& manifest, const FeatureExtractor* local);

// Threads: every public method may be called from any thread. One iteration
// at a time: StartEpoch while another thread waits in Next or WaitForNext
// fails with FAILED_PRECONDITION (the epoch it iterates goes on); Stop from
// any thread ends the epoch, and a Next waiting in another thread returns
// CANCELLED at once. Two threads calling Next share the epoch: each batch goes
// to one of them. StartEpoch, Stop and the destructor are serialized (the
// threads of an epoch are started and joined by one caller at a time).
// REQUIRES: no call is in progress when the loader is destroyed.
class Loader {
 public:
  // `servers` and `policy` must outlive the loader. The policy is asked where
  // every sample goes (stage and server) just before it is requested, and told
  // what arrived. Fails if a server's JPEG decoding disagrees
  // (CheckJpegDecodingAgrees).
  static absl::StatusOr<std::unique_ptr<Loader>> Create(ServerSet* servers,
                                                        const LoaderOptions& options,
                                                        OffloadPolicy* policy);
  // One server: `client` must outlive the loader.
  static absl::StatusOr<std::unique_ptr<Loader>> Create(SampleClient* client,
                                                        const LoaderOptions& options,
                                                        OffloadPolicy* policy);
  ~Loader();

  // Starts the policy's epoch and starts fetching `epoch` from global
  // position `start_position` of its padded order (a checkpoint's data
  // cursor; 0 = its start), only the first `max_batches` batches when > 0
  // (nothing beyond them is requested). Ends what is left of the previous
  // epoch, unless another thread waits in Next or WaitForNext for it: then
  // FAILED_PRECONDITION, and that epoch goes on. A thread that calls Next
  // after a successful StartEpoch takes the new epoch's batches.
  absl::Status StartEpoch(uint64_t epoch, int64_t max_batches = 0, int64_t start_position = 0);
  // The next batch in epoch order. false at the end of the epoch. Errors:
  // a failed stream (naming the server), or a bad sample under kFail.
  // batch->cursor is the global position after it (what a checkpoint keeps).
  // A batch whose samples were all bad is skipped with world == 1; with
  // world > 1 it comes back empty (n == 0), since every rank must take part
  // in every step.
  // Each server has its own stream; a slow or broken one holds back only the
  // batches that wait for its samples.
  // A stream that breaks for a transient reason (decided from the code and
  // the server's reason, DecideStreamBreak in stream_break.h: UNAVAILABLE,
  // ABORTED, CANCELLED; RESOURCE_EXHAUSTED from gRPC shedding load, with no
  // reason of the server's; the server ending it for its state) is followed
  // by one quick call (SampleClient::Ping):
  //   - the server answers (it reset the stream; alive): a new stream after
  //     a backoff (exponential, up to 1 s), however often it happens;
  //   - it does not (the connection refused: its process is gone) and
  //     another server of its shard (a replica) is up: it is down, and what
  //     it owes goes to the replicas at once, as its shard's later samples;
  //   - otherwise it is awaited up to the client's connect_timeout
  //     (AwaitSameServer); not back by then, it is down as above, or with no
  //     replica the epoch ends with UNAVAILABLE naming the server, what
  //     happened and the samples missing.
  // On every new stream each requested sample that had not arrived is
  // requested again, so each still arrives exactly once. A server that is
  // down is probed once, cheaply, when a later epoch starts
  // (SampleClient::Probe) and takes part again if it answers.
  // A stream the server refuses because it is full (RESOURCE_EXHAUSTED naming
  // its max_streams or max_streams_per_peer) is opened again after a backoff
  // with jitter, for up to the client's connect_timeout since the first
  // refusal in a row; then RESOURCE_EXHAUSTED naming the server. Any other
  // error (INVALID_ARGUMENT, PERMISSION_DENIED, the server's limits on a
  // request...) ends the epoch at once, naming the server.
  // `batch`'s previous image buffer is recycled for a later batch (every slot
  // is overwritten, so buffers are neither zeroed nor faulted in anew).
  // CANCELLED ("loader stopped") once Stop was called (from any thread),
  // until the next StartEpoch.
  absl::StatusOr<bool> Next(Batch* batch);
  // Waits up to `timeout` until Next has something to return at once (a
  // batch, the end of the epoch, an error); false on timeout. Lets a caller
  // that must stay responsive (the Python module, to Ctrl-C) wait in slices.
  // Next may still wait after true when every sample of the batch was bad.
  bool WaitForNext(absl::Duration timeout) const;
  // Batches this epoch will yield (an upper bound when samples are skipped).
  int64_t num_batches() const;
  // This rank's samples this epoch (from the start position; padding included).
  int64_t epoch_samples() const;
  ServerSet* servers() const;
  int world() const;
  LoaderEpochStats stats() const;
  // The offload policy the loader asks (the train loop reports steps to it).
  OffloadPolicy* policy() const;
  // The epoch's request order (empty before StartEpoch).
  std::vector<uint64_t> order() const;
  // Cancels the streams and joins the threads. Idempotent; from any thread
  // (waits for a StartEpoch in progress in another one, then stops its epoch).
  void Stop();

 private:
  explicit Loader(std::unique_ptr<StreamLoader> impl);

  // The state, its mutexes and its threads (stream_loader.h).
  const std::unique_ptr<StreamLoader> impl_;
};

}  // namespace sophon

#endif  // SOPHON_CLIENT_LOADER_LOADER_H_
