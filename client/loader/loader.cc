#include "client/loader/loader.h"

#include <pthread.h>

#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/loader/sampler.h"
#include "sophon/net/grpc_util.h"
#include "sophon/net/wire.h"
#include "spdlog/spdlog.h"

namespace sophon {
namespace {

void NameThread(std::thread& t, const std::string& name) {
  pthread_setname_np(t.native_handle(), name.substr(0, 15).c_str());
}

}  // namespace

absl::StatusOr<BadSamplePolicy> ParseBadSamplePolicy(absl::string_view name) {
  if (name == "skip") return BadSamplePolicy::kSkip;
  if (name == "fail") return BadSamplePolicy::kFail;
  return absl::InvalidArgumentError(
      absl::StrCat("bad-sample policy must be skip or fail, got '", name, "'"));
}

absl::Status LoaderOptions::Validate() const {
  if (batch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("LoaderOptions.batch_size must be >= 1 (got ", batch_size, ")"));
  }
  if (workers < 1 || workers > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("LoaderOptions.workers must be in [1, 1024] (got ", workers, ")"));
  }
  if (prefetch_batches < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LoaderOptions.prefetch_batches must be >= 1 (got ", prefetch_batches, ")"));
  }
  if (requests_per_message < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LoaderOptions.requests_per_message must be >= 1 (got ", requests_per_message, ")"));
  }
  if (world < 1 || rank < 0 || rank >= world) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LoaderOptions.rank must be in [0, world) (got rank ", rank, " of world ", world, ")"));
  }
  if (absl::Status s = pipeline.augment.Validate(); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("LoaderOptions.pipeline.augment: ", s.message()));
  }
  return absl::OkStatus();
}

absl::Status CheckJpegDecodingAgrees(const v1::Manifest& manifest, absl::string_view address,
                                     const DecodeLimits& limits) {
  if (manifest.lenient_jpeg() == limits.lenient) return absl::OkStatus();
  const auto describe = [](bool lenient) {
    return lenient ? "leniently (accepting corrupt-data warnings)" : "strictly";
  };
  return absl::FailedPreconditionError(absl::StrCat(
      "storage server ", address, " decodes JPEGs ", describe(manifest.lenient_jpeg()),
      " but this training node ", describe(limits.lenient),
      " (LoaderOptions.pipeline.limits.lenient): a sample with corrupt data would succeed on "
      "one side and fail on the other, so batches would depend on where each sample is "
      "decoded. Give both or neither of sophon-server --lenient-jpeg and sophon-train "
      "--lenient-jpeg (the server is ",
      manifest.lenient_jpeg() ? "lenient" : "strict", ", this node ",
      limits.lenient ? "lenient" : "strict", ")"));
}

absl::StatusOr<std::unique_ptr<Loader>> Loader::Create(SampleClient* client,
                                                       const LoaderOptions& options,
                                                       OffloadPolicy* policy) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  if (absl::Status s =
          CheckJpegDecodingAgrees(client->manifest(), client->address(), options.pipeline.limits);
      !s.ok()) {
    return s;
  }
  return std::unique_ptr<Loader>(new Loader(client, options, policy));
}

Loader::Loader(SampleClient* client, const LoaderOptions& options, OffloadPolicy* policy)
    : client_(client),
      options_(options),
      policy_(policy),
      sample_floats_(3LL * options.pipeline.augment.crop_size *
                     options.pipeline.augment.crop_size) {}

Loader::~Loader() { Stop(); }

