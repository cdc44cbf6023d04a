// The Loader face over StreamLoader (stream_loader.h), and the parts of
// StreamLoader that set up an epoch, register its batches (SendLoop) and hand
// them out (Next), and stop it. The links and their writers are in
// server_link.cc, the receivers in receive_loop.cc, the prep threads in
// local_prep.cc, the options' checks in loader_options.cc.
#include "client/loader/loader.h"

#include <pthread.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/loader/sample_cache.h"
#include "client/loader/sampler.h"
#include "client/loader/stream_loader.h"
#include "sophon/net/wire.h"
#include "spdlog/spdlog.h"

namespace sophon {

void NameLoaderThread(std::thread& thread, const std::string& name) {
  pthread_setname_np(thread.native_handle(), name.substr(0, 15).c_str());
}

absl::StatusOr<std::unique_ptr<Loader>> Loader::Create(ServerSet* servers,
                                                       const LoaderOptions& options,
                                                       OffloadPolicy* policy) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  for (int i = 0; i < servers->size(); ++i) {
    if (absl::Status s = CheckJpegDecodingAgrees(servers->client(i)->manifest(),
                                                 servers->address(i), options.pipeline.limits);
        !s.ok()) {
      return s;
    }
  }
  int vector_size = 0;
  if (options.target >= Stage::kFeatures) {
    absl::StatusOr<int> f = CheckFeatureSources(*servers, options.pipeline.backbone);
    if (!f.ok()) return f.status();
    vector_size = options.target == Stage::kFeatures
                      ? *f
                      : VectorElements(options.target, options.pipeline);
    for (int i = 0; i < servers->size(); ++i) {
      const ServerManifest& m = servers->client(i)->manifest();
      const Stage served = ServedStage(m, options.pipeline.backbone);
      if (served < options.target) {
        spdlog::info("storage server {} has {}: its samples are finished here from stage {}",
                     servers->address(i),
                     m.backbone.empty() ? std::string("no backbone")
                                        : absl::StrCat("another head (", m.backbone, ")"),
                     StageName(served));
      }
    }
  }
  return std::unique_ptr<Loader>(
      new Loader(std::make_unique<StreamLoader>(servers, options, policy, vector_size)));
}

absl::StatusOr<std::unique_ptr<Loader>> Loader::Create(SampleClient* client,
                                                       const LoaderOptions& options,
                                                       OffloadPolicy* policy) {
  absl::StatusOr<std::unique_ptr<ServerSet>> servers = ServerSet::Of({client});
  if (!servers.ok()) return servers.status();
  absl::StatusOr<std::unique_ptr<Loader>> loader = Create(servers->get(), options, policy);
  if (loader.ok()) (*loader)->impl_->Own(*std::move(servers));
  return loader;
}

Loader::Loader(std::unique_ptr<StreamLoader> impl) : impl_(std::move(impl)) {}

Loader::~Loader() = default;  // ~StreamLoader stops the epoch

absl::Status Loader::StartEpoch(uint64_t epoch, int64_t max_batches, int64_t start_position) {
  return impl_->StartEpoch(epoch, max_batches, start_position);
}
absl::StatusOr<bool> Loader::Next(Batch* batch) { return impl_->Next(batch); }
bool Loader::WaitForNext(absl::Duration timeout) const { return impl_->WaitForNext(timeout); }
int64_t Loader::num_batches() const { return impl_->num_batches(); }
int64_t Loader::epoch_samples() const { return impl_->epoch_samples(); }
ServerSet* Loader::servers() const { return impl_->servers(); }
int Loader::world() const { return impl_->options().world; }
LoaderEpochStats Loader::stats() const { return impl_->stats(); }
OffloadPolicy* Loader::policy() const { return impl_->policy(); }
std::vector<uint64_t> Loader::order() const { return impl_->order(); }
void Loader::Stop() { impl_->Stop(); }

