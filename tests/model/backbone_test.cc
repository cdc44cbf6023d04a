#include "sophon/model/backbone.h"

#include <torch/serialize.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "model/models.h"
#include "gtest/gtest.h"
#include "sophon/base/half.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

// A trained-looking checkpoint: a fresh model whose BatchNorm statistics
// moved (one training-mode pass), saved as sophon-train --save does.
std::string SavedCheckpoint(const std::string& arch, int classes, Classifier* model_out) {
  torch::manual_seed(3);
  absl::StatusOr<Classifier> model = MakeModel(arch, classes);
  EXPECT_TRUE(model.ok()) << model.status();
  (*model)->train();
  {
    torch::NoGradGuard no_grad;
    const int side = std::max(32, ModelMinInputSize(arch));
    (*model)->forward(torch::randn({4, 3, side, side}));
  }
  const std::string path = testing::MakeTempDir("backbone_" + arch) + "/ckpt.pt";
  EXPECT_TRUE(SaveModel(*model, arch, classes, path).ok());
  if (model_out != nullptr) *model_out = *model;
  return path;
}

TEST(BackboneTest, EveryArchitectureIsItsHeadOnItsFeatures) {
  torch::NoGradGuard no_grad;
  for (const std::string& arch : ModelNames()) {
    torch::manual_seed(1);
    absl::StatusOr<Classifier> model = MakeModel(arch, 7);
    ASSERT_TRUE(model.ok()) << model.status();
    (*model)->eval();
    const int s = std::max(32, ModelMinInputSize(arch));
    const torch::Tensor x = torch::randn({2, 3, s, s});
    const torch::Tensor f = (*model)->features(x);
    ASSERT_EQ(f.dim(), 2) << arch;
    EXPECT_EQ(f.size(0), 2) << arch;
    EXPECT_EQ(f.size(1), ModelFeatureSize(arch)) << arch;
    EXPECT_TRUE(torch::equal((*model)->forward(x), (*model)->head(f))) << arch;
  }
  EXPECT_EQ(ModelFeatureSize("resnet18"), 512);
  EXPECT_EQ(ModelFeatureSize("resnet50"), 2048);
  EXPECT_EQ(ModelFeatureSize("alexnet"), 9216);
  EXPECT_EQ(ModelFeatureSize("vgg16"), 0);
}

TEST(BackboneTest, ExtractsTheEvaluationModeFeaturesOfTheCheckpoint) {
  Classifier model;
  const std::string path = SavedCheckpoint("tinycnn", 5, &model);
  absl::StatusOr<CheckpointInfo> info = ReadCheckpointInfo(path);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->arch, "tinycnn");
  EXPECT_EQ(info->num_classes, 5);

  absl::StatusOr<std::unique_ptr<Backbone>> backbone = Backbone::Load({path, 0});
  ASSERT_TRUE(backbone.ok()) << backbone.status();
  EXPECT_EQ((*backbone)->feature_size(), 128);
  EXPECT_NE((*backbone)->description().find("tinycnn (5 classes) from " + path),
            std::string::npos);

  const torch::Tensor images = torch::randn({3, 3, 40, 40});
  std::vector<float> out(3 * 128, -1.0f);
  ASSERT_TRUE((*backbone)->Extract(images.data_ptr<float>(), 3, 40, out.data()).ok());
  model->eval();
  torch::NoGradGuard no_grad;
  const torch::Tensor expected = model->features(images).contiguous();
  EXPECT_EQ(0, std::memcmp(out.data(), expected.data_ptr<float>(), out.size() * sizeof(float)));
  // Training mode (batch statistics) would give other features: the backbone
  // really is in evaluation mode.
  model->train();
  EXPECT_FALSE(torch::equal(model->features(images), expected));

  // fp16 on the wire: the same rounding as LibTorch's.
  std::vector<uint16_t> halves(out.size());
  FloatsToHalves(out.data(), out.size(), halves.data());
  const torch::Tensor torch_halves = expected.to(torch::kHalf).contiguous();
  EXPECT_EQ(0, std::memcmp(halves.data(), torch_halves.data_ptr<at::Half>(),
                           halves.size() * sizeof(uint16_t)));
}