absl::Status Loader::StartEpoch(uint64_t epoch, int64_t max_batches) {
  Stop();  // ends whatever is left of the previous epoch
  const v1::Manifest& manifest = client_->manifest();
  epoch_ = epoch;
  order_ = EpochOrder(options_.seed, epoch, manifest.num_samples(), options_.shuffle,
                      options_.rank, options_.world);
  if (absl::Status s = policy_->BeginEpoch(epoch, order_); !s.ok()) return s;
  position_of_id_.assign(manifest.num_samples(), -1);
  for (size_t i = 0; i < order_.size(); ++i) position_of_id_[order_[i]] = static_cast<int64_t>(i);
  const int64_t n = static_cast<int64_t>(order_.size());
  const int64_t b = options_.batch_size;
  num_batches_ = options_.drop_last ? n / b : (n + b - 1) / b;
  if (max_batches > 0) num_batches_ = std::min(num_batches_, max_batches);
  {
    absl::MutexLock lock(&mu_);
    pending_.clear();
    work_.clear();
    next_batch_ = 0;
    opened_batches_ = 0;
    received_ = 0;
    requested_ = 0;
    stream_done_ = false;
    stopping_ = false;
    error_ = absl::OkStatus();
    stats_ = LoaderEpochStats();
    sender_has_buffer_ = false;
    queued_payload_bytes_ = 0;
    opened_at_break_ = 0;
    NotePeaksLocked();
  }
  {
    absl::MutexLock lock(&mu_);
    call_ = client_->OpenFetch();
    stream_gen_ = 0;
  }
  threads_.emplace_back([this] { SendLoop(); });
  NameThread(threads_.back(), "sophon-send");
  threads_.emplace_back([this] { ReceiveLoop(); });
  NameThread(threads_.back(), "sophon-recv");
  for (int i = 0; i < options_.workers; ++i) {
    threads_.emplace_back([this] { WorkerLoop(); });
    NameThread(threads_.back(), absl::StrCat("sophon-prep-", i));
  }
  return absl::OkStatus();
}

void Loader::FailLocked(absl::Status status) {
  if (error_.ok()) error_ = std::move(status);
}

void Loader::NotePeaksLocked() {
  const int buffers = static_cast<int>(pending_.size() + spare_images_.size()) +
                      (sender_has_buffer_ ? 1 : 0);
  stats_.peak_batch_buffers = std::max(stats_.peak_batch_buffers, buffers);
  stats_.peak_queued_payload_bytes =
      std::max(stats_.peak_queued_payload_bytes, queued_payload_bytes_);
}

void Loader::WriteRequests(FetchCall* call,
                           const std::vector<std::pair<uint64_t, Stage>>& requests) {
  FetchRequestBuilder builder(epoch_, options_.seed, options_.pipeline.augment);
  for (size_t i = 0; i < requests.size(); ++i) {
    builder.Add(requests[i].first, requests[i].second);
    if (builder.size() == options_.requests_per_message || i + 1 == requests.size()) {
      if (!call->Write(builder.Take())) return;  // the stream broke: see ReceiveLoop
    }
  }
}

void Loader::ResendIfReconnected(uint64_t* gen, std::shared_ptr<FetchCall>* call) {
  std::vector<std::pair<uint64_t, Stage>> missing;
  size_t owed = 0;  // of batches registered before the stream ended
  {
    absl::MutexLock lock(&mu_);
    if (stream_gen_ == *gen) return;
    *gen = stream_gen_;
    *call = call_;
    for (const auto& [index, batch] : pending_) {
      for (int i = 0; i < batch->n; ++i) {
        if (batch->arrived[i]) continue;
        missing.emplace_back(batch->ids[i], batch->assigned[i].stage);
        if (index < opened_at_break_) ++owed;
      }
    }
    stats_.resent += missing.size();
  }
  if (missing.empty()) return;
  // Batches the trainer made room for while the stream was down were
  // written to the dead stream: they are requested here too.
  spdlog::info("requesting again from storage server {} the {} samples not received yet: {} "
               "owed when the stream ended, {} requested on it after that",
               client_->address(), missing.size(), owed, missing.size() - owed);
  // A failed write means this stream broke too: the receiver re-opens it and
  // the next call resends again.
  WriteRequests(call->get(), missing);
}

