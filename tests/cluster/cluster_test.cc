// In-process cluster tests: a real sophon-server (gRPC on 127.0.0.1, port 0)
// over a dataset of real JPEG files written by the test, and the real loader.
#include <atomic>
#include <functional>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "client/loader/loader.h"
#include "client/offload/fixed_policy.h"
#include "client/train/train_loop.h"
#include "client/offload/net_probe.h"
#include "client/offload/smartoff_policy.h"
#include "sophon/planning/planner.h"
#include "sophon/image/image_ops.h"
#include "client/loader/sample_client.h"
#include "client/loader/sampler.h"
#include "sophon/net/wire.h"
#include "server/storage_server.h"
#include "tests/client/train/tiny_emulated_trainer.h"
#include "tests/cluster/local_server.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

class ClusterTest : public ::testing::Test {
 protected:
  void StartServer(const std::string& root, int prep_workers = 2, int max_inflight = 128,
                   std::function<void(uint64_t)> before_prep = nullptr,
                   absl::Duration connect_timeout = absl::Seconds(10)) {
    ServiceOptions service;
    service.prep_workers = prep_workers;
    service.max_inflight_per_stream = max_inflight;
    service.before_prep = std::move(before_prep);
    absl::StatusOr<testing::LocalServer> local =
        testing::StartLocalServer(root, std::move(service), connect_timeout);
    ASSERT_TRUE(local.ok()) << local.status();
    server_ = std::move(local->server);
    client_ = std::move(local->client);
  }

  LoaderOptions SmallLoaderOptions() {
    LoaderOptions o;
    o.batch_size = 5;
    o.workers = 2;
    o.prefetch_batches = 2;
    o.seed = 11;
    o.pipeline.augment.crop_size = 48;
    return o;
  }

  // Runs one epoch and returns its batches.
  absl::StatusOr<std::vector<Batch>> RunEpoch(PlannerKind mode, const LoaderOptions& options,
                                              uint64_t epoch = 0, LoaderEpochStats* stats = nullptr) {
    FixedPolicy planner(FixedKindStage(mode), ModeName(mode));
    return RunEpochWith(&planner, options, epoch, stats);
  }

  // Runs one epoch planned by `planner` and returns its batches.
  absl::StatusOr<std::vector<Batch>> RunEpochWith(OffloadPolicy* planner,
                                                  const LoaderOptions& options, uint64_t epoch,
                                                  LoaderEpochStats* stats = nullptr) {
    absl::StatusOr<std::unique_ptr<Loader>> loader =
        Loader::Create(client_.get(), options, planner);
    if (!loader.ok()) return loader.status();
    if (absl::Status s = (*loader)->StartEpoch(epoch); !s.ok()) return s;
    std::vector<Batch> batches;
    while (true) {
      Batch b;
      absl::StatusOr<bool> more = (*loader)->Next(&b);
      if (!more.ok()) return more.status();
      if (!*more) break;
      batches.push_back(std::move(b));
    }
    if (stats) *stats = (*loader)->stats();
    return batches;
  }

  // Stops the server while its prep workers are held back by `gate`, and opens
  // the gate only once `loader` has seen its stream break, so the samples held
  // back are never sent on it.
  void StopServerHoldingSamples(absl::Notification* gate, Loader* loader) {
    std::thread stopper([this] { server_->Shutdown(absl::ZeroDuration()); });
    const absl::Time give_up = absl::Now() + absl::Seconds(20);
    while (loader->stats().stream_breaks == 0 && absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    EXPECT_GE(loader->stats().stream_breaks, 1) << "the stream did not break";
    gate->Notify();
    stopper.join();
    server_.reset();
  }

  // A server on `port` again (the same address the client knows).
  void RestartServer(const std::string& root, int port) {
    StorageServerOptions options;
    options.data_dir = root;
    options.host = "127.0.0.1";
    options.port = port;
    options.service.prep_workers = 2;
    options.stats_interval = absl::ZeroDuration();
    absl::StatusOr<std::unique_ptr<StorageServer>> server = StorageServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }

  std::unique_ptr<StorageServer> server_;
  std::unique_ptr<SampleClient> client_;
};

// Counts the samples that reached a gate.
class Arrivals {
 public:
  void Add() {
    absl::MutexLock lock(&mu_);
    ++n_;
  }
  // Returns once `n` samples have arrived.
  void WaitFor(int n) {
    struct Target {
      const int* n;
      int wanted;
    };
    absl::MutexLock lock(&mu_);
    Target target{&n_, n};
    mu_.Await(absl::Condition(+[](Target* t) { return *t->n >= t->wanted; }, &target));
  }

