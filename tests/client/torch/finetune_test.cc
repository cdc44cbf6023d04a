// Head fine-tuning (TrainerOptions.finetune): the trainer takes FEATURES
// batches, changes the head only, starts a new head for another class count,
// and refuses checkpoints and batches that do not fit by name.
#include <torch/types.h>
#include <torch/utils.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "client/train/trainer.h"
#include "gtest/gtest.h"
#include "model/models.h"
#include "tests/client/torch/saved_models.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

std::string Checkpoint(const std::string& arch, int classes, uint64_t seed) {
  torch::manual_seed(seed);
  absl::StatusOr<Classifier> model = MakeModel(arch, classes);
  EXPECT_TRUE(model.ok()) << model.status();
  const std::string path =
      testing::MakeTempDir("finetune_" + arch + std::to_string(seed)) + "/ckpt.pt";
  EXPECT_TRUE(SaveModel(*model, arch, classes, path).ok());
  return path;
}

TrainerOptions FinetuneOptions(const std::string& checkpoint, const std::string& arch,
                               int classes) {
  TrainerOptions o;
  o.arch = arch;
  o.num_classes = classes;
  o.device = "cpu";
  o.threads = 1;
  o.seed = 3;
  o.finetune = true;
  o.init_checkpoint = checkpoint;
  o.models[0].lr = 0.05;
  return o;
}

// Features of a learnable problem: class k lights up features [8k, 8k + 8).
Batch FeatureBatch(int n, int features, int classes, std::mt19937_64& rng) {
  std::uniform_int_distribution<int> pick(0, classes - 1);
  std::normal_distribution<float> noise(0.0f, 0.3f);
  Batch b;
  b.stage = Stage::kFeatures;
  b.n = n;
  b.c = features;
  b.h = b.w = 1;
  b.images.resize(static_cast<size_t>(n) * features);
  for (int i = 0; i < n; ++i) {
    const int label = pick(rng);
    b.labels.push_back(label);
    b.ids.push_back(i);
    for (int f = 0; f < features; ++f) {
      b.images[i * features + f] = (f / 8 == label ? 2.0f : 0.0f) + noise(rng);
    }
  }
  return b;
}

TEST(FinetuneTest, TrainsTheHeadOnlyAndLearns) {
  const std::string ckpt = Checkpoint("tinycnn", 4, 1);
  const TrainerOptions options = FinetuneOptions(ckpt, "tinycnn", 4);
  absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(options);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  std::mt19937_64 rng(5);
  double first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    absl::StatusOr<StepResult> r = (*trainer)->Step(FeatureBatch(32, 128, 4, rng));
    ASSERT_TRUE(r.ok()) << r.status();
    if (step == 0) first = r->loss;
    last = r->loss;
  }
  EXPECT_LT(last, first * 0.5) << "the head did not learn: loss " << first << " -> " << last;

  // The backbone is the checkpoint's, unchanged; the head moved.
  const std::string out = testing::MakeTempDir("finetune_out") + "/tuned.pt";
  const std::vector<testing::ModelTensors> saved = testing::SavedModels(**trainer, options, out);
  ASSERT_EQ(saved.size(), 1u);
  absl::StatusOr<Classifier> original = MakeModel("tinycnn", 4);
  ASSERT_TRUE(original.ok());
  ASSERT_TRUE(LoadModel(ckpt, "tinycnn", 4, *original).ok());
  int frozen = 0, moved = 0;
  for (const auto& [name, tensor] : saved[0]) {
    const torch::Tensor* before = (*original)->named_parameters().find(name);
    if (before == nullptr) before = (*original)->named_buffers().find(name);
    ASSERT_NE(before, nullptr) << name;
    const bool same = torch::equal(tensor, *before);
    if (name.rfind("fc.", 0) == 0) {
      EXPECT_FALSE(same) << name << " is the head: it must train";
      ++moved;
    } else {
      EXPECT_TRUE(same) << name << " is in the frozen backbone";
      ++frozen;
    }
  }
  EXPECT_EQ(moved, 2);  // fc.weight, fc.bias
  EXPECT_GT(frozen, 0);
}