// The only writer of requests. Each batch is registered (under mu_) before its
// requests go out, so replies find it; a batch registered before a reconnect
// has its missing samples resent on the new stream before any later batch.
void Loader::SendLoop() {
  const v1::Manifest& manifest = client_->manifest();
  const int64_t b = options_.batch_size;
  const int64_t total = options_.drop_last ? num_batches_ * b : static_cast<int64_t>(order_.size());
  uint64_t gen = 0;
  std::shared_ptr<FetchCall> call;
  {
    absl::MutexLock lock(&mu_);
    gen = stream_gen_;
    call = call_;
  }
  for (int64_t k = 0; k < num_batches_; ++k) {
    auto batch = std::make_unique<PendingBatch>();
    batch->index = k;
    const int64_t begin = k * b;
    const int64_t end = std::min(begin + b, total);
    batch->n = static_cast<int>(end - begin);
    {
      absl::MutexLock lock(&mu_);
      if (!spare_images_.empty()) {
        batch->images = std::move(spare_images_.back());
        spare_images_.pop_back();
      }
      sender_has_buffer_ = true;
      NotePeaksLocked();
    }
    batch->images.resize(static_cast<size_t>(batch->n) * sample_floats_);
    batch->bad.assign(batch->n, 0);
    batch->arrived.assign(batch->n, 0);
    batch->remaining = batch->n;
    for (int64_t p = begin; p < end; ++p) {
      batch->ids.push_back(order_[p]);
      batch->labels.push_back(manifest.labels(static_cast<int>(order_[p])));
    }
    // Waits for room; a stream re-opened meanwhile gets the missing requests
    // first (the trainer may be waiting for them to make room).
    bool go = true;
    while (true) {
      bool reconnected = false;
      {
        absl::MutexLock lock(&mu_);
        auto has_room = [this, gen]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
          return opened_batches_ - next_batch_ < options_.prefetch_batches || stopping_ ||
                 !error_.ok() || stream_gen_ != gen;
        };
        mu_.Await(absl::Condition(&has_room));
        go = !stopping_ && error_.ok();
        reconnected = stream_gen_ != gen;
      }
      if (!go || !reconnected) break;
      ResendIfReconnected(&gen, &call);
    }
    if (!go) break;
    // The policy decides at send time, so a re-plan reaches every sample not
    // requested yet.
    batch->assigned.resize(batch->n);
    policy_->Plan(begin, batch->ids, absl::MakeSpan(batch->assigned));
    // One server today: a policy that names another is a bug, not a plan.
    for (int i = 0; i < batch->n; ++i) {
      if (batch->assigned[i].server != 0) {
        absl::MutexLock lock(&mu_);
        FailLocked(absl::InternalError(absl::StrCat(
            "offload policy '", policy_->name(), "' sent sample ", batch->ids[i], " to server ",
            batch->assigned[i].server, "; the loader has 1 server")));
        go = false;
        break;
      }
    }
    if (!go) break;
    std::vector<std::pair<uint64_t, Stage>> requests;
    for (int i = 0; i < batch->n; ++i) {
      requests.emplace_back(batch->ids[i], batch->assigned[i].stage);
    }
    bool reconnected = false;
    {
      absl::MutexLock lock(&mu_);
      if (stopping_ || !error_.ok()) break;
      requested_ += batch->n;
      stats_.requested += batch->n;
      pending_[k] = std::move(batch);
      sender_has_buffer_ = false;
      ++opened_batches_;
      reconnected = stream_gen_ != gen;
    }
    // Requests go out after the batch is registered, so replies find it. If
    // the stream was re-opened since, the resend covers this batch; a failed
    // write means the stream broke, and the resend after the reconnect covers it.
    if (reconnected) {
      ResendIfReconnected(&gen, &call);
    } else {
      WriteRequests(call.get(), requests);
    }
  }
  // Until the epoch's stream ends, each re-opened stream gets the missing
  // requests and its own WritesDone.
  while (true) {
    call->WritesDone();
    {
      absl::MutexLock lock(&mu_);
      auto settled = [this, gen]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return stream_done_ || stopping_ || !error_.ok() || stream_gen_ != gen;
      };
      mu_.Await(absl::Condition(&settled));
      if (stream_gen_ == gen || stopping_ || !error_.ok()) return;
    }
    ResendIfReconnected(&gen, &call);
  }
}