 private:
  absl::Mutex mu_;
  int n_ ABSL_GUARDED_BY(mu_) = 0;
};

// Samples in `pass` go through; the others wait for `gate` (counted in
// `held` first, if given).
std::function<void(uint64_t)> HoldExcept(std::set<uint64_t> pass, absl::Notification* gate,
                                         Arrivals* held = nullptr) {
  return [pass = std::move(pass), gate, held](uint64_t id) {
    if (pass.count(id) != 0) return;
    if (held != nullptr) held->Add();
    gate->WaitForNotification();
  };
}

TEST_F(ClusterTest, EveryModeDeliversEverySampleOnceAndIdenticalBatches) {
  testing::TestDatasetOptions dopts;
  dopts.classes = 3;
  dopts.per_class = 7;  // 21 samples: 4 full batches of 5 and one of 1
  StartServer(testing::MakeTestDataset("cluster_modes", dopts));
  const LoaderOptions options = SmallLoaderOptions();
  std::map<PlannerKind, std::vector<Batch>> results;
  for (PlannerKind mode : {PlannerKind::kNoOff, PlannerKind::kResizeOff, PlannerKind::kAllOff}) {
    LoaderEpochStats stats;
    absl::StatusOr<std::vector<Batch>> batches = RunEpoch(mode, options, 0, &stats);
    ASSERT_TRUE(batches.ok()) << ModeName(mode) << ": " << batches.status();
    ASSERT_EQ(batches->size(), 5u) << ModeName(mode);
    std::multiset<uint64_t> ids;
    for (const Batch& b : *batches) {
      ids.insert(b.ids.begin(), b.ids.end());
      for (size_t i = 0; i < b.ids.size(); ++i) {
        EXPECT_EQ(b.labels[i], client_->manifest().labels[b.ids[i]]);
      }
    }
    EXPECT_EQ(ids.size(), 21u);
    EXPECT_EQ(std::set<uint64_t>(ids.begin(), ids.end()).size(), 21u) << ModeName(mode);
    EXPECT_EQ(stats.samples, 21u);
    const int expected_stage = StageIndex(FixedKindStage(mode));
    EXPECT_EQ(stats.samples_by_stage[expected_stage], 21u);
    if (mode == PlannerKind::kAllOff) {
      EXPECT_EQ(stats.bytes_by_stage[expected_stage], 21u * 3 * 48 * 48 * 4);
    }
    results[mode] = *std::move(batches);
  }
  // Byte-for-byte identical batches whatever the split point.
  const std::vector<Batch>& ref = results[PlannerKind::kNoOff];
  for (PlannerKind mode : {PlannerKind::kResizeOff, PlannerKind::kAllOff}) {
    const std::vector<Batch>& other = results[mode];
    for (size_t k = 0; k < ref.size(); ++k) {
      ASSERT_EQ(ref[k].ids, other[k].ids) << ModeName(mode) << " batch " << k;
      ASSERT_EQ(ref[k].labels, other[k].labels);
      ASSERT_EQ(ref[k].images.size(), other[k].images.size());
      EXPECT_EQ(0, std::memcmp(ref[k].images.data(), other[k].images.data(),
                               ref[k].images.size() * sizeof(float)))
          << ModeName(mode) << " batch " << k;
    }
  }
  // Another epoch: another order and other augmentations.
  absl::StatusOr<std::vector<Batch>> epoch1 = RunEpoch(PlannerKind::kNoOff, options, 1);
  ASSERT_TRUE(epoch1.ok());
  EXPECT_NE((*epoch1)[0].ids, ref[0].ids);
}

// A uint8 target: the loader stops at FLIPPED (the device normalises) or at
// CROPPED with each sample's flip flag (the device flips and normalises).
// Every mode gives the same pixels, no sample crosses the wire past the
// target, and normalising the pixels (mirrored where flagged) gives the
// float32 batches bit for bit.
TEST_F(ClusterTest, Uint8TargetGivesPixelsThatNormaliseToTheTensorBatches) {
  testing::TestDatasetOptions dopts;
  dopts.classes = 3;
  dopts.per_class = 4;  // 12 samples: 2 full batches of 5 and one of 2
  StartServer(testing::MakeTestDataset("cluster_uint8", dopts));
  const LoaderOptions float_options = SmallLoaderOptions();
  absl::StatusOr<std::vector<Batch>> reference = RunEpoch(PlannerKind::kNoOff, float_options, 2);
  ASSERT_TRUE(reference.ok()) << reference.status();
  LoaderOptions options = SmallLoaderOptions();
  const int s = options.pipeline.augment.crop_size;
  for (Stage target : {Stage::kFlipped, Stage::kCropped}) {
    options.target = target;
    int flipped = 0;
    for (PlannerKind mode :
         {PlannerKind::kNoOff, PlannerKind::kResizeOff, PlannerKind::kAllOff}) {
      SCOPED_TRACE(absl::StrCat(StageName(target), " ", ModeName(mode)));
      LoaderEpochStats stats;
      absl::StatusOr<std::vector<Batch>> batches = RunEpoch(mode, options, 2, &stats);
      ASSERT_TRUE(batches.ok()) << batches.status();
      ASSERT_EQ(batches->size(), reference->size());
      // alloff stops at the target.
      for (Stage past = static_cast<Stage>(static_cast<int>(target) + 1);
           past <= Stage::kTensor; past = static_cast<Stage>(static_cast<int>(past) + 1)) {
        EXPECT_EQ(stats.samples_by_stage[StageIndex(past)], 0u) << StageName(past);
      }
      if (mode == PlannerKind::kAllOff) {
        EXPECT_EQ(stats.samples_by_stage[StageIndex(target)], 12u);
      }
      for (size_t k = 0; k < batches->size(); ++k) {
        const Batch& b = (*batches)[k];
        const Batch& ref = (*reference)[k];
        ASSERT_EQ(b.ids, ref.ids) << "batch " << k;
        EXPECT_EQ(b.stage, target);
        EXPECT_TRUE(b.images.empty());
        ASSERT_EQ(b.pixels.size(), static_cast<size_t>(b.n) * s * s * 3);
        ASSERT_EQ(b.flips.size(), target == Stage::kCropped ? static_cast<size_t>(b.n) : 0u);
        std::vector<float> normalised(b.pixels.size());
        for (int i = 0; i < b.n; ++i) {
          const bool mirror = target == Stage::kCropped && b.flips[i] != 0;
          flipped += mirror ? 1 : 0;
          ToTensorNormalize(b.pixels.data() + static_cast<size_t>(i) * s * s * 3, s, s,
                            normalised.data() + static_cast<size_t>(i) * 3 * s * s, mirror);
        }
        ASSERT_EQ(normalised.size(), ref.images.size());
        EXPECT_EQ(0, std::memcmp(normalised.data(), ref.images.data(),
                                 normalised.size() * sizeof(float)))
            << "batch " << k;
      }
    }
    // Some of the 12 samples are flagged, in each of the 3 modes (p = 0.5).
    if (target == Stage::kCropped) EXPECT_GT(flipped, 0);
  }
  options.target = Stage::kRaw;
  EXPECT_FALSE(RunEpoch(PlannerKind::kNoOff, options).ok()) << "RAW is no batch layout";
}

// The stages a TENSOR job's samples may cross the wire at.
constexpr int kTensorJobStages = StageIndex(Stage::kTensor) + 1;

// A per-sample plan mixing every stage (what smartoff produces) until
// switched to TENSOR for everything not yet requested (a re-plan), counting
// what arrived in each stage.
class MixedPolicy final : public OffloadPolicy {
 public:
  std::string name() const override { return "mixed"; }
  absl::Status BeginEpoch(uint64_t, absl::Span<const uint64_t>) override {
    return absl::OkStatus();
  }
  void Plan(int64_t, absl::Span<const uint64_t> ids, absl::Span<SampleAssignment> out) override {
    for (size_t i = 0; i < ids.size(); ++i) {
      out[i].stage = all_tensor_ ? Stage::kTensor : StageAt((ids[i] * 7 + 3) % kTensorJobStages);
    }
  }
  void OnSample(const SampleObservation& obs) override {
    std::lock_guard<std::mutex> lock(mu_);
    observed_by_stage_[StageIndex(obs.received)]++;
  }
  void SwitchToTensor() { all_tensor_ = true; }
  std::map<int, int> observed_by_stage() {
    std::lock_guard<std::mutex> lock(mu_);
    return observed_by_stage_;
  }

