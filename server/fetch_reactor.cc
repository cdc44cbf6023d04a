#include "server/fetch_reactor.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/unary_reactor.h"
#include "sophon/net/draining.h"
#include "sophon/net/grpc_util.h"
#include "sophon/net/refusal.h"
#include "sophon/net/wire.h"
#include "spdlog/spdlog.h"

namespace sophon {
namespace {

std::atomic<uint64_t> next_stream_id{1};

constexpr int64_t kPendingSampleBytes = sizeof(CheckedSample);

// What a stream may hold in flight before its client has taken any of it:
// two response messages' worth; every byte the client takes adds one, up to
// max_stream_inflight_bytes.
int64_t StartingStreamBytes(const ServiceOptions& options) {
  return 2 * options.max_message_bytes;
}

}  // namespace

FetchReactor::FetchReactor(SampleServiceImpl* service, grpc::CallbackServerContext* context)
    : service_(service),
      context_(context),
      peer_(context->peer()),
      peer_address_(PeerAddress(peer_)),
      stream_id_(next_stream_id.fetch_add(1)),
      opened_(service->Now()) {
  {
    absl::MutexLock lock(&mu_);
    last_activity_ = opened_;
  }
  Limit limit = Limit::kMaxStreams;
  const absl::Status admitted = service_->registry().Register(peer_address_, this, &limit);
  if (!admitted.ok()) {
    service_->RecordRejection(limit, peer_, admitted);
    {
      absl::MutexLock lock(&mu_);
      error_ = admitted;
      finished_ = true;
    }
    if (limit == Limit::kDraining) context_->AddTrailingMetadata(kDrainingMetadataKey, "1");
    context_->AddTrailingMetadata(kRefusalMetadataKey, RefusalName(limit));
    Finish(ToGrpcStatus(admitted));
    return;
  }
  registered_ = true;
  service_->budget().Join(peer_address_);  // its address keeps its fair share
  service_->stats().StreamOpened();
  spdlog::debug("stream {} from {} opened", stream_id_, peer_);
  Pump();  // starts the first read
}

FetchReactor::~FetchReactor() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  // No other thread refers to us any more. Samples that were ready but never
  // written, and a grant never used, give their reservation back now.
  if (stream_bytes_ > 0) service_->budget().Release(peer_address_, stream_bytes_);
  service_->stats().AddInflight(-inflight_samples_);
  ClearPendingLocked();
}

void FetchReactor::Unref() {
  if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
}

void FetchReactor::ClearPendingLocked() {
  service_->stats().AddPendingRequestBytes(-kPendingSampleBytes *
                                           static_cast<int64_t>(pending_.size()));
  pending_.clear();
  front_paid_ = false;  // its bytes stay in stream_bytes_ until the end
}

void FetchReactor::FailLocked(absl::Status status, std::optional<Limit> reason) {
  if (error_.ok()) {
    error_ = std::move(status);
    error_reason_ = reason;
    error_at_ = service_->Now();
  }
  ClearPendingLocked();
  abandoned_.store(true, std::memory_order_relaxed);
  // A failed stream gives up its place in the budget's queue at once (it
  // could be the head, holding back everyone behind it).
  if (awaiting_grant_ && service_->budget().Cancel(this)) {
    awaiting_grant_ = false;
    Unref();  // the budget's; never the last: whoever fails us holds one
  }
  ReleaseSlotIfDoneLocked();
}

void FetchReactor::ReleaseSlotIfDoneLocked() {
  if (slot_ != Slot::kWaiting && slot_ != Slot::kHeld) return;
  // A read outstanding still receives (the slot goes back once it is done).
  if (reading_) return;
  if (error_.ok() && !draining_ && !reads_done_ && !finished_) return;
  slot_ = Slot::kDone;
  // Queued: the slots' reference comes back (never the last: whoever calls
  // us holds one). Being asked for (Acquire not returned yet): Pump gives
  // it back once it returns.
  if (service_->read_slots().Release(this)) Unref();
}

