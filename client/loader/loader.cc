#include "client/loader/loader.h"

#include <pthread.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/loader/sampler.h"
#include "client/loader/stream_break.h"
#include "sophon/base/half.h"
#include "sophon/image/jpeg_codec.h"
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
  if (shuffle_window < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LoaderOptions.shuffle_window must be >= 0 (got ", shuffle_window, ")"));
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
  if (target != Stage::kTensor && GetStageInfo(target).layout != Layout::kVector &&
      GetStageInfo(target).layout != Layout::kHwc) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LoaderOptions.target must be ", StageName(Stage::kTensor), ", ",
        StageName(Stage::kFeatures), ", ", StageName(Stage::kPredictions),
        " or a uint8 HWC stage (", StageName(Stage::kCropped), ", ", StageName(Stage::kFlipped),
        "), got ", StageName(target)));
  }
  if (target == Stage::kPredictions &&
      (pipeline.backbone == nullptr || pipeline.backbone->num_classes() < 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LoaderOptions.target ", StageName(Stage::kPredictions),
        " needs this node's model (LoaderOptions.pipeline.backbone, with a head): it "
        "finishes samples that arrive earlier and checks the servers' models against it"));
  }
  if (pipeline.top_k < 1 || pipeline.top_k > kMaxTopK) {
    return absl::InvalidArgumentError(absl::StrCat("LoaderOptions.pipeline.top_k must be in [1, ",
                                                   kMaxTopK, "] (got ", pipeline.top_k, ")"));
  }
  if (feature_cache_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LoaderOptions.feature_cache_bytes must be >= 0 (got ", feature_cache_bytes, ")"));
  }
  if (feature_cache_bytes > 0 &&
      (target != Stage::kFeatures || pipeline.augment.eval_resize <= 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LoaderOptions.feature_cache_bytes needs a ", StageName(Stage::kFeatures),
        " target with the evaluation transform (augment none): with random crops and flips a "
        "sample's features change every epoch (target ",
        StageName(target), ", eval_resize ", pipeline.augment.eval_resize, ")"));
  }
  if (absl::Status s = pipeline.augment.Validate(); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("LoaderOptions.pipeline.augment: ", s.message()));
  }
  return absl::OkStatus();
}

absl::Status CheckJpegDecodingAgrees(const ServerManifest& manifest, absl::string_view address,
                                     const DecodeLimits& limits) {
  if (manifest.lenient_jpeg == limits.lenient) return absl::OkStatus();
  const auto describe = [](bool lenient) {
    return lenient ? "leniently (accepting corrupt-data warnings)" : "strictly";
  };
  return absl::FailedPreconditionError(absl::StrCat(
      "storage server ", address, " decodes JPEGs ", describe(manifest.lenient_jpeg),
      " but this training node ", describe(limits.lenient),
      " (LoaderOptions.pipeline.limits.lenient): a sample with corrupt data would succeed on "
      "one side and fail on the other, so batches would depend on where each sample is "
      "decoded. Give both or neither of sophon-server --lenient-jpeg and sophon-train "
      "--lenient-jpeg (the server is ",
      manifest.lenient_jpeg ? "lenient" : "strict", ", this node ",
      limits.lenient ? "lenient" : "strict", ")"));
}

absl::StatusOr<int> CheckFeatureSources(const ServerSet& servers,
                                        const FeatureExtractor* local) {
  const ServerManifest* first = nullptr;  // the first server with a backbone
  std::string first_address;
  for (int i = 0; i < servers.size(); ++i) {
    const ServerManifest& m = servers.client(i)->manifest();
    const std::string address = servers.address(i);
    if (m.feature_size == 0) {
      if (local != nullptr) continue;  // its samples come at TENSOR, finished here
      return absl::FailedPreconditionError(absl::StrCat(
          "the job's last stage is ", StageName(Stage::kFeatures), ", but storage server ",
          address, " has no backbone and neither has this node (LoaderOptions.pipeline.backbone): "
          "start the server with --backbone=CHECKPOINT, or give this node the same checkpoint"));
    }
    if (local != nullptr) {
      if (m.backbone_fingerprint != local->fingerprint()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "storage server ", address, " extracts features with ", m.backbone,
            " and this node with ", local->description(),
            ": their checkpoints differ (fingerprints ", absl::Hex(m.backbone_fingerprint), " and ",
            absl::Hex(local->fingerprint()), "), so a sample's features would depend on where "
            "they were computed; give both the same checkpoint file"));
      }
      continue;
    }
    if (first == nullptr) {
      first = &m;
      first_address = address;
    } else if (m.backbone_fingerprint != first->backbone_fingerprint) {
      return absl::FailedPreconditionError(absl::StrCat(
          "storage servers ", first_address, " (", first->backbone, ") and ", address, " (",
          m.backbone, ") extract features with different checkpoints; give every server the same "
          "--backbone file"));
    }
  }
  return local != nullptr ? local->feature_size() : static_cast<int>(first->feature_size);
}