 private:
  std::atomic<bool> all_tensor_{false};
  std::mutex mu_;
  std::map<int, int> observed_by_stage_;
};

TEST_F(ClusterTest, MixedAndReplannedEpochsMatchNoOffByteForByte) {
  testing::TestDatasetOptions dopts;
  dopts.classes = 2;
  dopts.per_class = 12;
  StartServer(testing::MakeTestDataset("cluster_mixed", dopts));
  LoaderOptions options = SmallLoaderOptions();
  absl::StatusOr<std::vector<Batch>> reference = RunEpoch(PlannerKind::kNoOff, options, 2);
  ASSERT_TRUE(reference.ok()) << reference.status();

  MixedPolicy planner;
  absl::StatusOr<std::unique_ptr<Loader>> loader = Loader::Create(client_.get(), options, &planner);
  ASSERT_TRUE(loader.ok());
  ASSERT_TRUE((*loader)->StartEpoch(2).ok());
  std::vector<Batch> batches;
  while (true) {
    Batch b;
    absl::StatusOr<bool> more = (*loader)->Next(&b);
    ASSERT_TRUE(more.ok()) << more.status();
    if (!*more) break;
    // After two batches (so that at least their ten samples were planned
    // mixed, however fast the loader requests), everything not yet requested
    // goes to TENSOR.
    if (batches.size() == 1) planner.SwitchToTensor();
    batches.push_back(std::move(b));
  }
  ASSERT_EQ(batches.size(), reference->size());
  for (size_t k = 0; k < batches.size(); ++k) {
    ASSERT_EQ(batches[k].ids, (*reference)[k].ids);
    EXPECT_EQ(0, std::memcmp(batches[k].images.data(), (*reference)[k].images.data(),
                             batches[k].images.size() * sizeof(float)))
        << "batch " << k;
  }
  const std::map<int, int> observed_by_stage = planner.observed_by_stage();
  int total = 0;
  for (auto& [stage, n] : observed_by_stage) total += n;
  EXPECT_EQ(total, 24);
  EXPECT_GE(observed_by_stage.size(), 3u);  // several stages really crossed the wire
}

// A plan sending sample id at stage (id + shift) % kNumStages.
class RotatingPolicy final : public OffloadPolicy {
 public:
  explicit RotatingPolicy(int shift) : shift_(shift) {}
  std::string name() const override { return "rotating"; }
  absl::Status BeginEpoch(uint64_t, absl::Span<const uint64_t>) override {
    return absl::OkStatus();
  }
  void Plan(int64_t, absl::Span<const uint64_t> ids, absl::Span<SampleAssignment> out) override {
    for (size_t i = 0; i < ids.size(); ++i) {
      out[i].stage = StageAt(static_cast<int>((ids[i] + shift_) % kNumStages));
    }
  }