absl::Status FetchReactor::HandleRequestLocked(Limit* limit) {
  ++requests_;
  const std::string bytes = FlattenByteBuffer(read_buf_);
  read_buf_.Clear();
  v1::FetchRequest request;
  absl::Status parsed = ParseFetchRequest(bytes, service_->options(), &request, limit);
  absl::StatusOr<CheckedRequest> checked =
      parsed.ok() ? CheckFetchRequest(request, service_->source(), service_->options(), limit)
                  : absl::StatusOr<CheckedRequest>(parsed);
  if (!checked.ok()) {
    const absl::Status status(checked.status().code(),
                              absl::StrCat("request ", requests_, " on this stream: ",
                                           checked.status().message()));
    FailLocked(status, *limit);
    return status;
  }
  message_.pipeline = std::move(checked->pipeline);
  message_.seed = checked->seed;
  message_.epoch = checked->epoch;
  message_.key_offset = checked->key_offset;
  for (CheckedSample& s : checked->samples) pending_.push_back(s);
  service_->stats().AddPendingRequestBytes(kPendingSampleBytes *
                                           static_cast<int64_t>(checked->samples.size()));
  return absl::OkStatus();
}

StreamActivity FetchReactor::ActivityLocked() const {
  StreamActivity a;
  a.writing = writing_;
  a.write_started = write_started_;
  // Waiting for a read slot is the server's turn too: whatever the client
  // sent is not being read.
  a.server_busy = !pending_.empty() || awaiting_grant_ || jobs_running_ > 0 ||
                  !ready_.empty() || slot_ == Slot::kWaiting;
  a.last_activity = last_activity_;
  return a;
}

