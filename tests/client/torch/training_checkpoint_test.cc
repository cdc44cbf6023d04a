// Training checkpoints through the Trainer interface: a trainer restored from
// one continues exactly as the one that wrote it (weights, BatchNorm buffers,
// optimizer state, learning rates, RNG) and gets its cursor back; other
// trainers are refused by name; a failed write leaves nothing at the path.
#include <torch/serialize/archive.h>
#include <torch/types.h>

#include <filesystem>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_join.h"
#include "client/train/trainer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/checkpoint_file.h"
#include "model/models.h"
#include "sophon/data/batch.h"
#include "tests/client/torch/noise_batch.h"
#include "tests/client/torch/saved_models.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::BitwiseEqual;
using testing::ModelTensors;
using testing::SavedModels;

constexpr int kClasses = 4;

struct Case {
  std::string name;
  OptimizerKind optimizer;
  int fused_models;  // 0: one unfused model
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// tinycnn: BatchNorm buffers are part of what must come back.
TrainerOptions Options(OptimizerKind optimizer, int fused_models) {
  TrainerOptions options;
  options.arch = "tinycnn";
  options.num_classes = kClasses;
  options.seed = 3;
  options.threads = 1;
  options.optimizer = optimizer;
  options.lr_schedule = LrSchedule::kCosine;
  options.fused = fused_models > 0;
  options.models.assign(std::max(1, fused_models), Hyperparameters{});
  for (size_t k = 0; k < options.models.size(); ++k) {
    options.models[k].lr = (optimizer == OptimizerKind::kSgd ? 0.05 : 2e-3) / (k + 1);
    options.models[k].momentum = 0.9;
    options.models[k].weight_decay = 1e-3;
  }
  return options;
}

Batch StepBatch(int step) {
  Batch batch = testing::NoiseBatch(4, 32, kClasses, 50 + step);
  batch.index = step;
  return batch;
}

TrainingCursor SomeCursor() {
  TrainingCursor cursor;
  cursor.epoch = 3;
  cursor.position = 1234;
  cursor.steps = 2;
  cursor.global_batch = 8;
  cursor.world_size = 2;
  cursor.dataset_fingerprint = 0xfedcba9876543210ULL;  // above 2^63: bit-cast on disk
  cursor.seed = ~0ULL;
  return cursor;
}

std::unique_ptr<Trainer> Create(const TrainerOptions& options) {
  auto trainer = Trainer::Create(options);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  return trainer.ok() ? *std::move(trainer) : nullptr;
}

void Steps(Trainer& trainer, int first, int count) {
  for (int step = first; step < first + count; ++step) {
    auto result = trainer.Step(StepBatch(step));
    ASSERT_TRUE(result.ok()) << result.status();
  }
}

class TrainingCheckpointTest : public ::testing::TestWithParam<Case> {};

TEST_P(TrainingCheckpointTest, ARestoredTrainerContinuesExactly) {
  const std::string dir = testing::MakeTempDir("training_checkpoint_" + GetParam().name);
  const std::string path = dir + "/state.ckpt";
  const TrainerOptions options = Options(GetParam().optimizer, GetParam().fused_models);

  std::unique_ptr<Trainer> first = Create(options);
  ASSERT_NE(first, nullptr);
  // Epoch 1 of 4 of the cosine schedule: rates below the options' own, which
  // a restored trainer gets only from the checkpoint.
  first->BeginEpoch(1, 4);
  Steps(*first, 0, 2);
  ASSERT_TRUE(first->SaveCheckpoint(path, SomeCursor()).ok());
  EXPECT_THAT(testing::ReadFile(path), ::testing::Not(::testing::IsEmpty()));
  const torch::Tensor drawn_after_save = torch::rand({8});
  Steps(*first, 2, 2);
  const std::vector<ModelTensors> expected = SavedModels(*first, options, dir + "/first.pt");

  // Another seed: nothing but the checkpoint makes it the same.
  TrainerOptions other_seed = options;
  other_seed.seed = 77;
  std::unique_ptr<Trainer> second = Create(other_seed);
  ASSERT_NE(second, nullptr);
  auto cursor = second->LoadCheckpoint(path);
  ASSERT_TRUE(cursor.ok()) << cursor.status();
  EXPECT_TRUE(torch::equal(torch::rand({8}), drawn_after_save)) << "the CPU RNG state";
  const TrainingCursor want = SomeCursor();
  EXPECT_EQ(cursor->epoch, want.epoch);
  EXPECT_EQ(cursor->position, want.position);
  EXPECT_EQ(cursor->steps, want.steps);
  EXPECT_EQ(cursor->global_batch, want.global_batch);
  EXPECT_EQ(cursor->world_size, want.world_size);
  EXPECT_EQ(cursor->dataset_fingerprint, want.dataset_fingerprint);
  EXPECT_EQ(cursor->seed, want.seed);
  Steps(*second, 2, 2);
  const std::vector<ModelTensors> restored = SavedModels(*second, options, dir + "/second.pt");

  ASSERT_EQ(expected.size(), options.models.size());
  ASSERT_EQ(restored.size(), options.models.size());
  for (size_t k = 0; k < expected.size(); ++k) {
    EXPECT_TRUE(BitwiseEqual(expected[k], restored[k])) << "model " << k;
  }
  // Only the checkpoint is left in the folder (no temporary file).
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.find("ckpt") != std::string::npos) files.push_back(name);
  }
  EXPECT_THAT(files, ElementsAre("state.ckpt"));
}

