// The three kinds of Fetch streams of sophon-bench-load, on gRPC's callback
// API (no thread per stream: a thousand idle streams cost the client a
// thousand small objects, not a thousand threads):
// - EpochStream: one trainer's epoch; requests its ids, reads as fast as it
//   can, checks every sample and records it in a ReceiptLedger;
// - IdleStream: opens a stream and sends nothing; a read waits for the end;
// - HostileStream: requests large samples and never reads.
// Each records how it ended (StreamEnd); the driver cancels what is still
// open at the end of a run.
#ifndef SOPHON_TOOLS_BENCH_LOAD_STREAMS_H_
#define SOPHON_TOOLS_BENCH_LOAD_STREAMS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "sophon/ops/augment.h"
#include "sophon/ops/stage.h"
#include "sophon/v1/sophon.grpc.pb.h"

namespace sophon {

// How a stream ended.
struct StreamEnd {
  bool done = false;
  grpc::StatusCode code = grpc::StatusCode::OK;
  std::string message;
  bool cancelled_by_client = false;  // the driver cancelled it (still open at the end)
  double seconds = 0;                // from the stream's start to its end
};

// The name a report gives an ended stream: the status code's name
// ("RESOURCE_EXHAUSTED"), or "open_at_end" for one the client cancelled.
std::string StreamEndName(const StreamEnd& end);

// How many times each (epoch, id) was received, across all trainers.
class ReceiptLedger {
 public:
  ReceiptLedger(uint64_t num_samples, int epochs);
  void Record(int epoch, uint64_t id);

  struct Check {
    uint64_t expected = 0;      // num_samples x epochs
    uint64_t exactly_once = 0;  // (epoch, id) received once
    uint64_t missing = 0;       // never received
    uint64_t duplicated = 0;    // received more than once (each counted once)
    uint64_t out_of_range = 0;  // ids outside the manifest or epochs not asked for
    bool ok() const { return exactly_once == expected && out_of_range == 0; }
  };
  Check Verify() const;

 private:
  const uint64_t num_samples_;
  const int epochs_;
  std::vector<std::atomic<uint32_t>> counts_;  // epoch-major
  std::atomic<uint64_t> out_of_range_{0};
};

// What one trainer received, over all its epochs (updated from gRPC's threads).
struct TrainerCounters {
  std::atomic<uint64_t> samples{0};      // answered without error, payload checked
  std::atomic<uint64_t> bytes{0};        // payload bytes of those
  std::atomic<uint64_t> errors{0};       // answered with an error (error_code != 0)
  std::atomic<uint64_t> foreign{0};      // ids this trainer did not request
  std::atomic<uint64_t> bad_payload{0};  // wrong stage, dtype or size
  absl::Mutex mu;
  std::map<int, uint64_t> errors_by_code ABSL_GUARDED_BY(mu);  // grpc code -> samples
};

// What every request message carries.
struct FetchParams {
  uint64_t epoch = 0;
  uint64_t seed = 1;
  AugmentOptions augment;
  Stage stage = Stage::kCropped;
  int ids_per_request = 32;
  // Samples requested and not yet received, at most (as a loader's prefetch
  // window); 0 = request everything at once.
  int window = 128;
};

// Shared parts: the context, the end record and waiting for it.
class StreamBase {
 public:
  virtual ~StreamBase() = default;
  // Cancels the stream if it has not ended (marks it cancelled_by_client).
  void Cancel();
  bool WaitDone(absl::Duration timeout);
  StreamEnd end() const;
  bool done() const;

 protected:
  void MarkStart() { start_ = absl::Now(); }
  // Records the end; call last in OnDone (the object may be read at once).
  void RecordEnd(const grpc::Status& status);

  grpc::ClientContext context_;

 private:
  absl::Time start_;
  mutable absl::Mutex mu_;
  StreamEnd end_ ABSL_GUARDED_BY(mu_);
  bool cancel_requested_ ABSL_GUARDED_BY(mu_) = false;
};

class EpochStream final : public StreamBase,
                          public grpc::ClientBidiReactor<v1::FetchRequest, v1::FetchResponse> {
 public:
  // `ids`: this trainer's share of the epoch, in request order. `on_done`
  // runs once, on a gRPC thread, after the stream ended.
  EpochStream(v1::SampleService::Stub* stub, std::vector<uint64_t> ids, const FetchParams& params,
              TrainerCounters* counters, ReceiptLedger* ledger, std::function<void()> on_done);
  void Start();

  void OnWriteDone(bool ok) override;
  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  // Starts the next write, or WritesDone, if none is in flight and the
  // window has room.
  void MaybeWrite();
  void Consume(v1::Sample* sample);

  v1::SampleService::Stub* const stub_;
  const std::vector<uint64_t> ids_;
  const FetchParams params_;
  const int64_t expected_payload_bytes_;  // -1: any (raw)
  TrainerCounters* const counters_;
  ReceiptLedger* const ledger_;
  const std::function<void()> on_done_;
  std::vector<bool> requested_;           // by id: whether this stream asked for it
  absl::Mutex mu_;                        // the write side: OnReadDone and OnWriteDone may overlap
  size_t next_ ABSL_GUARDED_BY(mu_) = 0;  // next id of ids_ to request
  uint64_t received_ ABSL_GUARDED_BY(mu_) = 0;  // samples answered
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool writes_over_ ABSL_GUARDED_BY(mu_) = false;  // WritesDone started or a write failed
  v1::FetchRequest request_;
  v1::FetchResponse response_;
};

class IdleStream final : public StreamBase,
                         public grpc::ClientBidiReactor<v1::FetchRequest, v1::FetchResponse> {
 public:
  explicit IdleStream(v1::SampleService::Stub* stub) : stub_(stub) {}
  void Start();
  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;
  uint64_t messages() const { return messages_.load(); }

 private:
  v1::SampleService::Stub* const stub_;
  v1::FetchResponse response_;
  std::atomic<uint64_t> messages_{0};  // the server should send none
};

class HostileStream final : public StreamBase,
                            public grpc::ClientBidiReactor<v1::FetchRequest, v1::FetchResponse> {
 public:
  HostileStream(v1::SampleService::Stub* stub, std::vector<uint64_t> ids, const FetchParams& params)
      : stub_(stub), ids_(std::move(ids)), params_(params) {}
  void Start();
  void OnWriteDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;
  // Ids in request messages the transport accepted (flow control lets a
  // client write only as far as the server reads).
  uint64_t ids_written() const { return ids_written_.load(); }

 private:
  void WriteNext();

  v1::SampleService::Stub* const stub_;
  const std::vector<uint64_t> ids_;
  const FetchParams params_;
  size_t next_ = 0;
  v1::FetchRequest request_;
  std::atomic<uint64_t> ids_written_{0};
};

}  // namespace sophon

#endif  // SOPHON_TOOLS_BENCH_LOAD_STREAMS_H_