void FetchReactor::Pump() {
  const ServiceOptions& options = service_->options();
  // Each pass decides under the lock and acts outside it. A pass that starts
  // gRPC operations holds `issuing_`, which keeps every thread from deciding
  // to Finish meanwhile (after Finish, gRPC may destroy the call once nothing
  // is outstanding); it then runs another pass, which may finish.
  while (true) {
    std::vector<CheckedSample> jobs;
    Message job_message;
    v1::FetchResponse response;
    bool start_write = false, start_read = false, cancel = false, finish = false;
    bool ask_slot = false;
    bool drain_finish = false;  // tells the client so in the trailing metadata
    absl::Status finish_status;
    std::optional<Limit> finish_reason;  // the sophon-refusal trailer of a failed stream
    {
      absl::MutexLock lock(&mu_);
      if (finished_) return;
      // Admit pending samples while the stream and the server have room.
      int admitted = 0;
      while (error_.ok() && !awaiting_grant_ && !pending_.empty() &&
             inflight_samples_ < options.max_inflight_per_stream) {
        CheckedSample& s = pending_.front();
        if (s.refusal != SampleRefusal::kNone) {  // answered with its error: no work, no bytes
          Ready r;
          service_->FailSample(s.id, s.stage, SampleError(s, service_->source(), options),
                               &r.sample);
          ready_.push_back(std::move(r));
        } else {
          if (!front_paid_) {
            // Until its client has taken some of it, a stream may hold only
            // a little ahead of what it took: a client that never reads
            // cannot make the prep workers prepare a budget's worth of
            // samples it will never take (CPU the others wait for).
            const int64_t allowed =
                std::min<int64_t>(options.max_stream_inflight_bytes,
                                  StartingStreamBytes(options) + static_cast<int64_t>(bytes_sent_));
            if (stream_bytes_ > 0 && stream_bytes_ + s.bytes > allowed) break;
            Ref();  // the budget's while we wait; given back at once if not
            if (!service_->budget().Acquire(peer_address_, s.bytes, this)) {
              awaiting_grant_ = true;
              break;
            }
            Unref();  // never the last: whoever runs Pump holds one
            stream_bytes_ += s.bytes;
          }
          front_paid_ = false;
          ++jobs_running_;
          Ref();  // held by the job
          jobs.push_back(s);
        }
        ++inflight_samples_;
        ++admitted;
        service_->stats().AddInflight(1);
        service_->stats().ObserveStreamInflight(static_cast<uint32_t>(inflight_samples_));
        pending_.pop_front();
      }
      if (admitted > 0) service_->stats().AddPendingRequestBytes(-kPendingSampleBytes * admitted);
      if (!jobs.empty()) job_message = message_;
      const absl::Time now = service_->Now();
      // Write what is ready, one message at a time.
      if (error_.ok() && !writing_ && !ready_.empty()) {
        int64_t payload = 0;
        while (!ready_.empty() && write_samples_ < options.max_samples_per_message &&
               (write_samples_ == 0 ||
                payload + static_cast<int64_t>(ready_.front().sample.payload().size()) <=
                    options.max_message_bytes)) {
          Ready& r = ready_.front();
          payload += static_cast<int64_t>(r.sample.payload().size());
          write_bytes_ += r.bytes;
          ++write_samples_;
          *response.add_samples() = std::move(r.sample);
          ready_.pop_front();
        }
        writing_ = true;
        write_started_ = now;  // the client's turn from here
        start_write = true;
      }
      // Read the next request once this one is admitted and there is room,
      // holding a read slot (asked for before the first read).
      if (error_.ok() && !draining_ && !reading_ && !reads_done_ && pending_.empty() &&
          inflight_samples_ < options.max_inflight_per_stream &&
          stream_bytes_ < options.max_stream_inflight_bytes) {
        if (slot_ == Slot::kHeld) {
          reading_ = true;
          read_started_ = now;
          start_read = true;
        } else if (slot_ == Slot::kNone) {
          slot_ = Slot::kWaiting;
          ask_slot = true;
        }
      }
      // A write the client does not take can only be ended by a cancel.
      if (cancel_wanted_ && !cancel_sent_ && writing_) {
        cancel_sent_ = true;
        cancel = true;
      }
      if (start_write || start_read || cancel || ask_slot) {
        ++issuing_;
      } else if (issuing_ == 0 && !writing_ &&
                 (!error_.ok() || ((reads_done_ || draining_) && pending_.empty() &&
                                   jobs_running_ == 0 && ready_.empty()))) {
        // Finish: on an error once no write is outstanding (a client that
        // does not read must not hold the stream open); otherwise once the
        // client has half-closed, or the server drains, and everything
        // admitted is written.
        finished_ = true;
        finish = true;
        finish_status = error_;
        finish_reason = error_reason_;
        if (draining_) {
          drain_finish = true;
          if (finish_status.ok() && !reads_done_) {
            finish_status = absl::UnavailableError(absl::StrCat(
                drain_status_.message(), ": every sample it had started was sent; ",
                handed_back_, " requested but not started were handed back"));
          }
          if (!finish_reason.has_value()) finish_reason = Limit::kDraining;
        }
        if (finish_status.ok()) finish_reason.reset();
      }
    }
    for (CheckedSample& s : jobs) {
      service_->pool().Post(stream_id_, [this, s, m = job_message] {
        v1::Sample sample;
        // A stream that has ended skips the work; OnSampleDone drops it.
        if (!abandoned_.load(std::memory_order_relaxed)) {
          service_->ProcessSample(s.stage, s.id, SampleKey{m.seed, m.epoch, m.key_offset + s.id},
                                  *m.pipeline, s.bytes, &sample);
        }
        OnSampleDone(std::move(sample), s.bytes);
        Unref();
      });
    }
    if (finish) {
      if (drain_finish) context_->AddTrailingMetadata(kDrainingMetadataKey, "1");
      if (finish_reason.has_value()) {
        context_->AddTrailingMetadata(kRefusalMetadataKey, RefusalName(*finish_reason));
      }
      Finish(ToGrpcStatus(finish_status));
      return;
    }
    if (!start_write && !start_read && !cancel && !ask_slot) return;
    if (start_write) {
      bool own = false;
      grpc::ByteBuffer encoded;
      if (grpc::SerializationTraits<v1::FetchResponse>::Serialize(response, &encoded, &own)
              .ok()) {
        write_buf_.Swap(&encoded);  // only this thread touches it while writing_
        StartWrite(&write_buf_);
      } else {
        // Cannot happen for a well-formed message; end the stream rather
        // than send something the client cannot read.
        absl::MutexLock lock(&mu_);
        writing_ = false;
        FailLocked(absl::InternalError("cannot encode a response message"), std::nullopt);
      }
    }
    if (start_read) StartRead(&read_buf_);
    if (cancel) context_->TryCancel();
    if (ask_slot) AskForSlot();
    absl::MutexLock lock(&mu_);
    --issuing_;
  }
}

void FetchReactor::AskForSlot() {
  Ref();  // the slots' while we wait; given back at once if granted now
  const bool granted = service_->read_slots().Acquire(peer_address_, peer_, this);
  bool give_back = false;
  {
    absl::MutexLock lock(&mu_);
    if (granted && slot_ == Slot::kWaiting) {
      slot_ = Slot::kHeld;
    } else if (slot_ == Slot::kDone) {
      // The stream stopped reading while we asked.
      give_back = true;
    }
    // Otherwise queued (kWaiting), or already granted on the notifier (kHeld).
  }
  // Queued when released: the slots' reference comes back. Held: a grant
  // already made may still be delivered (OnSlotGranted gives its reference
  // back).
  if (give_back && service_->read_slots().Release(this)) Unref();
  if (granted) Unref();  // never the last: whoever runs Pump holds one
}