Stage ServedStage(const ServerManifest& manifest, const FeatureExtractor* local) {
  if (manifest.feature_size == 0) return Stage::kTensor;
  if (local != nullptr && (manifest.backbone_fingerprint != local->fingerprint() ||
                           manifest.head_fingerprint != local->head_fingerprint() ||
                           static_cast<int>(manifest.head_classes) != local->num_classes())) {
    return manifest.backbone_fingerprint == local->fingerprint() ? Stage::kFeatures
                                                                 : Stage::kTensor;
  }
  return kLastStage;
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
  return std::unique_ptr<Loader>(new Loader(servers, options, policy, vector_size));
}

absl::StatusOr<std::unique_ptr<Loader>> Loader::Create(SampleClient* client,
                                                       const LoaderOptions& options,
                                                       OffloadPolicy* policy) {
  absl::StatusOr<std::unique_ptr<ServerSet>> servers = ServerSet::Of({client});
  if (!servers.ok()) return servers.status();
  absl::StatusOr<std::unique_ptr<Loader>> loader = Create(servers->get(), options, policy);
  if (loader.ok()) (*loader)->owned_servers_ = *std::move(servers);
  return loader;
}

Loader::Loader(ServerSet* servers, const LoaderOptions& options, OffloadPolicy* policy,
               int vector_size)
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
                         : nullptr) {
  absl::MutexLock lock(&mu_);
  plan_ = std::make_shared<const EpochPlan>();
  links_.resize(servers->size());
  for (int i = 0; i < servers->size(); ++i) {
    links_[i].server = i;
    links_[i].client = servers->client(i);
    links_[i].max_stage = ServedStage(servers->client(i)->manifest(), options.pipeline.backbone);
    links_[i].key_offset =
        servers->manifest().shards()[servers->manifest().ShardOfServer(i)].base;
  }
}

Loader::~Loader() { Stop(); }

Stage Loader::StageFor(int server, Stage stage) const {
  return std::min(stage, links_[server].max_stage);
}

absl::Status Loader::StartEpoch(uint64_t epoch, int64_t max_batches, int64_t start_position) {
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
  if (absl::Status s = ProbeDownServers(epoch); !s.ok()) return s;
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
    for (Link& link : links_) {
      stats_.servers[link.server].address = link.client->address();
      stats_.servers[link.server].lost = link.lost;
      link.outbox.clear();
      link.owed = 0;
      link.gen = 0;
      link.opened_at_break = 0;
      link.stream_done = link.lost;
      link.call.reset();
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
  NameThread(threads_.back(), "sophon-send");
  for (int s : live) {
    threads_.emplace_back([this, s, running] { WriteLoop(s, *running); });
    NameThread(threads_.back(), absl::StrCat("sophon-write-", s));
    threads_.emplace_back([this, s, running] { ReceiveLoop(s, *running); });
    NameThread(threads_.back(), absl::StrCat("sophon-recv-", s));
  }
  for (int i = 0; i < options_.workers; ++i) {
    threads_.emplace_back([this, running] { WorkerLoop(*running); });
    NameThread(threads_.back(), absl::StrCat("sophon-prep-", i));
  }
  return absl::OkStatus();
}

absl::Status Loader::ProbeDownServers(uint64_t epoch) {
  std::vector<int> down;
  {
    absl::MutexLock lock(&mu_);
    for (const Link& link : links_) {
      if (link.lost || link.client->IsDown()) down.push_back(link.server);
    }
  }
  if (down.empty()) return absl::OkStatus();
  // Once each, all at once: a refused connection answers at once, a host
  // that is away costs SampleClient::kProbeTimeout.
  std::vector<absl::Status> probes(down.size());
  {
    std::vector<std::thread> threads;
    for (size_t i = 0; i < down.size(); ++i) {
      threads.emplace_back([&, i] { probes[i] = servers_->client(down[i])->Probe(); });
      NameThread(threads.back(), absl::StrCat("sophon-probe-", down[i]));
    }
    for (std::thread& t : threads) t.join();
  }
  const GlobalManifest& m = servers_->manifest();
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < down.size(); ++i) {
    Link& link = links_[down[i]];
    if (probes[i].code() == absl::StatusCode::kFailedPrecondition) return probes[i];  // other data
    if (probes[i].ok()) {
      if (link.lost) {
        spdlog::info("storage server {} is back: it serves again from epoch {}",
                     link.client->address(), epoch);
      }
      link.lost = false;
    }
  }
  for (size_t i = 0; i < down.size(); ++i) {
    Link& link = links_[down[i]];
    if (link.lost || !link.client->IsDown()) continue;
    // Down and not given up on yet: not waited for while a replica serves.
    if (HasLiveReplicaLocked(down[i])) {
      link.lost = true;
      spdlog::warn("storage server {} is down ({}); epoch {} goes on without it",
                   link.client->address(), std::string(probes[i].message()), epoch);
    }
  }
  // A shard none of whose servers is left is waited for (up to
  // connect_timeout, as any server that broke) rather than failed at once:
  // one of them may be back by then.
  for (const Shard& shard : m.shards()) {
    bool any = false;
    for (int s : shard.servers) any = any || !links_[s].lost;
    if (!any) {
      for (int s : shard.servers) links_[s].lost = false;
    }
  }
  return absl::OkStatus();
}

