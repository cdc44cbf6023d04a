#include "server/unary_reactor.h"

#include <grpcpp/server_context.h>

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/service_impl.h"
#include "server/stream_registry.h"
#include "sophon/net/grpc_util.h"
#include "sophon/net/refusal.h"

namespace sophon {
namespace {

// A unary call: one request, one response.
class AnswerOnce final : public UnaryReactor {
 public:
  AnswerOnce(SampleServiceImpl* service, grpc::CallbackServerContext* context, UnaryMethod method,
             Answer answer)
      : UnaryReactor(service, context, method), answer_(std::move(answer)) {}

 private:
  void OnRequest(std::string request) override {
    grpc::ByteBuffer response;
    const absl::Status status = answer_(peer(), request, &response);
    if (status.ok()) Send(std::move(response));
    End(status);
  }

  const Answer answer_;
};

}  // namespace

std::string FlattenByteBuffer(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  std::string out;
  if (!buffer.Dump(&slices).ok()) return out;
  out.reserve(buffer.Length());
  for (const grpc::Slice& s : slices) {
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return out;
}

UnaryReactor* UnaryReactor::Unary(SampleServiceImpl* service,
                                  grpc::CallbackServerContext* context, UnaryMethod method,
                                  Answer answer) {
  auto* reactor = new AnswerOnce(service, context, method, std::move(answer));
  reactor->Start();
  return reactor;
}

UnaryReactor::UnaryReactor(SampleServiceImpl* service, grpc::CallbackServerContext* context,
                           UnaryMethod method)
    : service_(service),
      context_(context),
      method_(method),
      peer_(context->peer()),
      peer_address_(PeerAddress(peer_)) {}

UnaryReactor::~UnaryReactor() = default;

void UnaryReactor::Start() {
  Limit limit = Limit::kMaxUnaryCalls;
  absl::Status refusal;
  refs_.fetch_add(1, std::memory_order_relaxed);  // the queue's, should it wait
  {
    absl::MutexLock lock(&mu_);
    waiting_ = true;  // before UnaryCalls can admit it (and clear it)
  }
  switch (service_->unary_calls().AdmitOrWait(peer_address_, this, &limit, &refusal)) {
    case UnaryCalls::Admission::kAdmitted: {
      {
        absl::MutexLock lock(&mu_);
        waiting_ = false;
        counted_ = true;
      }
      Unref();
      BeginRead();
      return;
    }
    case UnaryCalls::Admission::kRefused: {
      {
        absl::MutexLock lock(&mu_);
        waiting_ = false;
      }
      Unref();
      // Nothing read: gRPC holds at most the stream's initial window of it.
      service_->RecordRejection(limit, peer_, refusal);
      End(refusal, limit);
      return;
    }
    case UnaryCalls::Admission::kWaiting:
      break;
  }
  // It waits, unread, for one of the calls ahead of it to end (Admitted), or
  // until UnaryCalls times it out (WaitTimedOut).
}

void UnaryReactor::BeginRead() {
  refs_.fetch_add(1, std::memory_order_relaxed);  // the deadline's callback
  deadline_.Set(absl::ToChronoTime(absl::Now() + service_->options().read_stall_timeout),
                [this](bool fired) { OnDeadline(fired); });
  StartRead(&request_);
}

void UnaryReactor::Admitted() {
  bool release = false;
  bool go = false;
  {
    absl::MutexLock lock(&mu_);
    counted_ = true;
    waiting_ = false;
    release = done_;
    go = !ended_;
    starting_ = go;
  }
  if (release) service_->unary_calls().Release(peer_address_);
  if (go) {
    BeginRead();
    // An End that came meanwhile left the Finish to this thread.
    bool finish = false;
    absl::Status status;
    std::optional<Limit> refusal;
    {
      absl::MutexLock lock(&mu_);
      starting_ = false;
      if (ended_ && !finish_sent_ && !writing_) {
        finish_sent_ = true;
        finish = true;
        status = end_status_;
        refusal = end_refusal_;
      }
    }
    if (finish) FinishNow(status, refusal);
  }
  Unref();  // the queue's
}

void UnaryReactor::WaitTimedOut(const absl::Status& status, Limit limit) {
  {
    absl::MutexLock lock(&mu_);
    waiting_ = false;
  }
  service_->RecordRejection(limit, peer_, status);
  End(status, limit);
  Unref();  // the queue's
}

void UnaryReactor::OnDeadline(bool fired) {
  bool expired = false;
  if (fired) {
    absl::MutexLock lock(&mu_);
    expired = !request_done_ && !ended_;
  }
  if (expired) {
    const absl::Status status = absl::ResourceExhaustedError(absl::StrCat(
        method().name, ": the request message did not arrive whole within ",
        absl::FormatDuration(service_->options().read_stall_timeout),
        " of the call (ServiceOptions.read_stall_timeout)"));
    service_->RecordRejection(Limit::kReadStallTimeout, peer_, status);
    End(status, Limit::kReadStallTimeout);
  }
  Unref();
}

void UnaryReactor::OnReadDone(bool ok) {
  deadline_.Cancel();  // its callback runs (not fired) if it has not
  {
    absl::MutexLock lock(&mu_);
    if (ended_) return;
    request_done_ = true;
  }
  if (!ok) {
    // The client half-closed without a message, or the call ended (a
    // cancel, or a message over gRPC's own receive limit).
    End(absl::InvalidArgumentError(
        absl::StrCat(method().name, ": the call carried no request message")));
    return;
  }
  const absl::Status size = CheckUnaryRequestBytes(method_, static_cast<int64_t>(request_.Length()));
  if (!size.ok()) {
    service_->RecordRejection(Limit::kMaxRequestBytes, peer_, size);
    End(size, Limit::kMaxRequestBytes);
    return;
  }
  std::string bytes = FlattenByteBuffer(request_);
  request_.Clear();
  OnRequest(std::move(bytes));
}

void UnaryReactor::Send(grpc::ByteBuffer message) {
  {
    absl::MutexLock lock(&mu_);
    if (ended_) return;
    if (writing_) {
      next_ = std::move(message);
      return;
    }
    writing_ = true;
    out_ = std::move(message);
  }
  StartWrite(&out_);  // out_ is gRPC's until OnWriteDone
}

void UnaryReactor::OnWriteDone(bool ok) {
  bool write = false;
  bool finish = false;
  absl::Status status;
  std::optional<Limit> refusal;
  {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (ended_) {
      if (!finish_sent_) {
        finish_sent_ = true;
        finish = true;
        status = end_status_;
        refusal = end_refusal_;
      }
    } else if (ok && next_.has_value()) {
      out_ = std::move(*next_);
      next_.reset();
      writing_ = true;
      write = true;
    }
  }
  if (finish) FinishNow(status, refusal);
  if (write) StartWrite(&out_);
  // A failed write (the client went away) leaves the call to OnCancel.
}

void UnaryReactor::End(const absl::Status& status, std::optional<Limit> refusal) {
  {
    absl::MutexLock lock(&mu_);
    if (ended_) return;
    ended_ = true;
    next_.reset();
    if (writing_ || starting_) {  // finished by OnWriteDone or Admitted
      end_status_ = status;
      end_refusal_ = refusal;
      return;
    }
    finish_sent_ = true;
  }
  FinishNow(status, refusal);
}

void UnaryReactor::FinishNow(const absl::Status& status, std::optional<Limit> refusal) {
  if (refusal.has_value()) {
    context_->AddTrailingMetadata(kRefusalMetadataKey, RefusalName(*refusal));
  }
  Finish(ToGrpcStatus(status));
}

void UnaryReactor::OnCancel() {
  End(absl::CancelledError(
      absl::StrCat(method().name, ": the client cancelled the call or went away")));
}

void UnaryReactor::OnDone() {
  OnCallDone();
  bool release = false;
  bool waiting = false;
  {
    absl::MutexLock lock(&mu_);
    done_ = true;
    release = counted_;
    waiting = waiting_;
  }
  if (waiting && service_->unary_calls().StopWaiting(peer_address_, this)) {
    {
      absl::MutexLock lock(&mu_);
      waiting_ = false;
    }
    Unref();  // the queue's
  }
  // Admitted before done_ was set: released here; after: by Admitted.
  if (release) service_->unary_calls().Release(peer_address_);
  deadline_.Cancel();
  Unref();
}

void UnaryReactor::Unref() {
  if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
}

}  // namespace sophon