void FetchReactor::OnSampleDone(v1::Sample sample, int64_t bytes) {
  int64_t released = 0;
  {
    absl::MutexLock lock(&mu_);
    --jobs_running_;
    if (finished_ || !error_.ok()) {  // nobody will write it: drop it now
      stream_bytes_ -= bytes;
      released = bytes;
      --inflight_samples_;
      service_->stats().AddInflight(-1);
    } else {  // never more than `bytes`: ProcessSample fails a larger sample
      ready_.push_back(Ready{std::move(sample), bytes});
    }
  }
  service_->budget().Release(peer_address_, released);
  Pump();
}

void FetchReactor::OnReadDone(bool ok) {
  absl::Status rejected;
  Limit limit = Limit::kInvalidRequest;
  {
    absl::MutexLock lock(&mu_);
    reading_ = false;
    last_activity_ = service_->Now();
    if (!ok) {
      reads_done_ = true;  // half-close, or the call ended
    } else if (error_.ok() && !finished_) {
      rejected = HandleRequestLocked(&limit);
      if (rejected.ok()) service_->read_slots().MessageCompleted(this);
    }
    ReleaseSlotIfDoneLocked();
  }
  if (!rejected.ok()) service_->RecordRejection(limit, peer_, rejected);
  Pump();
}

void FetchReactor::OnWriteDone(bool ok) {
  int64_t released = 0;
  {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    last_activity_ = service_->Now();
    released = write_bytes_;
    stream_bytes_ -= write_bytes_;
    inflight_samples_ -= write_samples_;
    service_->stats().AddInflight(-write_samples_);
    if (ok) {
      samples_sent_ += static_cast<uint64_t>(write_samples_);
      bytes_sent_ += static_cast<uint64_t>(write_buf_.Length());
    } else {
      FailLocked(absl::CancelledError("the client went away (a write failed)"), std::nullopt);
    }
    write_bytes_ = 0;
    write_samples_ = 0;
    write_buf_.Clear();
  }
  service_->budget().Release(peer_address_, released);
  Pump();
}

void FetchReactor::OnCancel() {
  {
    absl::MutexLock lock(&mu_);
    FailLocked(absl::CancelledError("the client cancelled the stream or went away"),
               std::nullopt);
  }
  Pump();
}

void FetchReactor::OnBytesGranted(int64_t bytes) {
  int64_t unused = 0;
  {
    absl::MutexLock lock(&mu_);
    awaiting_grant_ = false;
    // The grant is for pending_.front(), which cannot change while we wait
    // (nothing is admitted and nothing read meanwhile); a stream that ended
    // meanwhile gives it back at once.
    if (error_.ok() && !finished_ && !pending_.empty()) {
      stream_bytes_ += bytes;
      front_paid_ = true;
    } else {
      unused = bytes;
    }
  }
  service_->budget().Release(peer_address_, unused);
  Pump();
  Unref();
}

void FetchReactor::Evict(absl::Status why) {
  Limit limit = Limit::kStreamEvicted;
  {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    // The reaper no longer visits an evicted stream: whatever state it is in
    // (even already failed, with a write the client does not take), it ends
    // now.
    if (draining_) limit = Limit::kDraining;  // the drain ran out of time
    if (error_.ok()) FailLocked(why, limit);
    if (writing_) cancel_wanted_ = true;
  }
  service_->RecordRejection(limit, peer_, why);
  Pump();
}

void FetchReactor::Drain(absl::Status why) {
  {
    absl::MutexLock lock(&mu_);
    if (finished_ || draining_) return;
    draining_ = true;
    drain_status_ = std::move(why);
    // Samples read but not admitted are handed back: the client asks a
    // replica. Admitted ones (being prepared or ready) are still written.
    handed_back_ = pending_.size();
    ClearPendingLocked();
    if (awaiting_grant_ && service_->budget().Cancel(this)) {
      awaiting_grant_ = false;
      Unref();  // the budget's; never the last: the registry's caller holds one
    }
    ReleaseSlotIfDoneLocked();  // reads no more
  }
  Pump();
}

void FetchReactor::OnSlotGranted() {
  bool give_back = false;
  {
    absl::MutexLock lock(&mu_);
    if (slot_ == Slot::kWaiting) {
      slot_ = Slot::kHeld;
    } else if (slot_ == Slot::kDone) {
      give_back = true;  // stopped reading meanwhile (never released while queued)
    }
  }
  if (give_back) service_->read_slots().Release(this);
  Pump();
  Unref();  // the slots'
}