void Loader::FailLocked(absl::Status status) {
  if (error_.ok()) error_ = std::move(status);
}

void Loader::NotePeaksLocked() {
  const int buffers =
      static_cast<int>(pending_.size() + spare_images_.size() + spare_pixels_.size()) +
                      (sender_has_buffer_ ? 1 : 0);
  stats_.peak_batch_buffers = std::max(stats_.peak_batch_buffers, buffers);
  stats_.peak_queued_payload_bytes =
      std::max(stats_.peak_queued_payload_bytes, queued_payload_bytes_);
}

bool Loader::AllReceivedLocked() const {
  return opened_batches_ == plan_->num_batches && received_ == requested_;
}

int Loader::RouteLocked(uint64_t id, int wanted) const {
  const GlobalManifest& m = servers_->manifest();
  const Shard& shard = m.shards()[m.ShardOf(id)];
  if (wanted != SampleAssignment::kAnyServer) {
    if (wanted < 0 || wanted >= static_cast<int>(links_.size()) ||
        m.ShardOfServer(wanted) != m.ShardOf(id)) {
      return -1;
    }
    if (!links_[wanted].lost) return wanted;
  }
  int best = -1;
  for (int s : shard.servers) {
    if (links_[s].lost) continue;
    if (best < 0 || links_[s].owed < links_[best].owed) best = s;
  }
  return best;
}

bool Loader::WriteRequests(uint64_t epoch, uint64_t key_offset, FetchCall* call,
                           const std::deque<std::pair<uint64_t, Stage>>& requests) {
  FetchRequestBuilder builder(epoch, options_.seed, options_.pipeline, key_offset);
  for (size_t i = 0; i < requests.size(); ++i) {
    builder.Add(requests[i].first - key_offset, requests[i].second);
    if (builder.size() == options_.requests_per_message || i + 1 == requests.size()) {
      if (!call->Write(builder.Take())) return false;  // the stream broke: see ReceiveLoop
    }
  }
  return true;
}

// Registers each batch (under mu_) and queues its requests to the servers'
// writers: nothing here blocks on a server, so a slow one holds back only the
// batches that wait for its samples.
void Loader::SendLoop(const EpochPlan& plan) {
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
      const int server = RouteLocked(batch->ids[i], batch->assigned[i].server);
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
      const int server = RouteLocked(batch->ids[i], wanted);
      if (server < 0) {
        // A lost server without replicas has failed the epoch already.
        FailLocked(absl::InternalError(absl::StrCat(
            "offload policy '", policy_->name(), "' sent sample ", batch->ids[i], " to server ",
            wanted, ", which does not hold it (", servers_->size(), " servers)")));
        return;
      }
      batch->assigned[i].server = server;
      batch->assigned[i].stage = StageFor(server, batch->assigned[i].stage);
      links_[server].outbox.emplace_back(batch->ids[i], batch->assigned[i].stage);
      links_[server].owed++;
    }
    requested_ += batch->n - hits - cache_hits;
    stats_.requested += batch->n - hits - cache_hits;
    stats_.feature_cache_hits += hits;
    batch->remaining -= hits;
    pending_[k] = std::move(batch);
    sender_has_buffer_ = false;
    ++opened_batches_;
  }
}