 private:
  const int shift_;
};

// Files of every encoding the lossless crop handles or declines, each sent
// at every stage over five epochs of mixed plans: the batches equal nooff's
// byte for byte, and JPEG_CROP samples really crossed the wire.
TEST_F(ClusterTest, MixedPlansOverEveryEncodingMatchNoOffByteForByte) {
  testing::TestDatasetOptions dopts;
  dopts.classes = 2;
  dopts.encodings.clear();
  for (const testing::NamedEncoding& e : testing::AllJpegEncodings()) {
    dopts.encodings.push_back(e.options);
  }
  dopts.per_class = static_cast<int>(dopts.encodings.size());  // each encoding twice
  dopts.min_side = 200;
  dopts.max_side = 420;
  StartServer(testing::MakeTestDataset("cluster_encodings", dopts));
  const size_t n = 2 * dopts.encodings.size();
  LoaderOptions options = SmallLoaderOptions();
  absl::StatusOr<std::vector<Batch>> reference = RunEpoch(PlannerKind::kNoOff, options, 3);
  ASSERT_TRUE(reference.ok()) << reference.status();

  uint64_t jpeg_crop_received = 0;
  for (int shift = 0; shift < kNumStages; ++shift) {
    SCOPED_TRACE(absl::StrCat("shift ", shift));
    RotatingPolicy planner(shift);
    LoaderEpochStats stats;
    absl::StatusOr<std::vector<Batch>> batches = RunEpochWith(&planner, options, 3, &stats);
    ASSERT_TRUE(batches.ok()) << batches.status();
    EXPECT_EQ(stats.samples, n);
    jpeg_crop_received += stats.samples_by_stage[StageIndex(Stage::kJpegCrop)];
    ASSERT_EQ(batches->size(), reference->size());
    for (size_t k = 0; k < batches->size(); ++k) {
      ASSERT_EQ((*batches)[k].ids, (*reference)[k].ids);
      EXPECT_EQ(0, std::memcmp((*batches)[k].images.data(), (*reference)[k].images.data(),
                               (*batches)[k].images.size() * sizeof(float)))
          << "batch " << k;
    }
  }
  // Every file was planned at JPEG_CROP once; one whose crop region is no
  // smaller than the file is sent whole, the others as regions.
  EXPECT_GE(jpeg_crop_received, n / 2);
}

TEST_F(ClusterTest, SmartoffProfilesPlansAndMatchesNoOffByteForByte) {
  testing::TestDatasetOptions dopts;
  dopts.classes = 3;
  dopts.per_class = 10;
  dopts.min_side = 300;
  dopts.max_side = 500;
  StartServer(testing::MakeTestDataset("cluster_smartoff", dopts));
  LoaderOptions options = SmallLoaderOptions();
  options.pipeline.augment.crop_size = 32;  // small crops: offloading pays
  absl::StatusOr<std::vector<Batch>> reference = RunEpoch(PlannerKind::kNoOff, options, 1);
  ASSERT_TRUE(reference.ok()) << reference.status();

  SmartoffOptions smart;
  smart.profile_folder = testing::MakeTempDir("smartoff_profile");
  smart.net_bw_mbit = 10;   // a slow link: bytes matter
  smart.remote_cpus = 2;
  smart.gpu_batch_seconds = 0;
  smart.speed_probe_samples = 8;
  absl::StatusOr<std::unique_ptr<SmartoffPolicy>> planner =
      CreateSmartoffPolicy(client_.get(), options, smart);
  ASSERT_TRUE(planner.ok()) << planner.status();
  // The profiling pass wrote a profile that a second set-up reuses.
  EXPECT_TRUE(std::filesystem::exists(smart.profile_folder + "/sample_profile.csv"));
  ASSERT_TRUE(CreateSmartoffPolicy(client_.get(), options, smart).ok());

  SmartoffPolicy* p = planner->get();
  absl::StatusOr<std::unique_ptr<Loader>> loader = Loader::Create(client_.get(), options, p);
  ASSERT_TRUE(loader.ok());
  ASSERT_TRUE((*loader)->StartEpoch(1).ok());
  std::vector<Batch> batches;
  while (true) {
    Batch b;
    absl::StatusOr<bool> more = (*loader)->Next(&b);
    ASSERT_TRUE(more.ok()) << more.status();
    if (!*more) break;
    p->OnStep(0.01);
    batches.push_back(std::move(b));
  }
  const LoaderEpochStats stats = (*loader)->stats();
  EXPECT_EQ(stats.samples, 30u);
  // On a 10 Mbit/s link with idle storage CPUs the plan offloads (crops of
  // 32x32x3 bytes are far smaller than the files).
  EXPECT_GT(stats.samples - stats.samples_by_stage[StageIndex(Stage::kRaw)], 20u);
  EXPECT_GT(p->PredictedEpochSeconds(), 0);
  ASSERT_EQ(batches.size(), reference->size());
  std::set<uint64_t> ids;
  for (size_t k = 0; k < batches.size(); ++k) {
    ids.insert(batches[k].ids.begin(), batches[k].ids.end());
    ASSERT_EQ(batches[k].ids, (*reference)[k].ids);
    EXPECT_EQ(0, std::memcmp(batches[k].images.data(), (*reference)[k].images.data(),
                             batches[k].images.size() * sizeof(float)))
        << "batch " << k;
  }
  EXPECT_EQ(ids.size(), 30u);
}

TEST_F(ClusterTest, CorruptFilesAreSkippedAndCountedWhileOthersArrive) {
  testing::TestDatasetOptions dopts;
  dopts.classes = 2;
  dopts.per_class = 4;
  const std::string root = testing::MakeTestDataset("cluster_corrupt", dopts);
  const std::string good = testing::EncodeJpeg(testing::MakeTestImage(100, 100, 1));
  testing::WriteFile(root + "/class_0/bad_empty.jpg", "");
  testing::WriteFile(root + "/class_0/bad_text.jpg", "this is not a jpeg at all");
  testing::WriteFile(root + "/class_1/bad_truncated.jpg", good.substr(0, good.size() / 3));
  std::string huge = good;
  const size_t sof = huge.find("\xff\xc0");
  huge[sof + 5] = huge[sof + 7] = static_cast<char>(0xff);
  huge[sof + 6] = huge[sof + 8] = static_cast<char>(0xf0);
  testing::WriteFile(root + "/class_1/bad_huge.jpg", huge);
  StartServer(root);
  ASSERT_EQ(client_->manifest().num_samples(), 12u);

  for (PlannerKind mode : {PlannerKind::kNoOff, PlannerKind::kAllOff}) {
    LoaderEpochStats stats;
    absl::StatusOr<std::vector<Batch>> batches = RunEpoch(mode, SmallLoaderOptions(), 0, &stats);
    ASSERT_TRUE(batches.ok()) << batches.status();
    std::set<uint64_t> ids;
    for (const Batch& b : *batches) ids.insert(b.ids.begin(), b.ids.end());
    EXPECT_EQ(ids.size(), 8u) << ModeName(mode);
    EXPECT_EQ(stats.skipped, 4u) << ModeName(mode);
    ASSERT_FALSE(stats.first_errors.empty());
    EXPECT_NE(stats.first_errors[0].find("bad_"), std::string::npos)
        << "error should name the file: " << stats.first_errors[0];
  }
  // The server keeps serving, and counted the failures.
  absl::StatusOr<v1::ServerStats> sstats = client_->GetStats();
  ASSERT_TRUE(sstats.ok());
  EXPECT_GE(sstats->samples_failed(), 4u);

  LoaderOptions strict = SmallLoaderOptions();
  strict.on_bad_sample = BadSamplePolicy::kFail;
  absl::StatusOr<std::vector<Batch>> failed = RunEpoch(PlannerKind::kNoOff, strict);
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("bad_"), std::string::npos) << failed.status();
}