namespace {

// Codes with which a Fetch stream breaks when the server went away or is
// restarting (CANCELLED: the server shut down with the call open).
// The server refused the stream for want of a slot (its max_streams, or
// max_streams_per_peer for this client), or evicted it to make room: the
// same stream may be admitted once others end.
bool IsStreamSlotRefusal(const absl::Status& status) {
  return status.code() == absl::StatusCode::kResourceExhausted &&
         absl::StrContains(status.message(), "max_streams");
}

// A break the stream may recover from: the transport failed, or the server
// shed load (gRPC under memory pressure resets streams with ENHANCE_YOUR_CALM,
// RST_STREAM code 11; the server ends a stream whose write was not taken while
// others waited, or evicts one to make room for another client).
bool StreamBreakIsRetryable(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kCancelled:
      return true;
    case absl::StatusCode::kResourceExhausted:
      return IsStreamSlotRefusal(status) ||
             absl::StrContains(status.message(), "RST_STREAM with error code 11") ||
             absl::StrContains(status.message(), "write_stall_timeout");
    default:
      return false;
  }
}

}  // namespace

void Loader::ReceiveLoop() {
  constexpr int kMaxFruitlessReconnects = 3;  // breaks in a row that delivered nothing owed
  v1::FetchResponse response;
  const int64_t b = options_.batch_size;
  std::shared_ptr<FetchCall> call;
  {
    absl::MutexLock lock(&mu_);
    call = call_;
  }
  int fruitless = 0;  // re-opened streams in a row that delivered nothing
  Backoff refusal_backoff(SampleClient::RetryBackoff());
  int refusals = 0;  // streams refused in a row for want of a slot
  absl::Time refused_since;
  while (true) {
    int64_t delivered = 0;
    while (call->Read(&response)) {
      absl::MutexLock lock(&mu_);
      for (v1::Sample& sample : *response.mutable_samples()) {
        const uint64_t id = sample.id();
        const int64_t pos = id < position_of_id_.size() ? position_of_id_[id] : -1;
        auto it = pos >= 0 ? pending_.find(pos / b) : pending_.end();
        const int slot = static_cast<int>(pos % b);
        if (it == pending_.end() || it->second->arrived[slot]) {
          FailLocked(absl::DataLossError(absl::StrCat(
              "storage server ", client_->address(), " sent sample ", id,
              it == pending_.end() ? " that was not requested" : " twice")));
          break;
        }
        it->second->arrived[slot] = 1;
        queued_payload_bytes_ += sample.payload().size();
        NotePeaksLocked();
        WorkItem item;
        item.sample = std::move(sample);
        item.batch = it->second.get();
        item.slot = slot;
        work_.push_back(std::move(item));
        ++received_;
        ++delivered;
      }
    }
    const absl::Status status = call->Finish();
    int64_t outstanding = 0;
    absl::Duration refusal_wait;
    {
      absl::MutexLock lock(&mu_);
      if (stopping_ || !error_.ok()) break;
      if (status.ok()) {
        if (received_ < requested_) {
          FailLocked(absl::DataLossError(absl::StrCat(
              "storage server ", client_->address(), " closed the stream with ",
              requested_ - received_, " of ", requested_, " requested samples missing")));
        }
        break;
      }
      outstanding = requested_ - received_;
      opened_at_break_ = opened_batches_;
      // Everything the epoch needs has arrived: nothing to reconnect for.
      if (outstanding == 0 && opened_batches_ == num_batches_) break;
      if (IsStreamSlotRefusal(status) && delivered == 0) {
        stats_.streams_refused++;
        const absl::Time now = absl::Now();
        if (refusals++ == 0) {
          refused_since = now;
          refusal_backoff.Reset();
        }
        const absl::Duration left = refused_since + client_->connect_timeout() - now;
        if (left <= absl::ZeroDuration()) {
          FailLocked(absl::ResourceExhaustedError(absl::StrCat(
              "storage server ", client_->address(), " refused a fetch stream ", refusals,
              " times in a row over ", absl::FormatDuration(absl::Trunc(now - refused_since,
                                                                         absl::Milliseconds(1))),
              " (ClientOptions.connect_timeout = ",
              absl::FormatDuration(client_->connect_timeout()), "): ", status.message())));
          break;
        }
        refusal_wait = std::min(refusal_backoff.Next(), left);
      } else {
        refusals = 0;
        stats_.stream_breaks++;
        // Only a break with samples owed and none delivered counts as fruitless.
        if (delivered > 0) {
          fruitless = 0;
        } else if (outstanding > 0) {
          ++fruitless;
        }
        const std::string what = absl::StrCat("fetch stream from storage server ",
                                              client_->address(), " failed: ", status.message());
        if (!StreamBreakIsRetryable(status) || fruitless >= kMaxFruitlessReconnects) {
          FailLocked(absl::Status(
              status.code(),
              fruitless >= kMaxFruitlessReconnects
                  ? absl::StrCat(what, " (it broke ", fruitless,
                                 " times in a row without delivering a sample)")
                  : what));
          break;
        }
      }
    }
    if (refusal_wait > absl::ZeroDuration()) {
      client_->LogRetry(
          absl::StrCat("opening a fetch stream from storage server ", client_->address()), status,
          refusal_wait);
      std::shared_ptr<FetchCall> fresh;
      {
        // The backoff, cut short if the loader stops or fails meanwhile.
        absl::MutexLock lock(&mu_);
        auto done = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return stopping_ || !error_.ok(); };
        mu_.AwaitWithTimeout(absl::Condition(&done), refusal_wait);
        if (stopping_ || !error_.ok()) break;
      }
      fresh = client_->OpenFetch();
      absl::MutexLock lock(&mu_);
      if (stopping_ || !error_.ok()) break;
      call_ = fresh;
      call = std::move(fresh);
      ++stream_gen_;  // the sender requests again what had not arrived
      continue;
    }
    spdlog::warn("fetch stream from storage server {} broke ({}: {}) with {} requested samples "
                 "not received; waiting up to {} for it to come back, then requesting those "
                 "again with any requested while it is away",
                 client_->address(), absl::StatusCodeToString(status.code()),
                 std::string(status.message()), outstanding,
                 absl::FormatDuration(client_->connect_timeout()));
    const absl::Time broke = absl::Now();
    absl::Status back = client_->AwaitSameServer([this]() {
      absl::MutexLock lock(&mu_);
      return stopping_ || !error_.ok();
    });
    std::shared_ptr<FetchCall> fresh;
    if (back.ok()) fresh = client_->OpenFetch();
    absl::MutexLock lock(&mu_);
    if (stopping_ || !error_.ok()) break;
    if (!back.ok()) {
      FailLocked(std::move(back));
      break;
    }
    spdlog::info("storage server {} is back after {}; fetch stream re-opened", client_->address(),
                 absl::FormatDuration(absl::Trunc(absl::Now() - broke, absl::Milliseconds(100))));
    call_ = fresh;
    call = std::move(fresh);
    ++stream_gen_;
    stats_.reconnects++;
  }
  absl::MutexLock lock(&mu_);
  stream_done_ = true;
}