TEST(BackboneTest, BadCheckpointsAndImagesAreRefusedNamingThem) {
  absl::Status s = Backbone::Load({"/nonexistent/ckpt.pt", 0}).status();
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_NE(s.message().find("/nonexistent/ckpt.pt"), absl::string_view::npos);

  const std::string dir = testing::MakeTempDir("backbone_bad");
  const std::string junk = dir + "/junk.pt";
  std::ofstream(junk) << "not a checkpoint";
  s = Backbone::Load({junk, 0}).status();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(s.message().find(junk), absl::string_view::npos) << s;

  const std::string unknown = dir + "/vgg.pt";
  {
    torch::serialize::OutputArchive archive;
    archive.write("sophon_arch", c10::IValue(std::string("vgg16")));
    archive.write("sophon_num_classes", c10::IValue(static_cast<int64_t>(10)));
    archive.save_to(unknown);
  }
  s = Backbone::Load({unknown, 0}).status();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(s.message().find("vgg16"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("resnet18"), absl::string_view::npos) << s;  // the valid ones

  // The right architecture name over tensors of another shape.
  const std::string wrong = dir + "/wrong.pt";
  {
    torch::manual_seed(0);
    absl::StatusOr<Classifier> other = MakeModel("tinymlp", 3);
    ASSERT_TRUE(other.ok());
    torch::serialize::OutputArchive archive;
    (*other)->save(archive);
    archive.write("sophon_arch", c10::IValue(std::string("tinycnn")));
    archive.write("sophon_num_classes", c10::IValue(static_cast<int64_t>(3)));
    archive.save_to(wrong);
  }
  s = Backbone::Load({wrong, 0}).status();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(s.message().find(wrong), absl::string_view::npos) << s;

  EXPECT_FALSE(Backbone::Load({"", 0}).ok());
  EXPECT_FALSE(Backbone::Load({junk, -1}).ok());

  absl::StatusOr<std::unique_ptr<Backbone>> backbone =
      Backbone::Load({SavedCheckpoint("alexnet", 4, nullptr), 0});
  ASSERT_TRUE(backbone.ok()) << backbone.status();
  std::vector<float> image(3 * 32 * 32), out(9216);
  s = (*backbone)->Extract(image.data(), 1, 32, out.data());
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(s.message().find("too small for alexnet"), absl::string_view::npos) << s;
}

TEST(BackboneTest, TheFingerprintIsTheBackbonesWeightsNotTheHeads) {
  Classifier model;
  const std::string path = SavedCheckpoint("tinycnn", 5, &model);
  absl::StatusOr<std::unique_ptr<Backbone>> original = Backbone::Load({path, 0});
  ASSERT_TRUE(original.ok()) << original.status();
  const std::string dir = testing::MakeTempDir("backbone_fingerprint");
  torch::NoGradGuard no_grad;
  // Another head (and class count) on the same backbone: the same fingerprint.
  torch::manual_seed(9);
  absl::StatusOr<Classifier> tuned = MakeModel("tinycnn", 3);
  ASSERT_TRUE(tuned.ok());
  for (const auto& item : model->named_parameters()) {
    torch::Tensor* to = (*tuned)->named_parameters().find(item.key());
    if (item.key().rfind("fc.", 0) != 0) to->copy_(item.value());
  }
  for (const auto& item : model->named_buffers()) {
    (*tuned)->named_buffers().find(item.key())->copy_(item.value());
  }
  ASSERT_TRUE(SaveModel(*tuned, "tinycnn", 3, dir + "/tuned.pt").ok());
  absl::StatusOr<std::unique_ptr<Backbone>> same = Backbone::Load({dir + "/tuned.pt", 0});
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ((*same)->fingerprint(), (*original)->fingerprint());
  // The head fingerprint tells the heads apart, and is the same for the same head.
  EXPECT_NE((*same)->head_fingerprint(), (*original)->head_fingerprint());
  absl::StatusOr<std::unique_ptr<Backbone>> again = Backbone::Load({path, 0});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)->head_fingerprint(), (*original)->head_fingerprint());
  EXPECT_EQ((*again)->fingerprint(), (*original)->fingerprint());
  // One backbone weight changed: another fingerprint.
  (*tuned)->named_parameters().find("features.0.weight")->view(-1)[0] += 1e-3f;
  ASSERT_TRUE(SaveModel(*tuned, "tinycnn", 3, dir + "/other.pt").ok());
  absl::StatusOr<std::unique_ptr<Backbone>> other = Backbone::Load({dir + "/other.pt", 0});
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_NE((*other)->fingerprint(), (*original)->fingerprint());
}

TEST(BackboneTest, ClassifyGivesTheHeadsLogitsOfTheFeatures) {
  Classifier model;
  const std::string path = SavedCheckpoint("tinycnn", 5, &model);
  absl::StatusOr<std::unique_ptr<Backbone>> backbone = Backbone::Load({path, 0});
  ASSERT_TRUE(backbone.ok()) << backbone.status();
  EXPECT_EQ((*backbone)->num_classes(), 5);
  model->eval();
  torch::NoGradGuard no_grad;
  torch::manual_seed(3);
  const torch::Tensor x = torch::randn({2, 3, 32, 32});
  std::vector<float> features(2 * 128), logits(2 * 5);
  ASSERT_TRUE((*backbone)->Extract(x.data_ptr<float>(), 2, 32, features.data()).ok());
  ASSERT_TRUE((*backbone)->Classify(features.data(), 2, logits.data()).ok());
  const torch::Tensor expected = model->forward(x).contiguous();
  for (int i = 0; i < 2 * 5; ++i) {
    EXPECT_NEAR(logits[i], expected.data_ptr<float>()[i], 1e-5) << i;
  }
}

}  // namespace
}  // namespace sophon