TEST_F(ClusterTest, OutOfRangeIdsFailAloneAndBadParametersAreRejected) {
  testing::TestDatasetOptions dopts;
  dopts.classes = 1;
  dopts.per_class = 3;
  StartServer(testing::MakeTestDataset("cluster_oor", dopts));
  {
    // An id outside the manifest fails that sample only; the valid ids of
    // the same message are served and the stream ends OK.
    std::unique_ptr<FetchCall> call = client_->OpenFetch();
    v1::FetchRequest request;
    *request.mutable_augment() = ToProto(AugmentOptions());
    request.add_samples()->set_id(0);
    request.add_samples()->set_id(3);
    request.add_samples()->set_id(2);
    ASSERT_TRUE(call->Write(request));
    call->WritesDone();
    v1::FetchResponse response;
    std::map<uint64_t, v1::Sample> got;
    while (call->Read(&response)) {
      for (const v1::Sample& s : response.samples()) got[s.id()] = s;
    }
    EXPECT_TRUE(call->Finish().ok());
    ASSERT_EQ(got.size(), 3u);
    EXPECT_EQ(got[0].error_code(), 0);
    EXPECT_EQ(got[2].error_code(), 0);
    EXPECT_EQ(got[3].error_code(), static_cast<int>(absl::StatusCode::kOutOfRange));
    EXPECT_NE(got[3].error_message().find("sample 3"), std::string::npos);
  }
  {
    std::unique_ptr<FetchCall> call = client_->OpenFetch();
    v1::FetchRequest request;
    AugmentOptions bad;
    bad.crop_size = 0;
    *request.mutable_augment() = ToProto(bad);
    request.add_samples()->set_id(0);
    ASSERT_TRUE(call->Write(request));
    call->WritesDone();
    v1::FetchResponse response;
    while (call->Read(&response)) {
    }
    EXPECT_EQ(call->Finish().code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST_F(ClusterTest, ServerMemoryStaysBoundedWithASlowConsumer) {
  testing::TestDatasetOptions dopts;
  dopts.classes = 2;
  dopts.per_class = 10;
  constexpr uint32_t kMaxInflight = 8;
  StartServer(testing::MakeTestDataset("cluster_slow", dopts), /*prep_workers=*/2,
              kMaxInflight);
  std::unique_ptr<FetchCall> call = client_->OpenFetch();
  AugmentOptions aug;
  aug.crop_size = 128;  // 196 KB per TENSOR sample
  constexpr int kRequested = 400;
  std::thread writer([&] {
    // Far more than the server may hold for this stream.
    for (int round = 0; round < kRequested / 20; ++round) {
      v1::FetchRequest request;
      *request.mutable_augment() = ToProto(aug);
      for (uint64_t id = 0; id < 20; ++id) {
        v1::SampleRequest* sr = request.add_samples();
        sr->set_id(id);
        sr->set_target_stage(v1::STAGE_TENSOR);
      }
      if (!call->Write(request)) return;
    }
    call->WritesDone();
  });
  // The consumer takes a message only once the server holds all it may for
  // the stream (its write is blocked on the client): as slow as a consumer
  // can be. The server's counters are only visible through GetStats, so this
  // polls them (with a deadline).
  auto at_cap = [&]() -> absl::StatusOr<v1::ServerStats> {
    const absl::Time give_up = absl::Now() + absl::Seconds(30);
    while (true) {
      absl::StatusOr<v1::ServerStats> stats = client_->GetStats();
      if (!stats.ok() || stats->inflight_samples() >= kMaxInflight || absl::Now() > give_up) {
        return stats;
      }
      absl::SleepFor(absl::Milliseconds(1));
    }
  };
  constexpr int kReads = 15;
  v1::FetchResponse response;
  int received = 0;
  for (int i = 0; i < kReads; ++i) {
    absl::StatusOr<v1::ServerStats> stats = at_cap();
    ASSERT_TRUE(stats.ok()) << stats.status();
    // Reached, and (as the server may not go past it) exactly.
    ASSERT_EQ(stats->inflight_samples(), kMaxInflight) << "read " << i;
    ASSERT_TRUE(call->Read(&response)) << "read " << i;
    // A message holds only samples the stream has in flight.
    EXPECT_GE(response.samples_size(), 1);
    EXPECT_LE(response.samples_size(), static_cast<int>(kMaxInflight));
    received += response.samples_size();
  }
  absl::StatusOr<v1::ServerStats> stats = at_cap();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->peak_stream_inflight(), kMaxInflight);
  EXPECT_LE(received, kReads * static_cast<int>(kMaxInflight));
  // The server prepared what it wrote (taken by the client, or buffered by
  // gRPC on the way) and what it holds, not everything it was asked for.
  const uint64_t prepared = StatsSamplesAt(*stats, Stage::kTensor);
  EXPECT_GE(prepared, static_cast<uint64_t>(received));
  EXPECT_LT(prepared, static_cast<uint64_t>(kRequested) / 2)
      << "received " << received << ", the rest held by gRPC or the server";
  call->Cancel();
  writer.join();
  while (call->Read(&response)) {
  }
  EXPECT_EQ(call->Finish().code(), absl::StatusCode::kCancelled);
}

// An epoch cut to its first batches (warm-up, --max-batches) requests nothing
// beyond them: the server prepares exactly those samples.
TEST_F(ClusterTest, EpochCutToSomeBatchesRequestsOnlyThose) {
  testing::TestDatasetOptions dopts;
  dopts.classes = 2;
  dopts.per_class = 10;
  StartServer(testing::MakeTestDataset("cluster_cut", dopts));
  const LoaderOptions options = SmallLoaderOptions();  // batch 5, prefetch 2
  FixedPolicy planner(FixedKindStage(PlannerKind::kResizeOff), ModeName(PlannerKind::kResizeOff));
  absl::StatusOr<std::unique_ptr<Loader>> loader = Loader::Create(client_.get(), options, &planner);
  ASSERT_TRUE(loader.ok()) << loader.status();
  ASSERT_TRUE((*loader)->StartEpoch(0, /*max_batches=*/2).ok());
  EXPECT_EQ((*loader)->num_batches(), 2);
  Batch batch;
  int batches = 0;
  while (true) {
    absl::StatusOr<bool> more = (*loader)->Next(&batch);
    ASSERT_TRUE(more.ok()) << more.status();
    if (!*more) break;
    ++batches;
  }
  (*loader)->Stop();
  EXPECT_EQ(batches, 2);
  absl::StatusOr<v1::ServerStats> stats = client_->GetStats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  uint64_t served = 0;
  for (uint64_t n : stats->samples_by_stage()) served += n;
  EXPECT_EQ(served, 10u);
}

TEST_F(ClusterTest, BandwidthProbeMovesRawBytes) {
  testing::TestDatasetOptions dopts;
  dopts.classes = 2;
  dopts.per_class = 20;
  StartServer(testing::MakeTestDataset("cluster_probe", dopts));
  NetProbeOptions options;
  options.max_samples = 40;
  absl::StatusOr<NetProbeResult> probe = ProbeBandwidth(client_.get(), options);
  ASSERT_TRUE(probe.ok()) << probe.status();
  uint64_t total = 0;
  for (uint64_t size : client_->manifest().raw_sizes) total += size;
  EXPECT_EQ(probe->samples, 40);
  EXPECT_EQ(probe->bytes, total);
  EXPECT_GT(probe->bytes_per_second, 1e6);  // loopback moves far more than 1 MB/s
  // The server read 40 files and reported its process CPU.
  EXPECT_GT(probe->server_read_seconds, 0);
  EXPECT_GE(probe->server_send_cpu_seconds, 0);
}

// The storage server goes away mid-epoch with samples requested but not sent,
// and comes back on the same address: the loader re-opens its stream, asks
// again for what had not arrived, and the epoch yields the same batches, byte
// for byte, as an epoch without the restart.
TEST_F(ClusterTest, ServerRestartMidEpochResendsMissingSamplesAndEpochMatches) {
  testing::TestDatasetOptions dopts;
  dopts.classes = 2;
  dopts.per_class = 10;  // 4 batches of 5
  const std::string root = testing::MakeTestDataset("cluster_restart", dopts);
  const LoaderOptions options = SmallLoaderOptions();  // batch 5, prefetch 2
  const std::vector<uint64_t> order = EpochOrder(options.seed, 0, 20, true, 0, 1);
  absl::Notification gate;  // only the first batch's samples are let through
  StartServer(root, /*prep_workers=*/2, /*max_inflight=*/128,
              HoldExcept({order.begin(), order.begin() + 5}, &gate));
  const int port = server_->port();
  FixedPolicy planner(FixedKindStage(PlannerKind::kResizeOff), ModeName(PlannerKind::kResizeOff));
  absl::StatusOr<std::unique_ptr<Loader>> loader = Loader::Create(client_.get(), options, &planner);
  ASSERT_TRUE(loader.ok()) << loader.status();
  ASSERT_TRUE((*loader)->StartEpoch(0).ok());
  std::vector<Batch> batches(1);
  absl::StatusOr<bool> more = (*loader)->Next(&batches[0]);  // the 5 samples let through
  ASSERT_TRUE(more.ok() && *more) << more.status();

  StopServerHoldingSamples(&gate, loader->get());
  RestartServer(root, port);
  while (true) {
    Batch b;
    more = (*loader)->Next(&b);
    ASSERT_TRUE(more.ok()) << more.status();
    if (!*more) break;
    batches.push_back(std::move(b));
  }
  const LoaderEpochStats stats = (*loader)->stats();
  EXPECT_EQ(stats.stream_breaks, 1);
  EXPECT_EQ(stats.reconnects, 1);
  EXPECT_GE(stats.resent, 5u);  // batch 1 at least was held back
  EXPECT_EQ(stats.samples, 20u);

  absl::StatusOr<std::vector<Batch>> reference = RunEpoch(PlannerKind::kResizeOff, options, 0);
  ASSERT_TRUE(reference.ok()) << reference.status();
  ASSERT_EQ(batches.size(), reference->size());
  for (size_t k = 0; k < batches.size(); ++k) {
    ASSERT_EQ(batches[k].ids, (*reference)[k].ids) << "batch " << k;
    ASSERT_EQ(batches[k].images.size(), (*reference)[k].images.size());
    EXPECT_EQ(0, std::memcmp(batches[k].images.data(), (*reference)[k].images.data(),
                             batches[k].images.size() * sizeof(float)))
        << "batch " << k;
  }
}

// A server that comes back with another dataset ends the epoch with an error
// naming it; one that does not come back, after the client's connect_timeout.
TEST_F(ClusterTest, ServerBackWithOtherDataOrNotAtAllEndsTheEpochWithAnError) {
  testing::TestDatasetOptions dopts;
  dopts.classes = 2;
  dopts.per_class = 5;
  const std::string root = testing::MakeTestDataset("cluster_restart_a", dopts);
  dopts.per_class = 6;
  const std::string other = testing::MakeTestDataset("cluster_restart_b", dopts);
  for (bool comes_back : {true, false}) {
    SCOPED_TRACE(comes_back ? "back with other data" : "never back");
    absl::Notification gate;
    Arrivals held;
    StartServer(root, /*prep_workers=*/2, 128, HoldExcept({}, &gate, &held),
                /*connect_timeout=*/comes_back ? absl::Seconds(5) : absl::Seconds(1));
    const int port = server_->port();
    const std::string address = server_->address();
    FixedPolicy planner(FixedKindStage(PlannerKind::kAllOff), ModeName(PlannerKind::kAllOff));
    absl::StatusOr<std::unique_ptr<Loader>> loader =
        Loader::Create(client_.get(), SmallLoaderOptions(), &planner);
    ASSERT_TRUE(loader.ok()) << loader.status();
    ASSERT_TRUE((*loader)->StartEpoch(0).ok());
    held.WaitFor(2);  // both prep workers hold a requested sample
    StopServerHoldingSamples(&gate, loader->get());
    if (comes_back) RestartServer(other, port);
    const absl::Time start = absl::Now();
    Batch batch;
    absl::StatusOr<bool> more = (*loader)->Next(&batch);
    ASSERT_FALSE(more.ok());
    EXPECT_EQ(more.status().code(), comes_back ? absl::StatusCode::kFailedPrecondition
                                               : absl::StatusCode::kUnavailable)
        << more.status();
    EXPECT_NE(more.status().message().find(address), std::string::npos) << more.status();
    EXPECT_LT(absl::Now() - start, absl::Seconds(10));
    (*loader)->Stop();
    server_.reset();
  }
}

// Between epochs the trainer compares the fingerprint in GetStats with the
// manifest it read: a server restarted with other data is caught there too.
TEST_F(ClusterTest, ServerRestartedWithOtherDataIsDetectedByItsFingerprint) {
  testing::TestDatasetOptions dopts;
  dopts.classes = 2;
  dopts.per_class = 3;
  const std::string root = testing::MakeTestDataset("cluster_fp_a", dopts);
  dopts.seed = 99;  // same layout and names, other images
  const std::string other = testing::MakeTestDataset("cluster_fp_b", dopts);
  StartServer(root);
  const int port = server_->port();
  absl::StatusOr<v1::ServerStats> stats = client_->GetStats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_TRUE(client_->CheckSameDataset(*stats).ok());
  server_.reset();
  RestartServer(other, port);
  stats = client_->GetStats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  const absl::Status changed = client_->CheckSameDataset(*stats);
  EXPECT_EQ(changed.code(), absl::StatusCode::kFailedPrecondition) << changed;
  EXPECT_NE(changed.message().find(server_->address()), std::string::npos) << changed;
  server_.reset();
  RestartServer(root, port);
  stats = client_->GetStats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_TRUE(client_->CheckSameDataset(*stats).ok());
}

TEST(ClientTest, UnreachableServerIsReportedWithItsAddress) {
  ClientOptions options;
  options.address = "127.0.0.1:1";
  options.connect_timeout = absl::Milliseconds(600);
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<SampleClient>> client = SampleClient::Connect(options);
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), absl::StatusCode::kUnavailable) << client.status();
  EXPECT_NE(client.status().message().find("127.0.0.1:1"), std::string::npos);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  options.address = "no-port";
  EXPECT_EQ(SampleClient::Connect(options).status().code(), absl::StatusCode::kInvalidArgument);
}