void FetchReactor::OnSlotTaken(absl::Status why) {
  {
    absl::MutexLock lock(&mu_);
    if (slot_ == Slot::kHeld) slot_ = Slot::kDone;  // no longer ours to give back
    if (finished_) return;
    if (error_.ok()) FailLocked(why, Limit::kReadSlotTaken);
    if (writing_) cancel_wanted_ = true;
  }
  service_->RecordRejection(Limit::kReadSlotTaken, peer_, why);
  Pump();
}

void FetchReactor::CheckIdle(absl::Time now) {
  const ServiceOptions& options = service_->options();
  absl::Status status;
  Limit limit = Limit::kIdleStreamTimeout;
  {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    if (!error_.ok()) {
      // An ended stream waits only for its outstanding write; a client that
      // does not take it within a second (or the idle timeout, if shorter)
      // is cancelled so that its bytes go back.
      if (writing_ && now - error_at_ >= std::min(absl::Seconds(1), options.idle_stream_timeout)) {
        cancel_wanted_ = true;
      } else {
        return;
      }
    } else {
      const absl::Duration idle = ClientIdleFor(ActivityLocked(), now);
      // A stream's first request is due at once; later ones may take longer.
      const absl::Duration read_limit =
          requests_ == 0 ? options.FirstRequestTimeout() : options.read_stall_timeout;
      if (writing_ && idle >= options.write_stall_timeout &&
          service_->budget().waiters() > (awaiting_grant_ ? 1 : 0)) {
        // Others wait for bytes this stream holds in a write its client does not take.
        limit = Limit::kWriteStallTimeout;
        status = absl::ResourceExhaustedError(absl::StrCat(
            "a response was not taken for ", absl::FormatDuration(idle),
            " while other streams waited for the server's memory, over the server's "
            "write_stall_timeout limit (",
            absl::FormatDuration(options.write_stall_timeout), ")"));
      } else if (reading_ && slot_ == Slot::kHeld && now - read_started_ >= read_limit &&
                 service_->read_slots().Contended(this)) {
        // Others wait for the read slot this stream holds with no request coming.
        limit = Limit::kReadStallTimeout;
        status = absl::ResourceExhaustedError(absl::StrCat(
            "the stream's read waited ",
            absl::FormatDuration(absl::Trunc(now - read_started_, absl::Milliseconds(1))),
            " for a complete request (", requests_,
            " received before) while it held a read slot another stream waited for, over the "
            "server's read_stall_timeout limit (",
            requests_ == 0 ? absl::StrCat(absl::FormatDuration(read_limit),
                                          " for a stream's first request")
                           : absl::FormatDuration(read_limit),
            ")"));
      } else if (idle >= options.idle_stream_timeout) {
        status = absl::ResourceExhaustedError(absl::StrCat(
            "the stream was idle for ", absl::FormatDuration(idle),
            " (no request and no response taken), over the server's idle_stream_timeout limit (",
            absl::FormatDuration(options.idle_stream_timeout), ")"));
      } else {
        return;
      }
      FailLocked(status, limit);
      cancel_wanted_ = writing_;
    }
  }
  if (!status.ok()) service_->RecordRejection(limit, peer_, status);
  Pump();
}

void FetchReactor::OnDone() {
  if (registered_) {
    service_->registry().Unregister(peer_address_, this);
    service_->budget().Leave(peer_address_);
    service_->stats().StreamClosed();
  }
  if (service_->budget().Cancel(this)) {
    {
      absl::MutexLock lock(&mu_);
      awaiting_grant_ = false;
    }
    Unref();  // the budget's reference; gRPC's below keeps us alive
  }
  {
    absl::MutexLock lock(&mu_);
    slot_ = Slot::kDone;  // a grant still on its way gives its slot back
  }
  if (service_->read_slots().Release(this)) Unref();  // queued: the slots' reference
  if (registered_) {
    std::string line;
    {
      absl::MutexLock lock(&mu_);
      line = absl::StrFormat(
          "stream %d from %s closed after %.1f s: %d requests, %d samples, %.1f MB sent; %s",
          stream_id_, peer_, absl::ToDoubleSeconds(service_->Now() - opened_), requests_,
          samples_sent_, bytes_sent_ / 1e6,
          !error_.ok() ? absl::StrCat(absl::StatusCodeToString(error_.code()), ": ",
                                      error_.message())
          : draining_ && !reads_done_
              ? absl::StrCat("ended by the drain: every sample started was sent, ",
                             handed_back_, " requested but not started were handed back")
              : std::string("the client finished and every sample was sent"));
    }
    service_->LogStreamEnd(line);
  }
  Unref();
}

}  // namespace sophon