StreamLoader::StreamLoader(ServerSet* servers, const LoaderOptions& options,
                           OffloadPolicy* policy, int vector_size)
    : servers_(servers),
      options_(options),
      policy_(policy),
      vector_target_(GetStageInfo(options.target).layout == Layout::kVector),
      sample_values_(vector_target_ ? vector_size
                                    : 3LL * options.pipeline.augment.crop_size *
                                          options.pipeline.augment.crop_size),
      float_target_(options.target == Stage::kTensor || vector_target_),
      feature_cache_(options.feature_cache_bytes > 0
                         ? std::make_unique<FeatureCache>(servers->manifest().num_samples(),
                                                          vector_size,
                                                          options.feature_cache_bytes)
                         : nullptr),
      links_(*servers, options.pipeline.backbone) {
  absl::MutexLock lock(&mu_);
  plan_ = std::make_shared<const EpochPlan>();
}

StreamLoader::~StreamLoader() { Stop(); }

absl::Status StreamLoader::StartEpoch(uint64_t epoch, int64_t max_batches, int64_t start_position) {
  absl::MutexLock lifecycle(&lifecycle_mu_);
  {
    absl::MutexLock lock(&mu_);
    if (waiting_callers_ > 0) {
      // Stopping that epoch under the other thread would hand it this one's
      // batches (or an error) in the middle of its loop.
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot start epoch ", epoch, ": the loader is iterated by another thread (it waits "
          "for a batch of epoch ", plan_->epoch, "); one iteration at a time: let that one end "
          "or call Stop first"));
    }
    stopping_ = true;  // a Next that starts now returns CANCELLED until the new epoch is set
  }
  StopLocked();  // ends whatever is left of the previous epoch
  if (start_position < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("epoch start position must be >= 0 (got ", start_position, ")"));
  }
  const GlobalManifest& manifest = servers_->manifest();
  // A position past the epoch's end (the order padded to a multiple of the
  // world size) is no position of this dataset: refused rather than read as
  // an empty epoch. The end itself is an epoch already finished.
  const int64_t epoch_length = PaddedEpochLength(manifest.num_samples(), options_.world);
  if (start_position > epoch_length) {
    return absl::InvalidArgumentError(absl::StrCat(
        "epoch start position ", start_position, " is past the end of the epoch (",
        epoch_length, " positions: ", manifest.num_samples(), " samples over ", options_.world,
        " ranks); was the checkpoint made for another dataset?"));
  }
  auto plan = std::make_shared<EpochPlan>();
  plan->epoch = epoch;
  plan->start_position = start_position;
  plan->order = RankSlice(options_.shuffle && options_.shuffle_window > 0
                         ? GroupedEpochOrder(options_.seed, epoch, ShardGroups(manifest.shards()),
                                             options_.shuffle_window)
                         : EpochOrder(options_.seed, epoch, manifest.num_samples(),
                                      options_.shuffle),
                     options_.rank, options_.world, start_position);
  if (absl::Status s = policy_->BeginEpoch(epoch, plan->order); !s.ok()) return s;
  plan->position_of_id.assign(manifest.num_samples(), -1);
  for (size_t i = 0; i < plan->order.size(); ++i) {
    plan->position_of_id[plan->order[i]] = static_cast<int64_t>(i);
  }
  const int64_t n = static_cast<int64_t>(plan->order.size());
  const int64_t b = options_.batch_size;
  plan->num_batches = options_.drop_last ? n / b : (n + b - 1) / b;
  if (max_batches > 0) plan->num_batches = std::min(plan->num_batches, max_batches);
  if (absl::Status s = ProbeServers(epoch); !s.ok()) return s;
  std::shared_ptr<const EpochPlan> running = std::move(plan);
  std::vector<int> live;
  {
    absl::MutexLock lock(&mu_);
    plan_ = running;
    pending_.clear();
    work_.clear();
    next_batch_ = 0;
    opened_batches_ = 0;
    received_ = 0;
    requested_ = 0;
    stopping_ = false;
    error_ = absl::OkStatus();
    stats_ = LoaderEpochStats();
    stats_.padding = PaddedEpochLength(manifest.num_samples(), options_.world) -
                     static_cast<int64_t>(manifest.num_samples());
    sender_has_buffer_ = false;
    queued_payload_bytes_ = 0;
    NotePeaksLocked();
    stats_.servers.resize(links_.size());
    for (ServerLink& link : links_) {
      stats_.servers[link.server].address = link.client->address();
      stats_.servers[link.server].lost = link.lost;
      link.ResetForEpoch();
      if (!link.lost) live.push_back(link.server);
    }
    streams_open_ = static_cast<int>(live.size());
  }
  for (int s : live) {
    std::shared_ptr<FetchCall> call = servers_->client(s)->OpenFetch();
    absl::MutexLock lock(&mu_);
    links_[s].call = std::move(call);
  }
  // Each thread holds the epoch's plan for as long as it runs.
  threads_.emplace_back([this, running] { SendLoop(*running); });
  NameLoaderThread(threads_.back(), "sophon-send");
  for (int s : live) {
    threads_.emplace_back([this, s, running] { WriteLoop(s, *running); });
    NameLoaderThread(threads_.back(), absl::StrCat("sophon-write-", s));
    threads_.emplace_back([this, s, running] { ReceiveLoop(s, *running); });
    NameLoaderThread(threads_.back(), absl::StrCat("sophon-recv-", s));
  }
  for (int i = 0; i < options_.workers; ++i) {
    threads_.emplace_back([this, running] { WorkerLoop(*running); });
    NameLoaderThread(threads_.back(), absl::StrCat("sophon-prep-", i));
  }
  return absl::OkStatus();
}

