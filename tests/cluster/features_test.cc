// The FEATURES stage end to end: a storage server with a frozen backbone
// (real gRPC on 127.0.0.1, port 0, real files, a real checkpoint) against the
// training node's own backbone from the same checkpoint, and the refusals
// when a side has none or the checkpoints differ.
#include <torch/types.h>
#include <torch/utils.h>

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "client/loader/loader.h"
#include "client/loader/server_set.h"
#include "client/offload/fixed_policy.h"
#include "sophon/model/backbone.h"
#include "client/train/inference.h"
#include "model/models.h"
#include "client/train/trainer.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "sophon/base/half.h"
#include "sophon/net/wire.h"
#include "tests/cluster/local_server.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

constexpr int kCrop = 40;

std::string SaveTinyCnn(const std::string& name, uint64_t seed) {
  torch::manual_seed(seed);
  absl::StatusOr<Classifier> model = MakeModel("tinycnn", 3);
  EXPECT_TRUE(model.ok()) << model.status();
  const std::string path = testing::MakeTempDir(name) + "/backbone.pt";
  EXPECT_TRUE(SaveModel(*model, "tinycnn", 3, path).ok());
  return path;
}

std::shared_ptr<const FeatureExtractor> LoadBackbone(const std::string& path) {
  absl::StatusOr<std::unique_ptr<Backbone>> b = Backbone::Load({path, 1});
  EXPECT_TRUE(b.ok()) << b.status();
  return b.ok() ? std::shared_ptr<const FeatureExtractor>(*std::move(b)) : nullptr;
}

LoaderOptions Options(Stage target) {
  LoaderOptions o;
  o.batch_size = 4;
  o.workers = 2;
  o.prefetch_batches = 2;
  o.seed = 11;
  o.pipeline.augment.crop_size = kCrop;
  o.target = target;
  return o;
}

// Every batch of epoch 0, by index.
absl::StatusOr<std::vector<Batch>> RunEpoch(SampleClient* client, const LoaderOptions& options,
                                            Stage planned) {
  FixedPolicy policy(planned, StageName(planned));
  absl::StatusOr<std::unique_ptr<Loader>> loader = Loader::Create(client, options, &policy);
  if (!loader.ok()) return loader.status();
  if (absl::Status s = (*loader)->StartEpoch(0); !s.ok()) return s;
  std::vector<Batch> out;
  while (true) {
    Batch b;
    absl::StatusOr<bool> more = (*loader)->Next(&b);
    if (!more.ok()) return more.status();
    if (!*more) break;
    out.push_back(std::move(b));
  }
  return out;
}

class FeaturesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::TestDatasetOptions d;
    d.per_class = 3;
    data_ = testing::MakeTestDataset("features_data", d);
    checkpoint_ = SaveTinyCnn("features_ckpt", 7);
    backbone_ = LoadBackbone(checkpoint_);
    ASSERT_NE(backbone_, nullptr);
  }

  absl::StatusOr<testing::LocalServer> Start(std::shared_ptr<const FeatureExtractor> backbone) {
    ServiceOptions service;
    service.prep_workers = 2;
    service.backbone = std::move(backbone);
    return testing::StartLocalServer(data_, service);
  }

  std::string data_;
  std::string checkpoint_;
  std::shared_ptr<const FeatureExtractor> backbone_;
};

TEST_F(FeaturesTest, ServerFeaturesEqualTheTrainingNodesWithinFp16Rounding) {
  absl::StatusOr<testing::LocalServer> server = Start(backbone_);
  ASSERT_TRUE(server.ok()) << server.status();
  const ServerManifest& m = server->client->manifest();
  EXPECT_EQ(m.feature_size, 128u);
  EXPECT_NE(m.backbone.find("tinycnn (3 classes)"), std::string::npos) << m.backbone;
  EXPECT_EQ(m.backbone_fingerprint, backbone_->fingerprint());

  // Features made by the server; no backbone on this side.
  absl::StatusOr<std::vector<Batch>> remote =
      RunEpoch(server->client.get(), Options(Stage::kFeatures), Stage::kFeatures);
  ASSERT_TRUE(remote.ok()) << remote.status();
  // The same samples sent RAW, taken to TENSOR here.
  absl::StatusOr<std::vector<Batch>> tensors =
      RunEpoch(server->client.get(), Options(Stage::kTensor), Stage::kRaw);
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  ASSERT_EQ(remote->size(), tensors->size());
  ASSERT_FALSE(remote->empty());

  int64_t compared = 0;
  for (size_t k = 0; k < remote->size(); ++k) {
    const Batch& f = (*remote)[k];
    const Batch& t = (*tensors)[k];
    ASSERT_EQ(f.stage, Stage::kFeatures);
    ASSERT_EQ(f.ids, t.ids);
    ASSERT_EQ(f.c, 128);
    ASSERT_EQ(f.images.size(), static_cast<size_t>(f.n) * 128);
    // The backbone on this node's tensors, in float32: the server's fp16
    // features are these rounded to half precision.
    std::vector<float> local(static_cast<size_t>(t.n) * 128);
    ASSERT_TRUE(backbone_->Extract(t.images.data(), t.n, kCrop, local.data()).ok());
    for (size_t i = 0; i < local.size(); ++i) {
      const float expect = HalfToFloat(FloatToHalf(local[i]));
      // One fp16 step of slack: float sums may differ with the thread count.
      EXPECT_NEAR(f.images[i], expect, std::max(1e-6f, std::fabs(expect) * 2e-3f))
          << "batch " << k << " value " << i;
      ++compared;
    }
  }
  EXPECT_EQ(compared, 9 * 128);
}