TEST(FinetuneTest, AFineTuningRunResumesWhereItStopped) {
  const std::string ckpt = Checkpoint("tinycnn", 4, 1);
  const TrainerOptions options = FinetuneOptions(ckpt, "tinycnn", 4);
  absl::StatusOr<std::unique_ptr<Trainer>> first = Trainer::Create(options);
  ASSERT_TRUE(first.ok()) << first.status();
  std::mt19937_64 rng(8);
  std::vector<Batch> batches;
  for (int i = 0; i < 8; ++i) batches.push_back(FeatureBatch(16, 128, 4, rng));
  for (int i = 0; i < 4; ++i) ASSERT_TRUE((*first)->Step(batches[i]).ok());
  const std::string state = testing::MakeTempDir("finetune_resume") + "/state.ckpt";
  TrainingCursor cursor;
  cursor.steps = 4;
  ASSERT_TRUE((*first)->SaveCheckpoint(state, cursor).ok());
  std::vector<double> expected;
  for (int i = 4; i < 8; ++i) {
    absl::StatusOr<StepResult> r = (*first)->Step(batches[i]);
    ASSERT_TRUE(r.ok()) << r.status();
    expected.push_back(r->loss);
  }
  // A new trainer (as after a restart) picks up the head and its momentum.
  absl::StatusOr<std::unique_ptr<Trainer>> resumed = Trainer::Create(options);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  absl::StatusOr<TrainingCursor> got = (*resumed)->LoadCheckpoint(state);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->steps, 4);
  for (int i = 4; i < 8; ++i) {
    absl::StatusOr<StepResult> r = (*resumed)->Step(batches[i]);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_DOUBLE_EQ(r->loss, expected[i - 4]) << "step " << i;
  }
  // A trainer of the whole network refuses it, naming the difference.
  TrainerOptions whole = options;
  whole.finetune = false;
  whole.init_checkpoint.clear();
  absl::StatusOr<std::unique_ptr<Trainer>> other = Trainer::Create(whole);
  ASSERT_TRUE(other.ok()) << other.status();
  const absl::Status refused = (*other)->LoadCheckpoint(state).status();
  EXPECT_TRUE(absl::IsInvalidArgument(refused)) << refused;
  EXPECT_NE(refused.message().find("finetune on (the head only)"), std::string::npos) << refused;
}

TEST(FinetuneTest, AnotherClassCountGetsANewHead) {
  const std::string ckpt = Checkpoint("tinycnn", 10, 2);
  const TrainerOptions options = FinetuneOptions(ckpt, "tinycnn", 3);
  absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(options);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  std::mt19937_64 rng(1);
  ASSERT_TRUE((*trainer)->Step(FeatureBatch(8, 128, 3, rng)).ok());
  const std::vector<testing::ModelTensors> saved = testing::SavedModels(
      **trainer, options, testing::MakeTempDir("finetune_new_head") + "/tuned.pt");
  ASSERT_EQ(saved.size(), 1u);
  absl::StatusOr<Classifier> original = MakeModel("tinycnn", 10);
  ASSERT_TRUE(original.ok());
  ASSERT_TRUE(LoadModel(ckpt, "tinycnn", 10, *original).ok());
  for (const auto& [name, tensor] : saved[0]) {
    if (name.rfind("fc.", 0) == 0) {
      EXPECT_EQ(tensor.size(0), 3) << name;  // 3 classes now
      continue;
    }
    const torch::Tensor* before = (*original)->named_parameters().find(name);
    if (before == nullptr) before = (*original)->named_buffers().find(name);
    ASSERT_NE(before, nullptr) << name;
    EXPECT_TRUE(torch::equal(tensor, *before)) << name << " must come from the checkpoint";
  }
}