void StreamLoader::FailLocked(absl::Status status) {
  if (error_.ok()) error_ = std::move(status);
  for (auto& [index, batch] : pending_) {
    if (!batch->publishing) batch->claim.Release();
  }
}

void StreamLoader::NotePeaksLocked() {
  const int buffers =
      static_cast<int>(pending_.size() + spare_images_.size() + spare_pixels_.size()) +
                      (sender_has_buffer_ ? 1 : 0);
  stats_.peak_batch_buffers = std::max(stats_.peak_batch_buffers, buffers);
  stats_.peak_queued_payload_bytes =
      std::max(stats_.peak_queued_payload_bytes, queued_payload_bytes_);
}

bool StreamLoader::AllReceivedLocked() const {
  return opened_batches_ == plan_->num_batches && received_ == requested_;
}

// Registers each batch (under mu_) and queues its requests to the servers'
// writers: nothing here blocks on a server, so a slow one holds back only the
// batches that wait for its samples.
void StreamLoader::SendLoop(const EpochPlan& plan) {
  const GlobalManifest& manifest = servers_->manifest();
  const int64_t b = options_.batch_size;
  const std::vector<uint64_t>& order = plan.order;
  const int64_t total =
      options_.drop_last ? plan.num_batches * b : static_cast<int64_t>(order.size());
  for (int64_t k = 0; k < plan.num_batches; ++k) {
    auto batch = std::make_unique<PendingBatch>();
    batch->index = k;
    const int64_t begin = k * b;
    const int64_t end = std::min(begin + b, total);
    batch->n = static_cast<int>(end - begin);
    batch->first_position = begin;
    {
      absl::MutexLock lock(&mu_);
      if (float_target_ && !spare_images_.empty()) {
        batch->images = std::move(spare_images_.back());
        spare_images_.pop_back();
      } else if (!float_target_ && !spare_pixels_.empty()) {
        batch->pixels = std::move(spare_pixels_.back());
        spare_pixels_.pop_back();
      }
      sender_has_buffer_ = true;
      NotePeaksLocked();
    }
    const size_t values = static_cast<size_t>(batch->n) * sample_values_;
    if (float_target_) {
      batch->images.resize(values);
    } else {
      batch->pixels.resize(values);
    }
    batch->bad.assign(batch->n, 0);
    batch->arrived.assign(batch->n, 0);
    batch->remaining = batch->n;
    for (int64_t p = begin; p < end; ++p) {
      batch->ids.push_back(order[p]);
      batch->labels.push_back(manifest.label(order[p]));
    }
    {
      absl::MutexLock lock(&mu_);
      auto has_room = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return opened_batches_ - next_batch_ < options_.prefetch_batches || stopping_ ||
               !error_.ok();
      };
      mu_.Await(absl::Condition(&has_room));
      if (stopping_ || !error_.ok()) break;
    }
    if (options_.batch_share != nullptr && !TakeSharedBatch(plan, batch.get())) {
      absl::MutexLock lock(&mu_);
      if (stopping_ || !error_.ok()) break;
      stats_.shared_batches_read++;
      batch->remaining = 0;
      pending_[k] = std::move(batch);
      sender_has_buffer_ = false;
      ++opened_batches_;
      continue;
    }
    // The policy decides at send time, so a re-plan reaches every sample not
    // requested yet.
    batch->assigned.resize(batch->n);
    policy_->Plan(begin, batch->ids, absl::MakeSpan(batch->assigned));
    for (SampleAssignment& a : batch->assigned) a.stage = std::min(a.stage, options_.target);
    // Samples whose features are held are not asked for.
    int hits = 0;
    if (feature_cache_ != nullptr) {
      for (int i = 0; i < batch->n; ++i) {
        if (feature_cache_->Get(batch->ids[i], batch->images.data() + i * sample_values_)) {
          batch->arrived[i] = 1;
          ++hits;
        }
      }
    }
    // Samples planned at RAW whose files this node holds go to its prep
    // threads, copied out of the cache before the loader's lock is taken (a
    // sample planned further is the storage node's job, held or not).
    std::vector<std::pair<int, std::string>> cached;
    int cache_misses = 0;
    if (options_.sample_cache != nullptr) {
      for (int i = 0; i < batch->n; ++i) {
        if (batch->arrived[i] || batch->assigned[i].stage != kFirstStage) continue;
        std::string bytes;
        if (options_.sample_cache->Get(batch->ids[i], &bytes)) {
          cached.emplace_back(i, std::move(bytes));
        } else {
          cache_misses++;
        }
      }
    }
    absl::MutexLock lock(&mu_);
    if (stopping_ || !error_.ok()) break;
    stats_.sample_cache_misses += cache_misses;
    for (auto& [i, bytes] : cached) {
      const int server = links_.Route(batch->ids[i], batch->assigned[i].server);
      batch->arrived[i] = 1;
      batch->assigned[i].server = std::max(server, 0);
      batch->assigned[i].stage = kFirstStage;
      stats_.sample_cache_hits++;
      stats_.sample_cache_hit_bytes += bytes.size();
      queued_payload_bytes_ += bytes.size();
      WorkItem item;
      item.id = batch->ids[i];
      item.server = std::max(server, 0);
      item.from_cache = true;
      StageData data;
      data.stage = kFirstStage;
      data.data = std::move(bytes);
      StageDataToProto(std::move(data), &item.sample);
      item.batch = batch.get();
      item.slot = i;
      work_.push_back(std::move(item));
    }
    if (!cached.empty()) NotePeaksLocked();
    const int cache_hits = static_cast<int>(cached.size());
    for (int i = 0; i < batch->n; ++i) {
      if ((hits > 0 || cache_hits > 0) && batch->arrived[i]) continue;
      const int wanted = batch->assigned[i].server;
      const int server = links_.Route(batch->ids[i], wanted);
      if (server < 0) {
        // A lost server without replicas has failed the epoch already.
        FailLocked(absl::InternalError(absl::StrCat(
            "offload policy '", policy_->name(), "' sent sample ", batch->ids[i], " to server ",
            wanted, ", which does not hold it (", servers_->size(), " servers)")));
        return;
      }
      batch->assigned[i].server = server;
      batch->assigned[i].stage = links_.StageFor(server, batch->assigned[i].stage);
      links_[server].Queue(batch->ids[i], batch->assigned[i].stage);
    }
    requested_ += batch->n - hits - cache_hits;
    stats_.requested += batch->n - hits - cache_hits;
    stats_.feature_cache_hits += hits;
    batch->remaining -= hits;
    // Every sample from the feature cache: made already.
    PendingBatch* const publish =
        batch->remaining == 0 && batch->claim.held() ? batch.get() : nullptr;
    if (publish != nullptr) publish->publishing = true;
    pending_[k] = std::move(batch);
    sender_has_buffer_ = false;
    ++opened_batches_;
    if (publish != nullptr) {
      mu_.Unlock();
      PublishBatch(publish);
      mu_.Lock();
    }
  }
}