TEST_F(FeaturesTest, TheTrainingNodesBackboneFinishesSamplesSentEarlier) {
  absl::StatusOr<testing::LocalServer> server = Start(backbone_);
  ASSERT_TRUE(server.ok()) << server.status();
  absl::StatusOr<std::vector<Batch>> remote =
      RunEpoch(server->client.get(), Options(Stage::kFeatures), Stage::kFeatures);
  ASSERT_TRUE(remote.ok()) << remote.status();
  LoaderOptions local_options = Options(Stage::kFeatures);
  local_options.pipeline.backbone = backbone_.get();
  for (Stage planned : {Stage::kRaw, Stage::kFlipped, Stage::kTensor}) {
    absl::StatusOr<std::vector<Batch>> local =
        RunEpoch(server->client.get(), local_options, planned);
    ASSERT_TRUE(local.ok()) << StageName(planned) << ": " << local.status();
    ASSERT_EQ(local->size(), remote->size());
    for (size_t k = 0; k < local->size(); ++k) {
      ASSERT_EQ((*local)[k].ids, (*remote)[k].ids);
      ASSERT_EQ((*local)[k].images.size(), (*remote)[k].images.size());
      for (size_t i = 0; i < (*local)[k].images.size(); ++i) {
        const float a = (*local)[k].images[i], b = (*remote)[k].images[i];
        EXPECT_NEAR(a, b, std::max(1e-6f, std::fabs(b) * 2e-3f)) << StageName(planned);
      }
    }
  }
}

TEST_F(FeaturesTest, AServerWithoutABackboneRefusesFeaturesByName) {
  absl::StatusOr<testing::LocalServer> server = Start(nullptr);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ(server->client->manifest().feature_size, 0u);
  // Neither side has a backbone: refused before the epoch, naming the server.
  absl::StatusOr<std::vector<Batch>> none =
      RunEpoch(server->client.get(), Options(Stage::kFeatures), Stage::kFeatures);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(none.status().message().find(server->client->address()), std::string::npos)
      << none.status();
  EXPECT_NE(none.status().message().find("no backbone"), std::string::npos) << none.status();

  // A loader asking for FEATURES anyway (a TENSOR job planning it is clamped,
  // so ask at the wire level): each sample fails with the server's reason.
  std::unique_ptr<FetchCall> call = server->client->OpenFetch();
  AugmentOptions augment;
  augment.crop_size = kCrop;
  FetchRequestBuilder builder(0, 1, augment);
  builder.Add(0, Stage::kFeatures);
  call->Write(builder.Take());
  call->WritesDone();
  v1::FetchResponse response;
  int answered = 0;
  while (call->Read(&response)) {
    for (const v1::Sample& sample : response.samples()) {
      const absl::Status s = SampleStatus(sample);
      EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
      EXPECT_NE(s.message().find("--backbone"), std::string::npos) << s;
      ++answered;
    }
  }
  EXPECT_TRUE(call->Finish().ok());
  EXPECT_EQ(answered, 1);

  // With this node's backbone the job runs: samples planned at FEATURES are
  // asked for at TENSOR and finished here.
  LoaderOptions local = Options(Stage::kFeatures);
  local.pipeline.backbone = backbone_.get();
  absl::StatusOr<std::vector<Batch>> ok =
      RunEpoch(server->client.get(), local, Stage::kFeatures);
  ASSERT_TRUE(ok.ok()) << ok.status();
  int samples = 0;
  for (const Batch& b : *ok) samples += b.n;
  EXPECT_EQ(samples, 9);
}