void Loader::WriteLoop(int server, const EpochPlan& plan) {
  uint64_t gen = 0;
  std::shared_ptr<FetchCall> call;
  uint64_t key_offset = 0;  // constant; read once under the lock
  {
    absl::MutexLock lock(&mu_);
    gen = links_[server].gen;
    call = links_[server].call;
    key_offset = links_[server].key_offset;
  }
  SampleClient* const client = servers_->client(server);
  bool done_sent = false;
  while (true) {
    std::deque<std::pair<uint64_t, Stage>> writes;
    bool resend = false;
    bool send_done = false;
    size_t owed_at_break = 0;
    {
      absl::MutexLock lock(&mu_);
      Link& link = links_[server];
      auto ready = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return stopping_ || !error_.ok() || link.stream_done || link.gen != gen ||
               !link.outbox.empty() || (!done_sent && AllReceivedLocked());
      };
      mu_.Await(absl::Condition(&ready));
      if (stopping_ || !error_.ok() || link.stream_done) return;
      if (link.gen != gen) {
        // The receiver re-opened the stream: everything owed goes out again,
        // the queued requests with it (they are registered, so they count).
        gen = link.gen;
        call = link.call;
        done_sent = false;
        link.outbox.clear();
        for (const auto& [index, batch] : pending_) {
          for (int i = 0; i < batch->n; ++i) {
            if (batch->arrived[i] || batch->assigned[i].server != server) continue;
            writes.emplace_back(batch->ids[i], batch->assigned[i].stage);
            if (index < link.opened_at_break) ++owed_at_break;
          }
        }
        stats_.resent += writes.size();
        stats_.servers[server].resent += writes.size();
        resend = true;
      } else if (!link.outbox.empty()) {
        writes.swap(link.outbox);
      } else {
        send_done = true;
        done_sent = true;
      }
    }
    if (resend && !writes.empty()) {
      // Batches the trainer made room for while the stream was down were
      // written to the dead stream: they are requested here too.
      spdlog::info("requesting again from storage server {} the {} samples not received yet: {} "
                   "owed when the stream ended, {} requested on it after that",
                   client->address(), writes.size(), owed_at_break,
                   writes.size() - owed_at_break);
    }
    // A failed write means the stream broke: the receiver re-opens it and
    // the next generation resends.
    if (!writes.empty()) WriteRequests(plan.epoch, key_offset, call.get(), writes);
    if (send_done) call->WritesDone();
  }
}

namespace {

BackoffOptions ResetBackoff() {
  BackoffOptions backoff;
  backoff.initial = absl::Milliseconds(50);
  backoff.max = absl::Seconds(1);
  backoff.multiplier = 2;
  backoff.jitter = 0.5;
  return backoff;
}

}  // namespace

bool Loader::HasLiveReplicaLocked(int server) const {
  const GlobalManifest& m = servers_->manifest();
  for (int r : m.shards()[m.ShardOfServer(server)].servers) {
    if (r != server && !links_[r].lost && !links_[r].client->IsDown()) return true;
  }
  return false;
}

void Loader::LoseServerLocked(int server, const absl::Status& why) {
  Link& link = links_[server];
  link.lost = true;
  link.client->MarkDown(why);  // statistics calls skip it too
  stats_.servers[server].lost = true;
  const GlobalManifest& m = servers_->manifest();
  const int shard_index = m.ShardOfServer(server);
  const Shard& shard = m.shards()[shard_index];
  if (RouteLocked(shard.base, SampleAssignment::kAnyServer) < 0) {
    // No replica left: count what this epoch will miss.
    int64_t owed = 0;
    for (const auto& [index, batch] : pending_) {
      for (int i = 0; i < batch->n; ++i) {
        if (!batch->arrived[i] && batch->assigned[i].server == server) ++owed;
      }
    }
    const int64_t b = options_.batch_size;
    const std::vector<uint64_t>& order = plan_->order;
    const int64_t total = std::min(static_cast<int64_t>(order.size()), plan_->num_batches * b);
    int64_t unrequested = 0;
    for (int64_t p = opened_batches_ * b; p < total; ++p) {
      if (m.ShardOf(order[p]) == shard_index) ++unrequested;
    }
    FailLocked(absl::UnavailableError(absl::StrCat(
        "storage server ", link.client->address(), " is gone and no other server holds its shard ('",
        shard.dataset_name, "', ", shard.size, " samples): ", owed + unrequested,
        " samples of epoch ", plan_->epoch, " are missing (", owed, " requested and not received, ",
        unrequested, " not requested yet); ", why.message())));
    return;
  }
  uint64_t moved = 0;
  std::vector<int> to;
  for (const auto& [index, batch] : pending_) {
    for (int i = 0; i < batch->n; ++i) {
      if (batch->arrived[i] || batch->assigned[i].server != server) continue;
      const int r = RouteLocked(batch->ids[i], SampleAssignment::kAnyServer);
      batch->assigned[i].server = r;
      batch->assigned[i].stage = StageFor(r, batch->assigned[i].stage);
      links_[r].outbox.emplace_back(batch->ids[i], batch->assigned[i].stage);
      links_[r].owed++;
      ++moved;
      if (std::find(to.begin(), to.end(), r) == to.end()) to.push_back(r);
    }
  }
  link.owed = 0;
  link.outbox.clear();
  stats_.servers[server].failed_over += moved;
  std::vector<std::string> names;
  for (int r : to) names.push_back(links_[r].client->address());
  spdlog::warn("storage server {} is down ({}); going on without it: its {} samples owed go to "
               "{}, and its shard's next samples to the other servers that hold it (it is "
               "probed again when an epoch starts)",
               link.client->address(), std::string(why.message()), moved,
               names.empty() ? std::string("none") : absl::StrJoin(names, ", "));
}