bool StreamLoader::TakeSharedBatch(const EpochPlan& plan, PendingBatch* batch) {
  const size_t sample_bytes =
      static_cast<size_t>(sample_values_) * (float_target_ ? sizeof(float) : 1);
  char* const images = float_target_ ? reinterpret_cast<char*>(batch->images.data())
                                      : reinterpret_cast<char*>(batch->pixels.data());
  const absl::Span<char> parts[] = {
      absl::MakeSpan(batch->bad.data(), batch->bad.size()),
      absl::MakeSpan(images, batch->n * sample_bytes)};
  const uint64_t epoch_positions = PaddedEpochLength(servers_->manifest().num_samples(),
                                                     options_.world);
  batch->seq = BatchSeq(plan.epoch, epoch_positions,
                        plan.start_position + batch->first_position * options_.world);
  const absl::Time start = absl::Now();
  const BatchShare::Outcome outcome = options_.batch_share->Take(
      batch->seq, parts, &batch->claim, [this] {
        absl::MutexLock lock(&mu_);
        return EndingLocked();
      });
  absl::MutexLock lock(&mu_);
  stats_.shared_take_seconds += absl::ToDoubleSeconds(absl::Now() - start);
  return outcome != BatchShare::Outcome::kRead;
}

void StreamLoader::PublishBatch(PendingBatch* batch) {
  const size_t sample_bytes =
      static_cast<size_t>(sample_values_) * (float_target_ ? sizeof(float) : 1);
  const char* const images = float_target_
                                 ? reinterpret_cast<const char*>(batch->images.data())
                                 : reinterpret_cast<const char*>(batch->pixels.data());
  const absl::Span<const char> parts[] = {
      absl::MakeConstSpan(batch->bad.data(), batch->bad.size()),
      absl::MakeConstSpan(images, batch->n * sample_bytes)};
  const absl::Status s =
      options_.batch_share->Publish(batch->seq, parts, std::move(batch->claim));
  absl::MutexLock lock(&mu_);
  batch->publishing = false;
  if (s.ok()) {
    stats_.shared_batches_published++;
  } else if (!share_failed_logged_) {
    share_failed_logged_ = true;
    spdlog::warn("shared batches: {}; the other jobs make this batch themselves",
                 std::string(s.message()));
  }
}