TEST_F(FeaturesTest, CheckpointsThatDifferAreRefused) {
  absl::StatusOr<testing::LocalServer> server = Start(backbone_);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string other_path = SaveTinyCnn("features_other", 8);
  std::shared_ptr<const FeatureExtractor> other = LoadBackbone(other_path);
  ASSERT_NE(other, nullptr);
  LoaderOptions options = Options(Stage::kFeatures);
  options.pipeline.backbone = other.get();
  absl::StatusOr<std::vector<Batch>> refused =
      RunEpoch(server->client.get(), options, Stage::kFeatures);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("checkpoints differ"), std::string::npos)
      << refused.status();
  EXPECT_NE(refused.status().message().find(other_path), std::string::npos) << refused.status();
}

TEST_F(FeaturesTest, TheFeatureCacheServesLaterEpochsWithoutFetching) {
  absl::StatusOr<testing::LocalServer> server = Start(backbone_);
  ASSERT_TRUE(server.ok()) << server.status();
  LoaderOptions options = Options(Stage::kFeatures);
  options.feature_cache_bytes = 1 << 20;
  // Random crops: a sample's features change every epoch, so no cache.
  FixedPolicy policy(Stage::kFeatures, "featuresoff");
  absl::StatusOr<std::unique_ptr<Loader>> refused =
      Loader::Create(server->client.get(), options, &policy);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("LoaderOptions.feature_cache_bytes needs"),
            std::string::npos)
      << refused.status();

  options.pipeline.augment.eval_resize = 46;  // the evaluation transform
  absl::StatusOr<std::unique_ptr<Loader>> loader =
      Loader::Create(server->client.get(), options, &policy);
  ASSERT_TRUE(loader.ok()) << loader.status();
  std::map<uint64_t, std::vector<float>> first;
  for (uint64_t epoch = 0; epoch < 2; ++epoch) {
    ASSERT_TRUE((*loader)->StartEpoch(epoch).ok());
    int samples = 0;
    Batch b;
    while (true) {
      absl::StatusOr<bool> more = (*loader)->Next(&b);
      ASSERT_TRUE(more.ok()) << more.status();
      if (!*more) break;
      for (int i = 0; i < b.n; ++i) {
        std::vector<float> f(b.images.begin() + i * 128, b.images.begin() + (i + 1) * 128);
        if (epoch == 0) {
          first[b.ids[i]] = f;
        } else {
          EXPECT_EQ(f, first[b.ids[i]]) << "sample " << b.ids[i];
        }
        ++samples;
      }
    }
    EXPECT_EQ(samples, 9);
    const LoaderEpochStats stats = (*loader)->stats();
    if (epoch == 0) {
      EXPECT_EQ(stats.requested, 9u);
      EXPECT_EQ(stats.feature_cache_hits, 0u);
    } else {
      EXPECT_EQ(stats.requested, 0u) << "epoch 1 asked the server for samples";
      EXPECT_EQ(stats.feature_cache_hits, 9u);
    }
  }
  // A cache too small for every sample holds what fits and fetches the rest.
  options.feature_cache_bytes = 4 * 128 * 2;
  absl::StatusOr<std::unique_ptr<Loader>> small =
      Loader::Create(server->client.get(), options, &policy);
  ASSERT_TRUE(small.ok()) << small.status();
  for (uint64_t epoch = 0; epoch < 2; ++epoch) {
    ASSERT_TRUE((*small)->StartEpoch(epoch).ok());
    Batch b;
    while (true) {
      absl::StatusOr<bool> more = (*small)->Next(&b);
      ASSERT_TRUE(more.ok()) << more.status();
      if (!*more) break;
    }
  }
  EXPECT_EQ((*small)->stats().feature_cache_hits, 4u);
  EXPECT_EQ((*small)->stats().requested, 5u);
}

