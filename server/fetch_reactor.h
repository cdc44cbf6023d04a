// One Fetch stream, served by gRPC's callback API: no thread of its own.
// Requests are read only while the stream has room (samples and bytes in
// flight) and holds one of the server's read slots (taken before its first
// read and kept until it reads no more), samples are admitted against the
// server's byte budget before any work starts, prepared on the prep pool and
// written in batches as they finish. An idle stream holds no thread and no
// sample memory.
#ifndef SOPHON_SERVER_FETCH_REACTOR_H_
#define SOPHON_SERVER_FETCH_REACTOR_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/proto_utils.h>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/byte_budget.h"
#include "server/fetch_request.h"
#include "server/read_slots.h"
#include "server/service_impl.h"
#include "server/stream_activity.h"
#include "server/stream_registry.h"

namespace sophon {

class FetchReactor final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>,
                           public StreamRegistry::Member,
                           public ByteBudget::Waiter,
                           public ReadSlots::Member {
 public:
  // Starts serving the stream (or refuses it when the server or the peer
  // has too many open). Deletes itself once gRPC is done with it and no
  // prep job, grant or reaper pass refers to it.
  FetchReactor(SampleServiceImpl* service, grpc::CallbackServerContext* context);

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

  void Ref() override { refs_.fetch_add(1, std::memory_order_relaxed); }
  void Unref() override;
  void CheckIdle(absl::Time now) override;
  void Evict(absl::Status why) override;
  void Drain(absl::Status why) override;
  void OnBytesGranted(int64_t bytes) override;
  void OnSlotGranted() override;
  void OnSlotTaken(absl::Status why) override;

 private:
  struct Ready {  // a finished sample waiting to be written
    v1::Sample sample;
    int64_t bytes = 0;  // reserved from the budget until written
  };
  enum class Slot {  // the stream's read slot
    kNone,     // not asked for yet
    kWaiting,  // asked for (queued, or being asked: Acquire not returned yet)
    kHeld,
    kDone,     // given back or taken: the stream reads no more
  };
  struct Message {  // what the samples of one request message share
    std::shared_ptr<const PipelineOptions> pipeline;
    uint64_t seed = 0;
    uint64_t epoch = 0;
    uint64_t key_offset = 0;
  };

  ~FetchReactor() override;

  // Decides under the lock what can happen next (admit samples, write, read,
  // finish) and does it outside the lock. Called after every event.
  void Pump();
  // Ends the stream with `status` as soon as no write is outstanding; the
  // first failure's `reason` (a limit the server applied; none when the
  // client went away or the server failed) goes to the client in the
  // sophon-refusal trailer.
  void FailLocked(absl::Status status, std::optional<Limit> reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Parses and checks the request in read_buf_ and queues its samples; a
  // refused request ends the stream, and its status is returned for logging.
  absl::Status HandleRequestLocked(Limit* limit) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnSampleDone(v1::Sample sample, int64_t bytes);
  // Asks the read slots for a slot (Pump decided it, setting kWaiting).
  void AskForSlot();
  // Drops the pending samples, and their memory from the server's count.
  void ClearPendingLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  StreamActivity ActivityLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Gives the read slot back (or the place in its queue) once the stream will
  // read no more and no read is outstanding.
  void ReleaseSlotIfDoneLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  SampleServiceImpl* const service_;
  grpc::CallbackServerContext* const context_;
  const std::string peer_;          // as gRPC names it (with the port)
  const std::string peer_address_;  // without the port: the unit of fairness
  const uint64_t stream_id_;
  const absl::Time opened_;
  std::atomic<int> refs_{1};  // gRPC's, released in OnDone
  std::atomic<bool> abandoned_{false};  // the stream ended: queued jobs skip their work
  bool registered_ = false;   // set once in the constructor

  grpc::ByteBuffer read_buf_;   // owned by gRPC while reading_
  grpc::ByteBuffer write_buf_;  // owned by gRPC while writing_

  mutable absl::Mutex mu_;
  bool reading_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;  // the client half-closed
  bool finished_ ABSL_GUARDED_BY(mu_) = false;    // Finish called (or decided)
  bool draining_ ABSL_GUARDED_BY(mu_) = false;    // the server drains: no more requests
  absl::Status drain_status_ ABSL_GUARDED_BY(mu_);  // why, once draining_
  size_t handed_back_ ABSL_GUARDED_BY(mu_) = 0;     // samples dropped unstarted by the drain
  absl::Status error_ ABSL_GUARDED_BY(mu_);       // ends the stream when set
  std::optional<Limit> error_reason_ ABSL_GUARDED_BY(mu_);  // why error_, told the client
  Message message_ ABSL_GUARDED_BY(mu_);
  std::deque<CheckedSample> pending_ ABSL_GUARDED_BY(mu_);  // read, not yet admitted
  std::deque<Ready> ready_ ABSL_GUARDED_BY(mu_);
  int jobs_running_ ABSL_GUARDED_BY(mu_) = 0;
  int inflight_samples_ ABSL_GUARDED_BY(mu_) = 0;  // admitted, not yet written
  int64_t stream_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // reserved by this stream (grants included)
  int write_samples_ ABSL_GUARDED_BY(mu_) = 0;     // in the outstanding write
  int64_t write_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool awaiting_grant_ ABSL_GUARDED_BY(mu_) = false;  // queued in the budget (holds a ref)
  Slot slot_ ABSL_GUARDED_BY(mu_) = Slot::kNone;  // kWaiting holds a ref for the slots
  absl::Time read_started_ ABSL_GUARDED_BY(mu_);  // the outstanding read's start
  bool front_paid_ ABSL_GUARDED_BY(mu_) = false;  // pending_.front()'s bytes were granted
  int issuing_ ABSL_GUARDED_BY(mu_) = 0;  // Pump passes starting gRPC operations: no Finish
  bool cancel_wanted_ ABSL_GUARDED_BY(mu_) = false;  // end an outstanding write by cancelling
  bool cancel_sent_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time error_at_ ABSL_GUARDED_BY(mu_);        // when error_ was set
  absl::Time last_activity_ ABSL_GUARDED_BY(mu_);   // request read or response taken
  absl::Time write_started_ ABSL_GUARDED_BY(mu_);
  uint64_t requests_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t samples_sent_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t bytes_sent_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace sophon

#endif  // SOPHON_SERVER_FETCH_REACTOR_H_
