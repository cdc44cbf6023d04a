#include "tools/bench/load_streams.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "sophon/net/wire.h"

namespace sophon {

std::string StreamEndName(const StreamEnd& end) {
  if (end.cancelled_by_client) return "open_at_end";
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(end.code));
}

ReceiptLedger::ReceiptLedger(uint64_t num_samples, int epochs)
    : num_samples_(num_samples),
      epochs_(epochs),
      counts_(num_samples * static_cast<uint64_t>(epochs)) {}

void ReceiptLedger::Record(int epoch, uint64_t id) {
  if (epoch < 0 || epoch >= epochs_ || id >= num_samples_) {
    out_of_range_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  counts_[static_cast<uint64_t>(epoch) * num_samples_ + id].fetch_add(1, std::memory_order_relaxed);
}

ReceiptLedger::Check ReceiptLedger::Verify() const {
  Check c;
  c.expected = counts_.size();
  for (const std::atomic<uint32_t>& n : counts_) {
    const uint32_t v = n.load(std::memory_order_relaxed);
    if (v == 0) ++c.missing;
    if (v == 1) ++c.exactly_once;
    if (v > 1) ++c.duplicated;
  }
  c.out_of_range = out_of_range_.load();
  return c;
}

// ---------------------------------------------------------------- StreamBase

void StreamBase::Cancel() {
  {
    absl::MutexLock lock(&mu_);
    if (end_.done) return;
    cancel_requested_ = true;
  }
  context_.TryCancel();
}

bool StreamBase::WaitDone(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto is_done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return end_.done; };
  return mu_.AwaitWithTimeout(absl::Condition(&is_done), timeout);
}

StreamEnd StreamBase::end() const {
  absl::MutexLock lock(&mu_);
  return end_;
}

bool StreamBase::done() const {
  absl::MutexLock lock(&mu_);
  return end_.done;
}

void StreamBase::RecordEnd(const grpc::Status& status) {
  absl::MutexLock lock(&mu_);
  end_.code = status.error_code();
  end_.message = status.error_message();
  end_.cancelled_by_client =
      cancel_requested_ && status.error_code() == grpc::StatusCode::CANCELLED;
  end_.seconds = absl::ToDoubleSeconds(absl::Now() - start_);
  end_.done = true;
}

// ---------------------------------------------------------------- EpochStream

EpochStream::EpochStream(v1::SampleService::Stub* stub, std::vector<uint64_t> ids,
                         const FetchParams& params, TrainerCounters* counters,
                         ReceiptLedger* ledger, std::function<void()> on_done)
    : stub_(stub),
      ids_(std::move(ids)),
      params_(params),
      expected_payload_bytes_(GetStageInfo(params.stage).layout == Layout::kOpaque
                                  ? -1
                                  : StagePayloadBytes(params.stage, params.augment.crop_size)),
      counters_(counters),
      ledger_(ledger),
      on_done_(std::move(on_done)) {
  uint64_t max_id = 0;
  for (uint64_t id : ids_) max_id = std::max(max_id, id);
  requested_.assign(ids_.empty() ? 0 : max_id + 1, false);
  for (uint64_t id : ids_) requested_[id] = true;
}

void EpochStream::Start() {
  MarkStart();
  stub_->async()->Fetch(&context_, this);
  StartRead(&response_);
  MaybeWrite();
  StartCall();
}

void EpochStream::MaybeWrite() {
  bool write = false;
  {
    absl::MutexLock lock(&mu_);
    if (writing_ || writes_over_) return;
    if (next_ >= ids_.size()) {
      writes_over_ = true;
    } else {
      const size_t n = std::min(ids_.size() - next_, static_cast<size_t>(params_.ids_per_request));
      const uint64_t outstanding = next_ - received_;
      if (params_.window > 0 && outstanding > 0 &&
          outstanding + n > static_cast<uint64_t>(params_.window)) {
        return;  // a read makes room
      }
      FetchRequestBuilder builder(params_.epoch, params_.seed, params_.augment);
      for (size_t k = 0; k < n; ++k) builder.Add(ids_[next_++], params_.stage);
      request_ = builder.Take();
      writing_ = true;
      write = true;
    }
  }
  // Outside the lock: a reactor's operations may run callbacks inline.
  if (write) {
    StartWrite(&request_);
  } else {
    StartWritesDone();
  }
}

void EpochStream::OnWriteDone(bool ok) {
  {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) writes_over_ = true;  // the stream broke: OnDone tells how
  }
  MaybeWrite();
}

void EpochStream::OnReadDone(bool ok) {
  if (!ok) return;
  for (v1::Sample& sample : *response_.mutable_samples()) Consume(&sample);
  {
    absl::MutexLock lock(&mu_);
    received_ += static_cast<uint64_t>(response_.samples_size());
  }
  response_.Clear();
  MaybeWrite();
  StartRead(&response_);
}

void EpochStream::Consume(v1::Sample* sample) {
  const uint64_t id = sample->id();
  ledger_->Record(static_cast<int>(params_.epoch), id);
  if (id >= requested_.size() || !requested_[id]) {
    counters_->foreign.fetch_add(1, std::memory_order_relaxed);
  }
  if (sample->error_code() != 0) {
    counters_->errors.fetch_add(1, std::memory_order_relaxed);
    absl::MutexLock lock(&counters_->mu);
    ++counters_->errors_by_code[sample->error_code()];
    return;
  }
  const int64_t bytes = static_cast<int64_t>(sample->payload().size());
  if (sample->stage() != StageToProto(params_.stage) ||
      (expected_payload_bytes_ >= 0 && bytes != expected_payload_bytes_)) {
    counters_->bad_payload.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  counters_->samples.fetch_add(1, std::memory_order_relaxed);
  counters_->bytes.fetch_add(static_cast<uint64_t>(bytes), std::memory_order_relaxed);
}

void EpochStream::OnDone(const grpc::Status& status) {
  RecordEnd(status);
  on_done_();
}

// ---------------------------------------------------------------- IdleStream

void IdleStream::Start() {
  MarkStart();
  stub_->async()->Fetch(&context_, this);
  StartRead(&response_);  // waits for the end; the server has nothing to send
  StartCall();
}

void IdleStream::OnReadDone(bool ok) {
  if (!ok) return;
  messages_.fetch_add(1);
  StartRead(&response_);
}

void IdleStream::OnDone(const grpc::Status& status) { RecordEnd(status); }

// ---------------------------------------------------------------- HostileStream

void HostileStream::Start() {
  MarkStart();
  stub_->async()->Fetch(&context_, this);
  WriteNext();
  StartCall();  // and never a read
}

void HostileStream::WriteNext() {
  if (next_ >= ids_.size()) return;  // keeps the stream open: no WritesDone
  FetchRequestBuilder builder(params_.epoch, params_.seed, params_.augment);
  while (next_ < ids_.size() && builder.size() < params_.ids_per_request) {
    builder.Add(ids_[next_++], params_.stage);
  }
  request_ = builder.Take();
  StartWrite(&request_);
}

void HostileStream::OnWriteDone(bool ok) {
  if (!ok) return;
  ids_written_.fetch_add(static_cast<uint64_t>(request_.samples_size()));
  WriteNext();
}

void HostileStream::OnDone(const grpc::Status& status) { RecordEnd(status); }

}  // namespace sophon