// Predictions (top 2) of every sample, as the CSV RunInference writes, with
// samples planned at `planned`.
std::string InferenceCsv(const ServerSet& servers, const FeatureExtractor* local, Stage planned,
                         InferenceReport* report) {
  LoaderOptions options = Options(Stage::kPredictions);
  options.shuffle = false;
  options.pipeline.augment.eval_resize = 46;
  options.pipeline.backbone = local;
  options.pipeline.top_k = 2;
  FixedPolicy policy(planned, StageName(planned));
  absl::StatusOr<std::unique_ptr<Loader>> loader =
      Loader::Create(const_cast<ServerSet*>(&servers), options, &policy);
  EXPECT_TRUE(loader.ok()) << loader.status();
  if (!loader.ok()) return "";
  InferenceOptions inference;
  inference.out = testing::MakeTempDir("inference") + "/" + StageName(planned) + ".csv";
  inference.model_classes = 3;
  inference.top_k = 2;
  absl::StatusOr<InferenceReport> r = RunInference(loader->get(), servers, inference);
  EXPECT_TRUE(r.ok()) << r.status();
  if (r.ok()) *report = *r;
  return testing::ReadFile(inference.out);
}

TEST_F(FeaturesTest, InferenceAtTheStorageNodeEqualsInferenceHere) {
  absl::StatusOr<testing::LocalServer> server = Start(backbone_);
  ASSERT_TRUE(server.ok()) << server.status();
  absl::StatusOr<std::unique_ptr<ServerSet>> set = ServerSet::Of({server->client.get()});
  ASSERT_TRUE(set.ok()) << set.status();
  InferenceReport remote, split, local;
  // The whole model on the storage node, its backbone there and its head
  // here, or all of it here: the same predictions.
  const std::string at_server =
      InferenceCsv(**set, backbone_.get(), Stage::kPredictions, &remote);
  const std::string features = InferenceCsv(**set, backbone_.get(), Stage::kFeatures, &split);
  const std::string here = InferenceCsv(**set, backbone_.get(), Stage::kRaw, &local);
  EXPECT_EQ(at_server, here);
  EXPECT_EQ(features, here);
  // A header and one line per sample, in manifest order, with its path.
  const std::vector<std::string> lines = absl::StrSplit(at_server, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 10u);
  EXPECT_EQ(lines[0], "id,path,label,class,pred_1,class_1,prob_1,pred_2,class_2,prob_2");
  EXPECT_EQ(lines[1].rfind("0,class_0/", 0), 0u) << lines[1];
  EXPECT_EQ(remote.samples, 9);
  EXPECT_TRUE(remote.labels_comparable);  // 3 classes, as the dataset
  EXPECT_EQ(remote.loader.samples_by_stage[StageIndex(Stage::kPredictions)], 9u);
  EXPECT_EQ(split.loader.samples_by_stage[StageIndex(Stage::kFeatures)], 9u);
  EXPECT_EQ(local.loader.samples_by_stage[StageIndex(Stage::kRaw)], 9u);
  EXPECT_EQ(remote.bytes, 9u * 2 * 2 * sizeof(float));  // two (class, probability) pairs
  EXPECT_EQ(split.bytes, 9u * 128 * 2);                   // 128 fp16 features
  EXPECT_EQ(remote.top1_correct, local.top1_correct);
  // Each line's probabilities are in (0, 1], the most probable first.
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::vector<std::string> f = absl::StrSplit(lines[i], ',');
    ASSERT_EQ(f.size(), 10u) << lines[i];
    const double p1 = std::stod(f[6]), p2 = std::stod(f[9]);
    EXPECT_GT(p2, 0) << lines[i];
    EXPECT_GE(p1, p2) << lines[i];
    EXPECT_LE(p1 + p2, 1.0 + 1e-6) << lines[i];
  }
}