void Loader::ReceiveLoop(int server, const EpochPlan& plan) {
  SampleClient* const client = servers_->client(server);
  const std::vector<int64_t>& position_of_id = plan.position_of_id;
  const std::string& address = client->address();
  v1::FetchResponse response;
  const int64_t b = options_.batch_size;
  std::shared_ptr<FetchCall> call;
  uint64_t key_offset = 0;
  {
    absl::MutexLock lock(&mu_);
    call = links_[server].call;
    key_offset = links_[server].key_offset;
  }
  Backoff refusal_backoff(SampleClient::RetryBackoff());
  // Between streams a live server ended (reset under memory pressure, shed):
  // exponential up to 1 s, restarted by a stream that delivered something.
  Backoff reset_backoff(ResetBackoff());
  int refusals = 0;  // streams refused in a row for want of a slot
  absl::Time refused_since;
  while (true) {
    int64_t delivered = 0;
    while (call->Read(&response)) {
      absl::MutexLock lock(&mu_);
      Link& link = links_[server];
      for (v1::Sample& sample : *response.mutable_samples()) {
        const uint64_t id = key_offset + sample.id();
        const int64_t pos = id < position_of_id.size() ? position_of_id[id] : -1;
        auto it = pos >= 0 ? pending_.find(pos / b) : pending_.end();
        const int slot = static_cast<int>(pos % b);
        if (it == pending_.end() || it->second->arrived[slot] ||
            it->second->assigned[slot].server != server) {
          FailLocked(absl::DataLossError(absl::StrCat(
              "storage server ", address, " sent sample ", sample.id(), " (global id ", id, ")",
              it == pending_.end() || it->second->assigned[slot].server != server
                  ? " that was not requested from it"
                  : " twice")));
          break;
        }
        it->second->arrived[slot] = 1;
        link.owed--;
        queued_payload_bytes_ += sample.payload().size();
        stats_.servers[server].samples++;
        stats_.servers[server].bytes += sample.payload().size();
        NotePeaksLocked();
        WorkItem item;
        item.id = id;
        item.server = server;
        item.sample = std::move(sample);
        item.batch = it->second.get();
        item.slot = slot;
        work_.push_back(std::move(item));
        ++received_;
        ++delivered;
      }
    }
    const absl::Status status = call->Finish();
    // Whether to retry is decided from the code and the server's reason.
    const std::string reason = call->RefusalReason();
    const StreamBreakAction action =
        DecideStreamBreak({status, reason, call->largest_request_bytes()});
    int64_t outstanding = 0;
    absl::Duration refusal_wait;
    {
      absl::MutexLock lock(&mu_);
      Link& link = links_[server];
      ServerLoadStats& ss = stats_.servers[server];
      if (stopping_ || !error_.ok()) break;
      if (status.ok()) {
        if (link.owed > 0) {
          FailLocked(absl::DataLossError(
              absl::StrCat("storage server ", address, " closed the stream with ", link.owed,
                           " requested samples missing")));
        }
        break;
      }
      outstanding = link.owed;
      link.opened_at_break = opened_batches_;
      // Everything the epoch needs has arrived: nothing to reconnect for.
      if (outstanding == 0 && AllReceivedLocked()) break;
      if (action == StreamBreakAction::kAwaitSlot && delivered == 0) {
        stats_.streams_refused++;
        ss.streams_refused++;
        const absl::Time now = absl::Now();
        if (refusals++ == 0) {
          refused_since = now;
          refusal_backoff.Reset();
        }
        const absl::Duration left = refused_since + client->connect_timeout() - now;
        if (left <= absl::ZeroDuration()) {
          FailLocked(absl::ResourceExhaustedError(absl::StrCat(
              "storage server ", address, " refused a fetch stream ", refusals,
              " times in a row over ",
              absl::FormatDuration(absl::Trunc(now - refused_since, absl::Milliseconds(1))),
              " (ClientOptions.connect_timeout = ",
              absl::FormatDuration(client->connect_timeout()), "): ", status.message())));
          break;
        }
        refusal_wait = std::min(refusal_backoff.Next(), left);
      } else {
        refusals = 0;
        stats_.stream_breaks++;
        ss.stream_breaks++;
        if (action == StreamBreakAction::kFail) {
          FailLocked(absl::Status(status.code(),
                                  absl::StrCat("fetch stream from storage server ", address,
                                               " failed: ", status.message())));
          break;
        }
      }
    }
    // Waits `wait` (cut short if the loader stops or fails meanwhile), then
    // puts a new stream in the link's place; false if the loader stopped.
    auto reopen_after = [&](absl::Duration wait) -> bool {
      {
        absl::MutexLock lock(&mu_);
        auto done = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return stopping_ || !error_.ok(); };
        mu_.AwaitWithTimeout(absl::Condition(&done), wait);
        if (stopping_ || !error_.ok()) return false;
      }
      std::shared_ptr<FetchCall> fresh = client->OpenFetch();
      absl::MutexLock lock(&mu_);
      if (stopping_ || !error_.ok()) return false;
      links_[server].call = fresh;
      call = std::move(fresh);
      ++links_[server].gen;  // the writer requests again what had not arrived
      return true;
    };
    if (refusal_wait > absl::ZeroDuration()) {
      client->LogRetry(absl::StrCat("opening a fetch stream from storage server ", address),
                       status, refusal_wait);
      if (!reopen_after(refusal_wait)) break;
      continue;
    }
    const std::string broke_with = absl::StrCat(
        "its fetch stream failed (", absl::StatusCodeToString(status.code()), ": ",
        status.message(), ")");
    if (call->ServerDraining()) {
      // Stopping (a rolling restart): it hands back what it had not started.
      absl::MutexLock lock(&mu_);
      if (stopping_ || !error_.ok()) break;
      if (HasLiveReplicaLocked(server)) {
        LoseServerLocked(server,
                         absl::UnavailableError(absl::StrCat(broke_with, ": it is draining")));
        break;
      }
    }
    // Does the server still answer? A live one that reset the stream does at
    // once; one whose process is gone refuses the connection at once.
    if (delivered > 0) reset_backoff.Reset();
    const absl::Status ping = client->Ping();
    if (ping.ok() || ping.code() == absl::StatusCode::kResourceExhausted) {
      // Alive (RESOURCE_EXHAUSTED: answering, but short of memory): a new
      // stream after a backoff, and everything it owes requested again.
      // However often: only a server that stops answering is given up on.
      const absl::Duration wait = reset_backoff.Next();
      client->LogRetry(absl::StrCat("the fetch stream from storage server ", address, " (",
                                    outstanding, " requested samples not received; the server "
                                    "still answers)"),
                       status, wait);
      if (!reopen_after(wait)) break;
      absl::MutexLock lock(&mu_);
      stats_.reconnects++;
      stats_.servers[server].reconnects++;
      continue;
    }
    {
      absl::MutexLock lock(&mu_);
      if (stopping_ || !error_.ok()) break;
      if (ping.code() == absl::StatusCode::kFailedPrecondition) {  // another dataset
        FailLocked(ping);
        break;
      }
      // Unreachable (the connection refused: the process is gone) while a
      // replica can serve: its samples go there now, not after connect_timeout.
      if (ping.code() == absl::StatusCode::kUnavailable && HasLiveReplicaLocked(server)) {
        LoseServerLocked(server, absl::UnavailableError(absl::StrCat(
                                     broke_with, " and it does not answer: ", ping.message())));
        break;
      }
    }
    spdlog::warn("fetch stream from storage server {} broke ({}: {}) with {} requested samples "
                 "not received; waiting up to {} for it to come back, then requesting those "
                 "again with any requested while it is away",
                 address, absl::StatusCodeToString(status.code()), std::string(status.message()),
                 outstanding, absl::FormatDuration(client->connect_timeout()));
    const absl::Time broke = absl::Now();
    absl::Status back = client->AwaitSameServer([this]() {
      absl::MutexLock lock(&mu_);
      return stopping_ || !error_.ok();
    });
    std::shared_ptr<FetchCall> fresh;
    if (back.ok()) fresh = client->OpenFetch();
    absl::MutexLock lock(&mu_);
    if (stopping_ || !error_.ok()) break;
    if (!back.ok()) {
      // Gone for good: a changed dataset fails the run; a server that did
      // not come back hands its samples to its replicas, if any.
      if (back.code() == absl::StatusCode::kUnavailable) {
        LoseServerLocked(server, absl::UnavailableError(absl::StrCat(
                                     broke_with, " and it did not answer again within ",
                                     absl::FormatDuration(client->connect_timeout()),
                                     " (ClientOptions.connect_timeout): ", back.message())));
      } else {
        FailLocked(std::move(back));
      }
      break;
    }
    spdlog::info("storage server {} is back after {}; fetch stream re-opened", address,
                 absl::FormatDuration(absl::Trunc(absl::Now() - broke, absl::Milliseconds(100))));
    links_[server].call = fresh;
    call = std::move(fresh);
    ++links_[server].gen;
    stats_.reconnects++;
    stats_.servers[server].reconnects++;
  }
  absl::MutexLock lock(&mu_);
  links_[server].stream_done = true;
  --streams_open_;
}