TEST(FinetuneTest, RefusesWhatDoesNotFitByName) {
  const std::string ckpt = Checkpoint("tinymlp", 4, 1);
  // Another architecture than the checkpoint's.
  absl::StatusOr<std::unique_ptr<Trainer>> wrong_arch =
      Trainer::Create(FinetuneOptions(ckpt, "tinycnn", 4));
  ASSERT_FALSE(wrong_arch.ok());
  EXPECT_EQ(wrong_arch.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(wrong_arch.status().message().find(ckpt), std::string::npos) << wrong_arch.status();
  EXPECT_NE(wrong_arch.status().message().find("holds tinymlp, not tinycnn"), std::string::npos)
      << wrong_arch.status();
  // Not a checkpoint at all.
  const std::string junk = testing::MakeTempDir("finetune_junk") + "/junk.pt";
  testing::WriteFile(junk, "not a checkpoint");
  absl::StatusOr<std::unique_ptr<Trainer>> bad = Trainer::Create(FinetuneOptions(junk, "tinycnn", 4));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(junk), std::string::npos) << bad.status();
  // Without a checkpoint.
  TrainerOptions none = FinetuneOptions("", "tinymlp", 4);
  EXPECT_NE(Trainer::Create(none).status().message().find("TrainerOptions.finetune needs"),
            std::string::npos);

  absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(FinetuneOptions(ckpt, "tinymlp", 4));
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  std::mt19937_64 rng(1);
  // A batch of images, or of features of another size.
  Batch images;
  images.n = 2;
  images.h = images.w = 32;
  images.images.assign(2 * 3 * 32 * 32, 0.0f);
  images.labels = {0, 1};
  const absl::Status not_features = (*trainer)->Step(images).status();
  EXPECT_EQ(not_features.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(not_features.message().find("fine-tuning trains on features batches, got tensor"),
            std::string::npos)
      << not_features;
  const absl::Status wrong_size = (*trainer)->Step(FeatureBatch(2, 128, 4, rng)).status();
  EXPECT_NE(wrong_size.message().find("tinymlp's head takes 64 features"), std::string::npos)
      << wrong_size;
  EXPECT_TRUE((*trainer)->Step(FeatureBatch(2, 64, 4, rng)).ok());
}

TEST(FinetuneTest, FusedHeadsOnOneFeatureStreamEqualSeparateHeads) {
  // Another class count than the checkpoint's: every head is new, model k's
  // from seed + k.
  const std::string ckpt = Checkpoint("tinycnn", 6, 4);
  TrainerOptions fused = FinetuneOptions(ckpt, "tinycnn", 4);
  fused.fused = true;
  fused.models = {Hyperparameters{}, Hyperparameters{}, Hyperparameters{}};
  fused.models[0].lr = 0.01;
  fused.models[1].lr = 0.05;
  fused.models[2].lr = 0.2;
  fused.models[2].momentum = 0.5;
  absl::StatusOr<std::unique_ptr<Trainer>> array = Trainer::Create(fused);
  ASSERT_TRUE(array.ok()) << array.status();
  std::vector<std::unique_ptr<Trainer>> separate;
  for (int k = 0; k < 3; ++k) {
    TrainerOptions one = FinetuneOptions(ckpt, "tinycnn", 4);
    one.seed = fused.seed + k;
    one.models = {fused.models[k]};
    absl::StatusOr<std::unique_ptr<Trainer>> t = Trainer::Create(one);
    ASSERT_TRUE(t.ok()) << t.status();
    separate.push_back(*std::move(t));
  }
  std::mt19937_64 rng(8);
  for (int step = 0; step < 20; ++step) {
    const Batch batch = FeatureBatch(16, 128, 4, rng);
    absl::StatusOr<StepResult> r = (*array)->Step(batch);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->models.size(), 3u);
    for (int k = 0; k < 3; ++k) {
      absl::StatusOr<StepResult> s = separate[k]->Step(batch);
      ASSERT_TRUE(s.ok()) << s.status();
      EXPECT_NEAR(r->models[k].loss, s->loss, 1e-4 * std::max(1.0, s->loss))
          << "step " << step << " model " << k;
      EXPECT_EQ(r->models[k].correct, s->correct) << "step " << step << " model " << k;
    }
  }
  // The saved heads agree too, and the backbones are the checkpoint's.
  const std::vector<testing::ModelTensors> from_array =
      testing::SavedModels(**array, fused, testing::MakeTempDir("finetune_fused") + "/f.pt");
  ASSERT_EQ(from_array.size(), 3u);
  for (int k = 0; k < 3; ++k) {
    TrainerOptions one = FinetuneOptions(ckpt, "tinycnn", 4);
    const std::vector<testing::ModelTensors> alone = testing::SavedModels(
        *separate[k], one, testing::MakeTempDir("finetune_alone") + "/a.pt");
    ASSERT_EQ(alone.size(), 1u);
    ASSERT_EQ(alone[0].size(), from_array[k].size());
    for (size_t i = 0; i < alone[0].size(); ++i) {
      EXPECT_EQ(alone[0][i].first, from_array[k][i].first);
      EXPECT_TRUE(torch::allclose(alone[0][i].second, from_array[k][i].second, 1e-4, 1e-5))
          << "model " << k << " " << alone[0][i].first;
    }
  }
}

}  // namespace
}  // namespace sophon