void Loader::WorkerLoop() {
  while (true) {
    WorkItem item;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return !work_.empty() || stream_done_ || stopping_;
      };
      mu_.Await(absl::Condition(&ready));
      if (work_.empty() || stopping_) return;
      item = std::move(work_.front());
      work_.pop_front();
    }
    const uint64_t id = item.sample.id();
    const uint64_t bytes = item.sample.payload().size();
    OpTimes times;
    PerStage<uint64_t> stage_bytes;
    absl::Status status = SampleStatus(item.sample);
    absl::StatusOr<Stage> stage = StageFromProto(item.sample.stage());
    const Stage received_stage = stage.ok() ? *stage : kFirstStage;
    if (status.ok()) {
      absl::StatusOr<StageData> data = StageDataFromProto(&item.sample);
      status = data.status();
      if (status.ok()) {
        status = FinishToTensor(*std::move(data), SampleKey{options_.seed, epoch_, id},
                                options_.pipeline,
                                item.batch->images.data() + item.slot * sample_floats_, &times,
                                &stage_bytes);
        if (!status.ok()) {
          const v1::Manifest& m = client_->manifest();
          const std::string path =
              id < static_cast<uint64_t>(m.relative_paths_size()) ? m.relative_paths(id) : "?";
          status = absl::Status(status.code(),
                                absl::StrCat("sample ", id, " (", path, ", prepared locally from ",
                                             StageName(received_stage), "): ", status.message()));
        }
      }
    }
    SampleObservation obs;
    obs.id = id;
    obs.received = received_stage;
    obs.payload_bytes = bytes;
    obs.local = times;
    obs.local_bytes = stage_bytes;
    obs.server_cpu_seconds = item.sample.server_cpu_seconds();
    obs.server_wall_seconds = item.sample.server_wall_seconds();
    obs.server_read_seconds = item.sample.server_read_seconds();
    obs.ok = status.ok();
    policy_->OnSample(obs);  // outside the lock: the policy has its own
    absl::MutexLock lock(&mu_);
    queued_payload_bytes_ -= std::min<uint64_t>(queued_payload_bytes_, bytes);
    stats_.local_cpu_seconds += times.Total();
    stats_.server_cpu_seconds += item.sample.server_cpu_seconds();
    if (status.ok()) {
      stats_.samples_by_stage[StageIndex(received_stage)]++;
      stats_.bytes_by_stage[StageIndex(received_stage)] += bytes;
    } else if (options_.on_bad_sample == BadSamplePolicy::kSkip) {
      item.batch->bad[item.slot] = 1;
      stats_.skipped++;
      if (stats_.first_errors.size() < 5) {
        stats_.first_errors.push_back(std::string(status.message()));
        spdlog::warn("skipping bad sample: {}", std::string(status.message()));
      }
    } else {
      FailLocked(absl::Status(status.code(),
                              absl::StrCat(status.message(), " (bad-sample policy: fail)")));
    }
    item.batch->remaining--;
  }
}