void Loader::WorkerLoop(const EpochPlan& plan) {
  while (true) {
    WorkItem item;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return !work_.empty() || streams_open_ == 0 || stopping_;
      };
      mu_.Await(absl::Condition(&ready));
      if (work_.empty() || stopping_) return;
      item = std::move(work_.front());
      work_.pop_front();
    }
    const uint64_t id = item.id;
    const uint64_t bytes = item.sample.payload().size();
    OpTimes times;
    PerStage<uint64_t> stage_bytes;
    absl::Status status = SampleStatus(item.sample);
    absl::StatusOr<Stage> stage = StageFromProto(item.sample.stage());
    const Stage received_stage = stage.ok() ? *stage : kFirstStage;
    uint32_t image_width = 0, image_height = 0;
    // A file that arrived whole is offered to the sample cache (before its
    // payload moves into the pipeline).
    bool kept = false;
    if (status.ok() && !item.from_cache && options_.sample_cache != nullptr &&
        received_stage == kFirstStage) {
      kept = options_.sample_cache->Put(id, item.sample.payload());
    }
    if (status.ok()) {
      absl::StatusOr<StageData> data = StageDataFromProto(&item.sample);
      status = data.status();
      if (status.ok() && options_.measure_skipped_ops) {
        status = MeasureSkippedOps(*data, SampleKey{options_.seed, plan.epoch, id},
                                   options_.pipeline, &times, &stage_bytes);
        if (status.ok() && data->stage == kFirstStage) {
          // The profile keeps the image's size: a planner draws any epoch's crop box from it.
          absl::StatusOr<ImageInfo> info = ReadJpegInfo(data->data, options_.pipeline.limits);
          if (info.ok()) {
            image_width = static_cast<uint32_t>(info->width);
            image_height = static_cast<uint32_t>(info->height);
          }
        }
      }
      if (status.ok()) {
        status = Finish(*std::move(data), plan.epoch, id, item.batch, item.slot, &times,
                        &stage_bytes);
        if (!status.ok()) {
          status = absl::Status(
              status.code(),
              absl::StrCat("sample ", id, " (", servers_->RelativePath(id, item.server),
                           item.from_cache ? " from this node's sample cache"
                                           : absl::StrCat(" from ", servers_->address(item.server)),
                           ", prepared locally from ", StageName(received_stage),
                           "): ", status.message()));
        }
      }
    }
    SampleObservation obs;
    obs.id = id;
    obs.server = item.server;
    obs.received = received_stage;
    obs.payload_bytes = bytes;
    obs.local = times;
    obs.local_bytes = stage_bytes;
    obs.server_cpu_seconds = item.sample.server_cpu_seconds();
    obs.server_wall_seconds = item.sample.server_wall_seconds();
    obs.server_read_seconds = item.sample.server_read_seconds();
    obs.cache_hit = item.sample.cache_hit();
    obs.ok = status.ok();
    obs.image_width = image_width;
    obs.image_height = image_height;
    // A cache hit crossed no link and no server: not an observation of them.
    if (!item.from_cache) policy_->OnSample(obs);  // outside the lock: the policy has its own
    absl::MutexLock lock(&mu_);
    queued_payload_bytes_ -= std::min<uint64_t>(queued_payload_bytes_, bytes);
    stats_.local_cpu_seconds += times.Total();
    stats_.server_cpu_seconds += item.sample.server_cpu_seconds();
    if (kept) stats_.sample_cache_inserted++;
    if (status.ok() && item.from_cache) {
      // Counted in sample_cache_hits, not as received.
    } else if (status.ok()) {
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

absl::Status Loader::Finish(StageData data, uint64_t epoch, uint64_t id, PendingBatch* batch,
                            int slot, OpTimes* times, PerStage<uint64_t>* stage_bytes) {
  const SampleKey key{options_.seed, epoch, id};
  if (options_.target == Stage::kTensor) {
    return FinishToTensor(std::move(data), key, options_.pipeline,
                          batch->images.data() + slot * sample_values_, times, stage_bytes);
  }
  if (vector_target_) {
    absl::StatusOr<StageData> out =
        RunPipeline(std::move(data), options_.target, key, options_.pipeline, times, stage_bytes);
    if (!out.ok()) return out.status();
    if (out->width != sample_values_) {
      return absl::InvalidArgumentError(absl::StrCat(StageName(options_.target), " of ",
                                                     out->width, " values, expected ",
                                                     sample_values_));
    }
    float* const dst = batch->images.data() + slot * sample_values_;
    if (GetStageInfo(options_.target).dtype == DType::kFloat16) {
      const auto* halves = reinterpret_cast<const uint16_t*>(out->data.data());
      HalvesToFloats(halves, sample_values_, dst);
      if (feature_cache_ != nullptr) feature_cache_->Put(id, halves);
    } else {
      std::memcpy(dst, out->data.data(), sizeof(float) * sample_values_);
    }
    return absl::OkStatus();
  }
  absl::StatusOr<StageData> out =
      RunPipeline(std::move(data), options_.target, key, options_.pipeline, times, stage_bytes);
  if (!out.ok()) return out.status();
  if (static_cast<int64_t>(out->data.size()) != sample_values_) {
    return absl::InternalError(absl::StrCat(StageName(options_.target), " payload has ",
                                            out->data.size(), " bytes, expected ",
                                            sample_values_));
  }
  std::memcpy(batch->pixels.data() + slot * sample_values_, out->data.data(), sample_values_);
  return absl::OkStatus();
}

bool Loader::NextReadyLocked() const {
  if (!error_.ok() || stopping_ || next_batch_ >= plan_->num_batches) return true;
  auto it = pending_.find(next_batch_);
  return it != pending_.end() && it->second->remaining == 0;
}

bool Loader::WaitForNext(absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  ++waiting_callers_;
  const bool ready =
      mu_.AwaitWithTimeout(absl::Condition(this, &Loader::NextReadyLocked), timeout);
  --waiting_callers_;
  return ready;
}

absl::StatusOr<bool> Loader::Next(Batch* out) {
  {
    absl::MutexLock lock(&mu_);
    ++waiting_callers_;
  }
  absl::StatusOr<bool> result = NextBatch(out);
  absl::MutexLock lock(&mu_);
  --waiting_callers_;
  return result;
}

absl::StatusOr<bool> Loader::NextBatch(Batch* out) {
  while (true) {
    std::unique_ptr<PendingBatch> batch;
    std::shared_ptr<const EpochPlan> plan;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &Loader::NextReadyLocked));
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

LoaderEpochStats Loader::stats() const {
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

int64_t Loader::num_batches() const {
  absl::MutexLock lock(&mu_);
  return plan_->num_batches;
}

int64_t Loader::epoch_samples() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(plan_->order.size());
}

std::vector<uint64_t> Loader::order() const {
  std::shared_ptr<const EpochPlan> plan;
  {
    absl::MutexLock lock(&mu_);
    plan = plan_;
  }
  return plan->order;  // copied outside the lock: the plan does not change
}

void Loader::Stop() {
  absl::MutexLock lifecycle(&lifecycle_mu_);
  StopLocked();
}

void Loader::StopLocked() {
  std::vector<std::shared_ptr<FetchCall>> calls;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    for (const Link& link : links_) {
      if (link.call) calls.push_back(link.call);
    }
  }
  for (const auto& call : calls) call->Cancel();
  JoinThreads();
}

void Loader::JoinThreads() {
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  absl::MutexLock lock(&mu_);
  for (Link& link : links_) link.call.reset();
}

}  // namespace sophon
