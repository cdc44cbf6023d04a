#include "client/train/predictor.h"

#include <torch/nn/functional.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <string>
#include <vector>

#include "client/train/models.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

TEST(PredictorTest, TopKOfTheWholeNetworkOrOfTheHeadOnFeatures) {
  torch::manual_seed(5);
  absl::StatusOr<Classifier> model = MakeModel("tinycnn", 6);
  ASSERT_TRUE(model.ok());
  const std::string path = testing::MakeTempDir("predictor") + "/m.pt";
  ASSERT_TRUE(SaveModel(*model, "tinycnn", 6, path).ok());
  absl::StatusOr<std::unique_ptr<Predictor>> predictor = Predictor::Load({path, 3});
  ASSERT_TRUE(predictor.ok()) << predictor.status();
  EXPECT_EQ((*predictor)->arch(), "tinycnn");
  EXPECT_EQ((*predictor)->num_classes(), 6);

  const torch::Tensor images = torch::randn({4, 3, 32, 32});
  (*model)->eval();
  torch::NoGradGuard no_grad;
  const torch::Tensor probs = torch::softmax((*model)->forward(images), 1);
  Batch tensors;
  tensors.n = 4;
  tensors.h = tensors.w = 32;
  tensors.images.assign(images.data_ptr<float>(), images.data_ptr<float>() + images.numel());
  absl::StatusOr<std::vector<Prediction>> p = (*predictor)->Predict(tensors);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->size(), 4u);
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ((*p)[i].labels.size(), 3u);
    EXPECT_EQ((*p)[i].labels[0], probs[i].argmax().item<int64_t>());
    EXPECT_NEAR((*p)[i].probabilities[0], probs[i].max().item<float>(), 1e-6);
    EXPECT_GE((*p)[i].probabilities[0], (*p)[i].probabilities[1]);
    EXPECT_GE((*p)[i].probabilities[1], (*p)[i].probabilities[2]);
  }
  // The head on the network's own features gives the same answer.
  const torch::Tensor f = (*model)->features(images).contiguous();
  Batch features;
  features.stage = Stage::kFeatures;
  features.n = 4;
  features.c = 128;
  features.h = features.w = 1;
  features.images.assign(f.data_ptr<float>(), f.data_ptr<float>() + f.numel());
  absl::StatusOr<std::vector<Prediction>> q = (*predictor)->Predict(features);
  ASSERT_TRUE(q.ok()) << q.status();
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ((*q)[i].labels, (*p)[i].labels);
    EXPECT_NEAR((*q)[i].probabilities[0], (*p)[i].probabilities[0], 1e-6);
  }
  // Features of another size, or a pixel batch, are refused by name.
  features.c = 64;
  features.images.resize(4 * 64);
  const absl::Status wrong = (*predictor)->Predict(features).status();
  EXPECT_EQ(wrong.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(wrong.message().find("128 features"), std::string::npos) << wrong;
  Batch pixels;
  pixels.stage = Stage::kFlipped;
  pixels.n = 1;
  EXPECT_EQ((*predictor)->Predict(pixels).status().code(), absl::StatusCode::kInvalidArgument);
  // More classes than the model has: all of them.
  absl::StatusOr<std::unique_ptr<Predictor>> all = Predictor::Load({path, 7});
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ((*all)->top_k(), 6);
  EXPECT_EQ(Predictor::Load({path, 0}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Predictor::Load({path + ".missing", 1}).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace sophon