INSTANTIATE_TEST_SUITE_P(
    Trainers, TrainingCheckpointTest,
    ::testing::Values(Case{"sgd", OptimizerKind::kSgd, 0}, Case{"adam", OptimizerKind::kAdam, 0},
                      Case{"fused_sgd", OptimizerKind::kSgd, 2},
                      Case{"fused_adam", OptimizerKind::kAdam, 2}),
    [](const auto& info) { return info.param.name; });

// A fused array's checkpoint holds one ordinary state_dict a model: each
// loads into an unfused model of the architecture.
TEST(TrainingCheckpointFormatTest, AFusedArrayHoldsOneStateDictAModel) {
  const std::string path = testing::MakeTempDir("training_checkpoint_fused") + "/state.ckpt";
  std::unique_ptr<Trainer> trainer = Create(Options(OptimizerKind::kSgd, 2));
  ASSERT_NE(trainer, nullptr);
  Steps(*trainer, 0, 1);
  ASSERT_TRUE(trainer->SaveCheckpoint(path, SomeCursor()).ok());
  absl::StatusOr<c10::impl::GenericDict> root = ReadCheckpointFile(path, "training");
  ASSERT_TRUE(root.ok()) << root.status();
  const c10::IValue models = root->at("model");
  ASSERT_TRUE(models.isList());
  ASSERT_EQ(models.toList().size(), 2u);
  for (size_t k = 0; k < 2; ++k) {
    absl::StatusOr<Classifier> model = MakeModel("tinycnn", kClasses);
    ASSERT_TRUE(model.ok());
    EXPECT_TRUE(LoadStateDict(models.toList().get(k), **model, "model").ok()) << "model " << k;
    // Each tensor in a storage of its own, not a view of the fused array's.
    for (const auto& item : models.toList().get(k).toGenericDict()) {
      const torch::Tensor t = item.value().toTensor();
      EXPECT_EQ(t.storage().nbytes(), static_cast<size_t>(t.numel()) * t.element_size())
          << "model " << k << " " << item.key().toStringRef();
    }
  }
  const c10::impl::GenericDict cursor = root->at("cursor").toGenericDict();
  EXPECT_EQ(cursor.at("batch_size").toInt(), 4);  // global batch 8 over 2 ranks
  EXPECT_EQ(static_cast<uint64_t>(cursor.at("dataset_fingerprint").toInt()),
            0xfedcba9876543210ULL);
}