bool StreamLoader::NextReadyLocked() const {
  if (!error_.ok() || stopping_ || next_batch_ >= plan_->num_batches) return true;
  auto it = pending_.find(next_batch_);
  return it != pending_.end() && it->second->remaining == 0 && !it->second->publishing;
}

bool StreamLoader::WaitForNext(absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  ++waiting_callers_;
  const bool ready =
      mu_.AwaitWithTimeout(absl::Condition(this, &StreamLoader::NextReadyLocked), timeout);
  --waiting_callers_;
  return ready;
}

absl::StatusOr<bool> StreamLoader::Next(Batch* out) {
  {
    absl::MutexLock lock(&mu_);
    ++waiting_callers_;
  }
  absl::StatusOr<bool> result = NextBatch(out);
  absl::MutexLock lock(&mu_);
  --waiting_callers_;
  return result;
}

absl::StatusOr<bool> StreamLoader::NextBatch(Batch* out) {
  while (true) {
    std::unique_ptr<PendingBatch> batch;
    std::shared_ptr<const EpochPlan> plan;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &StreamLoader::NextReadyLocked));
      if (!error_.ok()) return error_;
      if (stopping_) return absl::CancelledError("loader stopped");
      if (next_batch_ >= plan_->num_batches) return false;
      plan = plan_;
      auto it = pending_.find(next_batch_);
      batch = std::move(it->second);
      pending_.erase(it);
      ++next_batch_;
    }
    // Compact away skipped samples.
    const size_t sample_bytes =
        static_cast<size_t>(sample_values_) * (float_target_ ? sizeof(float) : 1);
    char* const images = float_target_ ? reinterpret_cast<char*>(batch->images.data())
                                        : reinterpret_cast<char*>(batch->pixels.data());
    int kept = 0;
    for (int i = 0; i < batch->n; ++i) {
      if (batch->bad[i]) continue;
      if (kept != i) {
        std::memmove(images + kept * sample_bytes, images + i * sample_bytes, sample_bytes);
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
    // Every sample of the batch was bad: skipped, unless other ranks wait
    // for this one in the step's collectives.
    if (kept == 0 && options_.world == 1) continue;
    const size_t kept_values = static_cast<size_t>(kept) * sample_values_;
    if (float_target_) {
      batch->images.resize(kept_values);
    } else {
      batch->pixels.resize(kept_values);
    }
    batch->labels.resize(kept);
    batch->ids.resize(kept);
    {
      absl::MutexLock lock(&mu_);
      if (out->images.capacity() > 0 &&
          static_cast<int>(spare_images_.size()) < options_.prefetch_batches) {
        spare_images_.push_back(std::move(out->images));
      }
      if (out->pixels.capacity() > 0 &&
          static_cast<int>(spare_pixels_.size()) < options_.prefetch_batches) {
        spare_pixels_.push_back(std::move(out->pixels));
      }
      NotePeaksLocked();
    }
    out->index = batch->index;
    out->n = kept;
    if (vector_target_) {
      out->c = static_cast<int>(sample_values_);  // [n, F]
      out->h = out->w = 1;
    } else {
      out->c = 3;
      out->h = out->w = options_.pipeline.augment.crop_size;
    }
    out->stage = options_.target;
    out->images = std::move(batch->images);
    out->pixels = std::move(batch->pixels);
    out->labels = std::move(batch->labels);
    out->ids = std::move(batch->ids);
    out->flips.clear();
    if (options_.target == Stage::kCropped) {
      // The flip the FLIP op would have applied, for the device to apply.
      for (uint64_t id : out->ids) {
        out->flips.push_back(
            FlipFor(SampleKey{options_.seed, plan->epoch, id}, options_.pipeline.augment) ? 1 : 0);
      }
    }
    out->cursor = std::min(
        plan->start_position + (batch->first_position + batch->n) * options_.world,
        PaddedEpochLength(servers_->manifest().num_samples(), options_.world));
    return true;
  }
}