TEST_F(FeaturesTest, AServerWithAnotherHeadSendsFeaturesForPredictions) {
  // The server runs a checkpoint with this node's backbone and another head
  // (a fine-tuned one): samples planned at PREDICTIONS come as FEATURES and
  // get this node's head.
  const std::string tuned = testing::MakeTempDir("features_tuned") + "/tuned.pt";
  {
    absl::StatusOr<Classifier> model = MakeModel("tinycnn", 3);
    ASSERT_TRUE(model.ok());
    ASSERT_TRUE(LoadModel(checkpoint_, "tinycnn", 3, *model).ok());
    torch::NoGradGuard no_grad;
    for (auto& item : (*model)->named_parameters()) {
      if (item.key().rfind(ModelHeadName("tinycnn") + ".", 0) == 0) item.value().add_(0.5);
    }
    ASSERT_TRUE(SaveModel(*model, "tinycnn", 3, tuned).ok());
  }
  std::shared_ptr<const FeatureExtractor> tuned_model = LoadBackbone(tuned);
  ASSERT_NE(tuned_model, nullptr);
  ASSERT_EQ(tuned_model->fingerprint(), backbone_->fingerprint());
  ASSERT_NE(tuned_model->head_fingerprint(), backbone_->head_fingerprint());
  absl::StatusOr<testing::LocalServer> server = Start(tuned_model);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ(ServedStage(server->client->manifest(), backbone_.get()), Stage::kFeatures);
  EXPECT_EQ(ServedStage(server->client->manifest(), tuned_model.get()), kLastStage);
  absl::StatusOr<std::unique_ptr<ServerSet>> set = ServerSet::Of({server->client.get()});
  ASSERT_TRUE(set.ok()) << set.status();
  InferenceReport remote, local;
  const std::string at_server = InferenceCsv(**set, backbone_.get(), Stage::kPredictions, &remote);
  const std::string here = InferenceCsv(**set, backbone_.get(), Stage::kRaw, &local);
  EXPECT_EQ(at_server, here);
  EXPECT_EQ(remote.loader.samples_by_stage[StageIndex(Stage::kFeatures)], 9u);
  EXPECT_EQ(remote.loader.samples_by_stage[StageIndex(Stage::kPredictions)], 0u);
  // With the server's own model, the same request gets its (other) head's answer.
  const std::string theirs = InferenceCsv(**set, tuned_model.get(), Stage::kPredictions, &remote);
  EXPECT_EQ(remote.loader.samples_by_stage[StageIndex(Stage::kPredictions)], 9u);
  EXPECT_NE(theirs, here);
}

TEST_F(FeaturesTest, PredictionsNeedAModelOnThisNode) {
  absl::StatusOr<testing::LocalServer> server = Start(backbone_);
  ASSERT_TRUE(server.ok()) << server.status();
  FixedPolicy policy(Stage::kPredictions, "predictionsoff");
  const absl::Status s =
      Loader::Create(server->client.get(), Options(Stage::kPredictions), &policy).status();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(s.message().find("LoaderOptions.pipeline.backbone"), std::string::npos) << s;
}

// Every step's loss of one fine-tuning epoch with samples planned at `planned`.
std::vector<double> FinetuneLosses(SampleClient* client, const std::string& checkpoint,
                                   const FeatureExtractor* local, Stage planned) {
  TrainerOptions t;
  t.arch = "tinycnn";
  t.num_classes = 3;
  t.device = "cpu";
  t.threads = 1;
  t.seed = 9;
  t.finetune = true;
  t.init_checkpoint = checkpoint;
  t.models[0].lr = 0.05;
  absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(t);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  if (!trainer.ok()) return {};
  LoaderOptions options = Options(Stage::kFeatures);
  options.batch_size = 3;
  options.pipeline.backbone = local;
  std::vector<double> losses;
  for (uint64_t epoch = 0; epoch < 3; ++epoch) {
    FixedPolicy policy(planned, StageName(planned));
    absl::StatusOr<std::unique_ptr<Loader>> loader = Loader::Create(client, options, &policy);
    EXPECT_TRUE(loader.ok()) << loader.status();
    if (!loader.ok()) return {};
    EXPECT_TRUE((*loader)->StartEpoch(epoch).ok());
    Batch b;
    while (true) {
      absl::StatusOr<bool> more = (*loader)->Next(&b);
      EXPECT_TRUE(more.ok()) << more.status();
      if (!more.ok() || !*more) break;
      absl::StatusOr<StepResult> step = (*trainer)->Step(b);
      EXPECT_TRUE(step.ok()) << step.status();
      if (!step.ok()) return {};
      losses.push_back(step->loss);
    }
  }
  return losses;
}

TEST_F(FeaturesTest, FineTuningOnServerFeaturesFollowsTheLocalLossCurve) {
  absl::StatusOr<testing::LocalServer> server = Start(backbone_);
  ASSERT_TRUE(server.ok()) << server.status();
  // The storage node extracts every sample's features...
  const std::vector<double> remote =
      FinetuneLosses(server->client.get(), checkpoint_, nullptr, Stage::kFeatures);
  // ...or this node does, from the files.
  const std::vector<double> local =
      FinetuneLosses(server->client.get(), checkpoint_, backbone_.get(), Stage::kRaw);
  ASSERT_EQ(remote.size(), 9u);
  ASSERT_EQ(local.size(), remote.size());
  for (size_t i = 0; i < remote.size(); ++i) {
    EXPECT_NEAR(remote[i], local[i], 1e-3 * std::max(1.0, std::fabs(local[i]))) << "step " << i;
  }
  EXPECT_NE(remote.front(), remote.back()) << "the head did not train";
}

}  // namespace
}  // namespace sophon
