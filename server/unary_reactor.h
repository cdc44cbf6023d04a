// One call of a unary method (manifest, pages, paths, stats, health), served
// as a stream (streamed_service.h) so that the service sees the call before
// gRPC reads its request:
// 1. the call is counted in UnaryCalls (ServiceOptions.max_unary_calls_per_peer,
//    max_unary_calls) before anything is read; a call over either waits
//    unread for a slot (unary_calls.h), at most
//    ServiceOptions.unary_wait_timeout, then is refused (RESOURCE_EXHAUSTED
//    naming the limit), having made gRPC hold at most the stream's initial
//    window (ServiceOptions.stream_window_bytes) of its request; over
//    max_waiting_unary_calls waiting, it is refused at once;
// 2. the request is read with a deadline: a message not whole
//    ServiceOptions.read_stall_timeout after the call was admitted (for a
//    call that waited, after it got its slot) ends the call
//    (RESOURCE_EXHAUSTED, read_stall_timeout), and what gRPC held of it goes;
// 3. the message is checked against its method's limit (request_limits.h)
//    before it is parsed: over it, RESOURCE_EXHAUSTED naming the method and
//    the limit (max_request_bytes in the sophon-refusal trailer).
//
// Why not refuse by the announced size, before the body is received: gRPC
// 1.51 (Debian 12 and 13 both ship 1.51.1) shows an application no byte of a
// message before all of it has arrived. Its HTTP/2 transport keeps a stream's
// DATA in one buffer (chttp2 frame_storage) and takes a message out of it only
// whole (grpc_deframe_unprocessed_incoming_frames, which reads the 5-byte
// prefix but checks no size); while a read is pending it grows the stream's
// window to the rest of the announced message (StreamFlowControl's
// min_progress_size, up to 1 MiB ahead at a time, again as bytes arrive), and
// without one it grants nothing past the initial window. The receive limit
// (GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, the message_size filter) is checked
// once the message is whole, one value for every method: per-method limits
// from a service config apply on clients only ("Per-method config is only
// available on the client", message_size_filter.cc), server interceptors see
// a message after it is received, and the installed headers offer no way to
// add a core filter (which would see whole messages too). So a request whose
// prefix announces more than its method's limit is refused when it is whole;
// a half-sent one holds what its client sent (up to its announced size, and
// gRPC's resource quota) until the deadline. What bounds it: the stream's
// initial window until the read (step 1), the unary call caps on how many
// reads are pending per address and in all, and read_stall_timeout on how
// long each is (step 2). Newer gRPC checks the prefix in the transport as it
// arrives (chttp2's check_incoming_message_size, against the call's or the
// channel's receive limit).
#ifndef SOPHON_SERVER_UNARY_REACTOR_H_
#define SOPHON_SERVER_UNARY_REACTOR_H_

#include <grpcpp/alarm.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/server_callback.h>

#include <atomic>
#include <functional>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "server/limit.h"
#include "server/request_limits.h"
#include "server/unary_calls.h"

namespace grpc {
class CallbackServerContext;
}  // namespace grpc

namespace sophon {

class SampleServiceImpl;

class UnaryReactor : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>,
                     private UnaryCalls::Waiter {
 public:
  // Answers a unary call: fills `response` from `request` (within its
  // method's limit, not yet parsed) and returns OK, or returns the error the
  // call ends with. `peer` is the client's gRPC peer string.
  using Answer = std::function<absl::Status(const std::string& peer, const std::string& request,
                                            grpc::ByteBuffer* response)>;

  // A reactor for a call of unary `method`, answered by `answer` (one
  // response, then the status).
  static UnaryReactor* Unary(SampleServiceImpl* service, grpc::CallbackServerContext* context,
                             UnaryMethod method, Answer answer);

  void OnReadDone(bool ok) final;
  void OnWriteDone(bool ok) final;
  void OnCancel() final;
  void OnDone() final;

 protected:
  // `service` must outlive every call.
  UnaryReactor(SampleServiceImpl* service, grpc::CallbackServerContext* context,
               UnaryMethod method);
  ~UnaryReactor() override;
  // Counts the call and reads its request (steps 1 and 2 above). Called once,
  // by whoever made the reactor, right after making it.
  void Start();

  // The request arrived whole and within its method's limit. The call ends
  // with End (after Send, for a response).
  virtual void OnRequest(std::string request) = 0;
  // The call is over (gRPC's OnDone), before the reactor goes. Runs on the
  // gRPC thread that ended the call, not on gRPC's executor
  // (unary_call_handler.h): short, never blocking, and taking no lock held
  // around End.
  virtual void OnCallDone() {}

  // Writes `message` to the client; while a write is outstanding, keeps only
  // the latest message to write after it. Nothing once the call has ended.
  // Thread-safe.
  void Send(grpc::ByteBuffer message);
  // Ends the call with `status`, once (later calls do nothing), after the
  // write outstanding if any; `refusal` names the limit it hit (sent in the
  // sophon-refusal trailer). Thread-safe.
  void End(const absl::Status& status, std::optional<Limit> refusal = std::nullopt);

  SampleServiceImpl* service() const { return service_; }
  const std::string& peer() const { return peer_; }
  const UnaryMethodInfo& method() const { return MethodInfo(method_); }

 private:
  // The call got its slot after waiting (UnaryCalls::Waiter).
  void Admitted() override;
  // Sets the request deadline and starts the read.
  void BeginRead();
  // The request deadline fired (`fired`) or was cancelled.
  void OnDeadline(bool fired);
  // The wait for a slot timed out (UnaryCalls::Waiter): ends the call.
  void WaitTimedOut(const absl::Status& status, Limit limit) override;
  void FinishNow(const absl::Status& status, std::optional<Limit> refusal);
  void Unref();

  SampleServiceImpl* const service_;
  grpc::CallbackServerContext* const context_;
  const UnaryMethod method_;
  const std::string peer_;          // gRPC's peer string
  const std::string peer_address_;  // the client address UnaryCalls counts by
  grpc::ByteBuffer request_;        // the read's target; gRPC's until OnReadDone
  grpc::Alarm deadline_;
  // gRPC (until OnDone), the deadline's callback when set, and UnaryCalls'
  // queue while the call waits there.
  std::atomic<int> refs_{1};

  absl::Mutex mu_;
  // Admitted to UnaryCalls (released once, by OnDone or by Admitted if the
  // call was done by then).
  bool counted_ ABSL_GUARDED_BY(mu_) = false;
  bool waiting_ ABSL_GUARDED_BY(mu_) = false;   // in UnaryCalls' queue
  bool starting_ ABSL_GUARDED_BY(mu_) = false;  // Admitted is starting the read
  bool done_ ABSL_GUARDED_BY(mu_) = false;      // OnDone ran
  bool request_done_ ABSL_GUARDED_BY(mu_) = false;  // the read completed
  bool ended_ ABSL_GUARDED_BY(mu_) = false;         // End was called
  bool finish_sent_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  // The message being written: set under mu_ while no write is outstanding,
  // gRPC's while writing_.
  grpc::ByteBuffer out_;
  std::optional<grpc::ByteBuffer> next_ ABSL_GUARDED_BY(mu_);
  absl::Status end_status_ ABSL_GUARDED_BY(mu_);
  std::optional<Limit> end_refusal_ ABSL_GUARDED_BY(mu_);
};

// The bytes of `buffer`, in one string.
std::string FlattenByteBuffer(const grpc::ByteBuffer& buffer);

}  // namespace sophon

#endif  // SOPHON_SERVER_UNARY_REACTOR_H_