absl::StatusOr<bool> Loader::Next(Batch* out) {
  while (true) {
    std::unique_ptr<PendingBatch> batch;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
        if (!error_.ok() || stopping_ || next_batch_ >= num_batches_) return true;
        auto it = pending_.find(next_batch_);
        return it != pending_.end() && it->second->remaining == 0;
      };
      mu_.Await(absl::Condition(&ready));
      if (!error_.ok()) return error_;
      if (stopping_) return absl::CancelledError("loader stopped");
      if (next_batch_ >= num_batches_) return false;
      auto it = pending_.find(next_batch_);
      batch = std::move(it->second);
      pending_.erase(it);
      ++next_batch_;
    }
    // Compact away skipped samples.
    int kept = 0;
    for (int i = 0; i < batch->n; ++i) {
      if (batch->bad[i]) continue;
      if (kept != i) {
        std::memmove(batch->images.data() + kept * sample_floats_,
                     batch->images.data() + i * sample_floats_, sample_floats_ * sizeof(float));
        batch->labels[kept] = batch->labels[i];
        batch->ids[kept] = batch->ids[i];
      }
      ++kept;
    }
    {
      absl::MutexLock lock(&mu_);
      stats_.samples += kept;
      if (kept > 0) stats_.batches++;
    }
    if (kept == 0) continue;  // every sample of the batch was bad
    batch->images.resize(static_cast<size_t>(kept) * sample_floats_);
    batch->labels.resize(kept);
    batch->ids.resize(kept);
    if (out->images.capacity() > 0) {
      absl::MutexLock lock(&mu_);
      if (static_cast<int>(spare_images_.size()) < options_.prefetch_batches) {
        spare_images_.push_back(std::move(out->images));
        NotePeaksLocked();
      }
    }
    out->index = batch->index;
    out->n = kept;
    out->c = 3;
    out->h = out->w = options_.pipeline.augment.crop_size;
    out->images = std::move(batch->images);
    out->labels = std::move(batch->labels);
    out->ids = std::move(batch->ids);
    return true;
  }
}

LoaderEpochStats Loader::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void Loader::Stop() {
  std::shared_ptr<FetchCall> call;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    call = call_;
  }
  if (call) call->Cancel();
  JoinThreads();
}

void Loader::JoinThreads() {
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  absl::MutexLock lock(&mu_);
  call_.reset();
}

}  // namespace sophon