LoaderEpochStats StreamLoader::stats() const {
  LoaderEpochStats stats;
  {
    absl::MutexLock lock(&mu_);
    stats = stats_;
  }
  if (options_.sample_cache != nullptr) {
    const SampleCacheStats cache = options_.sample_cache->stats();
    stats.sample_cache_entries = cache.entries;
    stats.sample_cache_bytes = cache.bytes;
  }
  return stats;
}

int64_t StreamLoader::num_batches() const {
  absl::MutexLock lock(&mu_);
  return plan_->num_batches;
}

int64_t StreamLoader::epoch_samples() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(plan_->order.size());
}

std::vector<uint64_t> StreamLoader::order() const {
  std::shared_ptr<const EpochPlan> plan;
  {
    absl::MutexLock lock(&mu_);
    plan = plan_;
  }
  return plan->order;  // copied outside the lock: the plan does not change
}

void StreamLoader::Stop() {
  absl::MutexLock lifecycle(&lifecycle_mu_);
  StopLocked();
}

void StreamLoader::StopLocked() {
  std::vector<std::shared_ptr<FetchCall>> calls;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    for (const ServerLink& link : links_) {
      if (link.call) calls.push_back(link.call);
    }
  }
  for (const auto& call : calls) call->Cancel();
  JoinThreads();
}

void StreamLoader::JoinThreads() {
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  absl::MutexLock lock(&mu_);
  // The batches this job claimed and will not make now: other jobs take them.
  for (auto& [index, batch] : pending_) batch->claim.Release();
  for (ServerLink& link : links_) link.call.reset();
}

}  // namespace sophon