// A fixed policy that counts the steps the train loop reports to it.
class CountingPolicy final : public OffloadPolicy {
 public:
  std::string name() const override { return "counting"; }
  absl::Status BeginEpoch(uint64_t, absl::Span<const uint64_t>) override {
    ++epochs_;
    return absl::OkStatus();
  }
  void Plan(int64_t, absl::Span<const uint64_t>, absl::Span<SampleAssignment> out) override {
    for (SampleAssignment& a : out) a.stage = Stage::kCropped;
  }
  void OnStep(double) override { ++steps_; }
  double PredictedEpochSeconds() const override { return 42; }
  int epochs_ = 0;
  int steps_ = 0;
};

TEST_F(ClusterTest, RunTrainingReportsEveryEpochAndTellsThePolicyEveryStep) {
  testing::TestDatasetOptions dopts;
  dopts.classes = 2;
  dopts.per_class = 10;
  StartServer(testing::MakeTestDataset("cluster_train_loop", dopts));
  absl::StatusOr<std::unique_ptr<EmulatedTrainer>> trainer = testing::TinyEmulatedTrainer(5);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  CountingPolicy policy;
  absl::StatusOr<std::unique_ptr<Loader>> loader =
      Loader::Create(client_.get(), SmallLoaderOptions(), &policy);
  ASSERT_TRUE(loader.ok()) << loader.status();
  TrainLoopOptions loop;
  loop.epochs = 2;
  loop.warmup_batches = 1;
  loop.progress = false;
  loop.mode_name = policy.name();
  loop.report_json = testing::MakeTempDir("train_loop_json") + "/r.json";
  absl::StatusOr<std::vector<EpochReport>> reports =
      RunTraining(loader->get(), trainer->get(), loop);
  ASSERT_TRUE(reports.ok()) << reports.status();
  ASSERT_EQ(reports->size(), 2u);
  for (const EpochReport& r : *reports) {
    EXPECT_EQ(r.loader.samples, 20u);
    EXPECT_EQ(r.loader.batches, 4u);
    EXPECT_EQ(r.loader.samples_by_stage[StageIndex(Stage::kCropped)], 20u);
    EXPECT_EQ(r.loader.bytes_by_stage[StageIndex(Stage::kCropped)],
              20u * static_cast<uint64_t>(StagePayloadBytes(Stage::kCropped, 48)));
    EXPECT_DOUBLE_EQ(r.predicted_seconds, 42);
    EXPECT_EQ(r.server_prep_workers, 2);
    EXPECT_GT(r.server_prep_busy_seconds, 0);
  }
  EXPECT_EQ(policy.epochs_, 3);         // the warm-up and two epochs
  EXPECT_EQ(policy.steps_, 1 + 2 * 4);  // every step, the warm-up's included
  EXPECT_TRUE(std::filesystem::exists(loop.report_json));
}

}  // namespace
}  // namespace sophon