// The file an earlier version wrote for the same state: LibTorch's archive
// (client/torch/training_checkpoint_archive.cc has its layout), here of a
// fused SGD array, made from a checkpoint in this version's format.
void WriteEarlierVersionsCheckpoint(const std::string& from, const std::string& to) {
  const c10::impl::GenericDict root = *ReadCheckpointFile(from, "training");
  torch::serialize::OutputArchive archive;
  archive.write("sophon_training_checkpoint", c10::IValue(int64_t{1}));
  for (const char* key : {"arch", "num_classes", "optimizer_kind", "fused", "num_models"}) {
    archive.write(key, root.at(key));
  }
  torch::serialize::OutputArchive model(archive.compilation_unit());
  const c10::List<c10::IValue> models = root.at("model").toList();
  std::vector<std::string> names;
  for (const auto& item : models.get(0).toGenericDict()) {
    const std::string name = item.key().toStringRef();
    std::vector<torch::Tensor> slots;
    for (size_t k = 0; k < models.size(); ++k) {
      slots.push_back(models.get(k).toGenericDict().at(name).toTensor());
    }
    model.write(std::to_string(names.size()), torch::stack(slots), /*is_buffer=*/true);
    names.push_back(name);
  }
  model.write("names", c10::IValue(absl::StrJoin(names, "\n")));
  archive.write("model", model);
  torch::serialize::OutputArchive optimizer(archive.compilation_unit());
  const c10::impl::GenericDict saved_optimizer = root.at("optimizer").toGenericDict();
  optimizer.write("kind", saved_optimizer.at("kind"));
  const c10::List<c10::IValue> buffers = saved_optimizer.at("momentum_buffers").toList();
  optimizer.write("momentum_buffers/size", c10::IValue(static_cast<int64_t>(buffers.size())));
  for (size_t i = 0; i < buffers.size(); ++i) {
    optimizer.write("momentum_buffers/" + std::to_string(i), buffers.get(i).toTensor(),
                    /*is_buffer=*/true);
  }
  archive.write("optimizer_state", optimizer);
  archive.write("learning_rates", root.at("learning_rates").toTensor(), /*is_buffer=*/true);
  archive.write("rng_cpu", root.at("rng_cpu").toTensor(), /*is_buffer=*/true);
  const c10::impl::GenericDict saved_cursor = root.at("cursor").toGenericDict();
  torch::serialize::OutputArchive cursor(archive.compilation_unit());
  for (const char* key : {"epoch", "position", "world_size", "dataset_fingerprint", "seed",
                          "shuffle_window"}) {
    cursor.write(key, saved_cursor.at(key));
  }
  cursor.write("steps", root.at("steps"));
  cursor.write("global_batch", c10::IValue(saved_cursor.at("batch_size").toInt() *
                                           saved_cursor.at("world_size").toInt()));
  archive.write("cursor", cursor);
  archive.save_to(to);
}

TEST(TrainingCheckpointFormatTest, ACheckpointOfAnEarlierVersionResumesTheSame) {
  const std::string dir = testing::MakeTempDir("training_checkpoint_earlier");
  const TrainerOptions options = Options(OptimizerKind::kSgd, 2);
  std::unique_ptr<Trainer> first = Create(options);
  ASSERT_NE(first, nullptr);
  first->BeginEpoch(1, 4);
  Steps(*first, 0, 2);
  ASSERT_TRUE(first->SaveCheckpoint(dir + "/now.ckpt", SomeCursor()).ok());
  WriteEarlierVersionsCheckpoint(dir + "/now.ckpt", dir + "/earlier.ckpt");

  std::vector<std::vector<ModelTensors>> after;
  for (const char* file : {"/now.ckpt", "/earlier.ckpt"}) {
    TrainerOptions other_seed = options;
    other_seed.seed = 77;
    std::unique_ptr<Trainer> resumed = Create(other_seed);
    ASSERT_NE(resumed, nullptr);
    absl::StatusOr<TrainingCursor> cursor = resumed->LoadCheckpoint(dir + file);
    ASSERT_TRUE(cursor.ok()) << file << ": " << cursor.status();
    EXPECT_EQ(cursor->position, SomeCursor().position) << file;
    EXPECT_EQ(cursor->global_batch, SomeCursor().global_batch) << file;
    EXPECT_EQ(cursor->dataset_fingerprint, SomeCursor().dataset_fingerprint) << file;
    Steps(*resumed, 2, 2);
    after.push_back(SavedModels(*resumed, options, dir + file + ".models.pt"));
  }
  ASSERT_EQ(after[0].size(), 2u);
  ASSERT_EQ(after[1].size(), 2u);
  for (size_t k = 0; k < 2; ++k) {
    EXPECT_TRUE(BitwiseEqual(after[0][k], after[1][k])) << "model " << k;
  }
}

class TrainingCheckpointRefusalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir("training_checkpoint_refusals");
    path_ = dir_ + "/sgd.ckpt";
    std::unique_ptr<Trainer> trainer = Create(Options(OptimizerKind::kSgd, 0));
    ASSERT_NE(trainer, nullptr);
    ASSERT_TRUE(trainer->SaveCheckpoint(path_, SomeCursor()).ok());
  }

  absl::Status LoadInto(const TrainerOptions& options) {
    std::unique_ptr<Trainer> trainer = Create(options);
    if (trainer == nullptr) return absl::InternalError("no trainer");
    return trainer->LoadCheckpoint(path_).status();
  }

  std::string dir_, path_;
};

TEST_F(TrainingCheckpointRefusalTest, AnotherTrainerIsRefusedNamingBothValues) {
  TrainerOptions other_arch = Options(OptimizerKind::kSgd, 0);
  other_arch.arch = "tinymlp";
  absl::Status status = LoadInto(other_arch);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), AllOf(HasSubstr("'" + path_ + "'"), HasSubstr("arch tinycnn"),
                                      HasSubstr("arch tinymlp")));

  status = LoadInto(Options(OptimizerKind::kAdam, 0));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), AllOf(HasSubstr("'" + path_ + "'"), HasSubstr("optimizer sgd"),
                                      HasSubstr("optimizer adam")));

  TrainerOptions other_classes = Options(OptimizerKind::kSgd, 0);
  other_classes.num_classes = 7;
  status = LoadInto(other_classes);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), AllOf(HasSubstr("num_classes 4"), HasSubstr("num_classes 7")));

  status = LoadInto(Options(OptimizerKind::kSgd, 2));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("model count 1 (unfused)"), HasSubstr("model count 2 (fused)")));
}

TEST_F(TrainingCheckpointRefusalTest, MissingFilesAndOtherFilesAreRefused) {
  std::unique_ptr<Trainer> trainer = Create(Options(OptimizerKind::kSgd, 0));
  ASSERT_NE(trainer, nullptr);
  auto missing = trainer->LoadCheckpoint(dir_ + "/missing.ckpt");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr(dir_ + "/missing.ckpt"));

  // A model checkpoint (Trainer::Save) is not a training checkpoint.
  ASSERT_TRUE(trainer->Save(dir_ + "/model.pt").ok());
  auto model = trainer->LoadCheckpoint(dir_ + "/model.pt");
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(model.status().message(), HasSubstr("is not a training checkpoint"));

  testing::WriteFile(dir_ + "/junk.ckpt", "not an archive");
  auto junk = trainer->LoadCheckpoint(dir_ + "/junk.ckpt");
  EXPECT_EQ(junk.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(junk.status().message(), HasSubstr(dir_ + "/junk.ckpt"));
}

TEST(TrainingCheckpointWriteTest, AFailedWriteLeavesNothingAtThePath) {
  const std::string dir = testing::MakeTempDir("training_checkpoint_write");
  std::unique_ptr<Trainer> trainer = Create(Options(OptimizerKind::kSgd, 0));
  ASSERT_NE(trainer, nullptr);

  const std::string in_missing_folder = dir + "/no/such/folder/state.ckpt";
  absl::Status status = trainer->SaveCheckpoint(in_missing_folder, SomeCursor());
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr(in_missing_folder));
  EXPECT_FALSE(std::filesystem::exists(in_missing_folder));

  // The path is a folder: the rename fails after the whole file was written.
  const std::string folder = dir + "/state.ckpt";
  testing::WriteFile(folder + "/kept", "kept");
  status = trainer->SaveCheckpoint(folder, SomeCursor());
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr(folder));
  EXPECT_EQ(testing::ReadFile(folder + "/kept"), "kept");
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  EXPECT_THAT(names, ElementsAre("state.ckpt"));
}

}  // namespace
}  // namespace sophon
