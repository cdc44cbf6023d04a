// Tests of the LibTorch trainer through its torch-free interface (trainer.h).
#include "client/train/trainer.h"

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sophon/data/batch.h"
#include "sophon/image/image_ops.h"
#include "tests/client/torch/noise_batch.h"

namespace sophon {
namespace {

using ::testing::HasSubstr;

// One intra-op thread: on a small, busy machine LibTorch's OpenMP threads
// spin-wait on each other and run several times slower than one thread.
TrainerOptions CpuOptions(const std::string& arch, int num_classes) {
  TrainerOptions options;
  options.arch = arch;
  options.num_classes = num_classes;
  options.device = "cpu";
  options.seed = 1;
  options.threads = 1;
  return options;
}

using testing::NoiseBatch;

// A learnable problem: the class is the (constant) colour of the image, plus
// per-pixel noise.
Batch ColourBatch(int n, int side, std::mt19937_64& rng) {
  static constexpr float kColours[4][3] = {{1, -1, -1}, {-1, 1, -1}, {-1, -1, 1}, {1, 1, -1}};
  std::uniform_int_distribution<int> pick(0, 3);
  std::normal_distribution<float> noise(0.0f, 0.5f);
  Batch batch;
  batch.n = n;
  batch.h = side;
  batch.w = side;
  const size_t plane = static_cast<size_t>(side) * side;
  batch.images.resize(n * 3 * plane);
  for (int i = 0; i < n; ++i) {
    const int label = pick(rng);
    batch.labels.push_back(label);
    for (int c = 0; c < 3; ++c) {
      float* out = &batch.images[(i * 3 + c) * plane];
      for (size_t p = 0; p < plane; ++p) out[p] = kColours[label][c] + noise(rng);
    }
  }
  return batch;
}

TEST(TrainerTest, UnknownArchIsRejected) {
  auto trainer = Trainer::Create(CpuOptions("vgg11", 10));
  ASSERT_FALSE(trainer.ok());
  EXPECT_EQ(trainer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(trainer.status().message(), HasSubstr("vgg11"));
  EXPECT_THAT(trainer.status().message(), HasSubstr("alexnet, resnet18, resnet50, tinycnn, tinymlp"));
}

TEST(TrainerTest, BadOptionsAreRejected) {
  TrainerOptions no_classes = CpuOptions("tinycnn", 0);
  EXPECT_EQ(Trainer::Create(no_classes).status().code(), absl::StatusCode::kInvalidArgument);

  TrainerOptions bad_device = CpuOptions("tinycnn", 4);
  bad_device.device = "tpu";
  auto trainer = Trainer::Create(bad_device);
  EXPECT_EQ(trainer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(trainer.status().message(), HasSubstr("tpu"));

  TrainerOptions bad_lr = CpuOptions("tinycnn", 4);
  bad_lr.models[0].lr = 0;
  EXPECT_EQ(Trainer::Create(bad_lr).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TrainerTest, CudaWithoutGpuIsFailedPrecondition) {
  TrainerOptions options = CpuOptions("tinycnn", 4);
  options.device = "cuda";
  auto trainer = Trainer::Create(options);
  if (trainer.ok()) GTEST_SKIP() << "CUDA is available here; runs on " << (*trainer)->DeviceName();
  EXPECT_EQ(trainer.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(trainer.status().message(), HasSubstr("TrainerOptions.device is cuda"));
}

class EachArchTest : public ::testing::TestWithParam<std::string> {};

TEST_P(EachArchTest, BuildsStepsAndEvaluates) {
  constexpr int kClasses = 10;
  auto trainer = Trainer::Create(CpuOptions(GetParam(), kClasses));
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  EXPECT_EQ((*trainer)->DeviceName(), "cpu");
  const Batch batch = NoiseBatch(/*n=*/2, /*side=*/64, kClasses, /*seed=*/3);

  auto step = (*trainer)->Step(batch);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_TRUE(std::isfinite(step->loss)) << step->loss;
  EXPECT_GT(step->loss, 0);
  EXPECT_EQ(step->count, 2);
  EXPECT_GE(step->correct, 0);
  EXPECT_LE(step->correct, 2);

  auto eval = (*trainer)->Evaluate(batch);
  ASSERT_TRUE(eval.ok()) << eval.status();
  EXPECT_TRUE(std::isfinite(eval->loss)) << eval->loss;
  EXPECT_EQ(eval->count, 2);
}

INSTANTIATE_TEST_SUITE_P(Archs, EachArchTest,
                         ::testing::Values("alexnet", "resnet18", "resnet50", "tinycnn", "tinymlp"),
                         [](const auto& info) { return info.param; });

TEST(TrainerTest, LossGoesDownOnColourProblem) {
  TrainerOptions options = CpuOptions("tinycnn", 4);
  options.models[0].lr = 0.05;
  auto trainer = Trainer::Create(options);
  ASSERT_TRUE(trainer.ok()) << trainer.status();

  constexpr int kSteps = 20;
  std::mt19937_64 rng(5);
  std::vector<double> losses;
  int64_t last_correct = 0;  // over the last five steps, 160 samples
  for (int i = 0; i < kSteps; ++i) {
    Batch batch = ColourBatch(/*n=*/32, /*side=*/32, rng);
    batch.index = i;
    auto step = (*trainer)->Step(batch);
    ASSERT_TRUE(step.ok()) << step.status();
    ASSERT_TRUE(std::isfinite(step->loss)) << "step " << i;
    losses.push_back(step->loss);
    if (i >= kSteps - 5) last_correct += step->correct;
  }
  double last = 0;
  for (int i = kSteps - 5; i < kSteps; ++i) last += losses[i] / 5;
  EXPECT_LT(last, 0.5 * losses[0]) << "first " << losses[0] << ", last five " << last;
  EXPECT_GE(last_correct, 120) << "of 160";

  // Held-out samples are classified better than chance (8 of 32) in eval
  // mode too. The bar is low: BN running statistics lag after few steps.
  auto eval = (*trainer)->Evaluate(ColourBatch(/*n=*/32, /*side=*/32, rng));
  ASSERT_TRUE(eval.ok()) << eval.status();
  EXPECT_TRUE(std::isfinite(eval->loss));
  EXPECT_GE(eval->correct, 16) << "of 32";
}

TEST(TrainerTest, SubmittedStepsTrainAsSteps) {
  // On the CPU a submitted step is done when Submit returns: its own result
  // comes back at once, and the training is Step's.
  TrainerOptions options = CpuOptions("tinycnn", 4);
  options.steps_in_flight = 2;
  auto stepped = Trainer::Create(options);
  auto submitted = Trainer::Create(options);
  ASSERT_TRUE(stepped.ok()) << stepped.status();
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  std::mt19937_64 rng(11);
  for (int i = 0; i < 4; ++i) {
    Batch batch = ColourBatch(/*n=*/8, /*side=*/32, rng);
    batch.index = i;
    auto step = (*stepped)->Step(batch);
    auto results = (*submitted)->Submit(batch);
    ASSERT_TRUE(step.ok()) << step.status();
    ASSERT_TRUE(results.ok()) << results.status();
    ASSERT_EQ(results->size(), 1u) << "step " << i;
    EXPECT_EQ((*results)[0].count, 8);
    EXPECT_NEAR((*results)[0].loss, step->loss, 1e-6) << "step " << i;
    EXPECT_EQ((*results)[0].correct, step->correct) << "step " << i;
  }
  auto drained = (*submitted)->Drain();
  ASSERT_TRUE(drained.ok()) << drained.status();
  EXPECT_TRUE(drained->empty());
  // Nothing is queued: Step may follow, and so may trial steps.
  const Batch batch = ColourBatch(/*n=*/8, /*side=*/32, rng);
  auto a = (*stepped)->Step(batch);
  auto b = (*submitted)->Step(batch);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NEAR(a->loss, b->loss, 1e-6);
  EXPECT_TRUE((*submitted)->TrialSteps(batch, 1).ok());
  // An invalid batch is refused at submit, naming it.
  Batch bad = batch;
  bad.labels.pop_back();
  bad.index = 42;
  auto refused = (*submitted)->Submit(bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("42"));
}

TEST(TrainerTest, SameSeedSameModel) {
  const Batch batch = NoiseBatch(/*n=*/4, /*side=*/32, /*num_classes=*/4, /*seed=*/9);
  auto first_loss = [&batch](uint64_t seed) {
    TrainerOptions options = CpuOptions("tinycnn", 4);
    options.seed = seed;
    auto trainer = Trainer::Create(options);
    EXPECT_TRUE(trainer.ok()) << trainer.status();
    auto eval = (*trainer)->Evaluate(batch);
    EXPECT_TRUE(eval.ok()) << eval.status();
    return eval->loss;
  };
  EXPECT_NEAR(first_loss(7), first_loss(7), 1e-9);
  EXPECT_NE(first_loss(7), first_loss(8));
}

TEST(TrainerTest, InvalidBatchesAreRejected) {
  constexpr int kClasses = 4;
  auto trainer = Trainer::Create(CpuOptions("tinycnn", kClasses));
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  const Batch good = NoiseBatch(/*n=*/2, /*side=*/32, kClasses, /*seed=*/1);
  ASSERT_TRUE((*trainer)->Step(good).ok());

  auto expect_rejected = [&](const Batch& batch, const std::string& why) {
    auto step = (*trainer)->Step(batch);
    EXPECT_EQ(step.status().code(), absl::StatusCode::kInvalidArgument) << why;
    EXPECT_THAT(step.status().message(), HasSubstr(why));
    auto eval = (*trainer)->Evaluate(batch);
    EXPECT_EQ(eval.status().code(), absl::StatusCode::kInvalidArgument) << why;
  };

  Batch empty = good;
  empty.n = 0;
  expect_rejected(empty, "n must be > 0");

  Batch short_images = good;
  short_images.images.pop_back();
  expect_rejected(short_images, "images holds");

  Batch wrong_shape = good;
  wrong_shape.h = 64;  // buffer is for 32x32
  expect_rejected(wrong_shape, "images holds");

  Batch short_labels = good;
  short_labels.labels.pop_back();
  expect_rejected(short_labels, "labels holds");

  Batch label_too_big = good;
  label_too_big.labels[1] = kClasses;
  expect_rejected(label_too_big, "label 4 of position 1 (sample id 1)");

  Batch negative_label = good;
  negative_label.labels[0] = -1;
  expect_rejected(negative_label, "label -1");

  Batch gray = good;
  gray.c = 1;
  expect_rejected(gray, "3-channel");

  Batch tiny = NoiseBatch(/*n=*/2, /*side=*/16, kClasses, /*seed=*/1);
  expect_rejected(tiny, "at least 32x32");
}

// The losses of `steps` training steps on `batch` by a new trainer.
std::vector<double> StepLosses(const TrainerOptions& options, const Batch& batch, int steps) {
  auto trainer = Trainer::Create(options);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  std::vector<double> out;
  for (int step = 0; trainer.ok() && step < steps; ++step) {
    auto result = (*trainer)->Step(batch);
    EXPECT_TRUE(result.ok()) << result.status();
    out.push_back(result.ok() ? result->loss : -1);
  }
  out.resize(steps, -1);
  return out;
}

// Four random 32 x 32 uint8 crops at `stage` (FLIPPED, or CROPPED with
// `flips`), labels 0..3.
Batch RandomCrops(Stage stage, uint64_t seed, std::vector<uint8_t> flips = {}) {
  const int n = 4, side = 32;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  Batch crops;
  crops.n = n;
  crops.h = side;
  crops.w = side;
  crops.stage = stage;
  crops.pixels.resize(static_cast<size_t>(n) * side * side * 3);
  for (uint8_t& p : crops.pixels) p = static_cast<uint8_t>(byte(rng));
  crops.flips = std::move(flips);
  crops.labels = {0, 1, 2, 3};
  return crops;
}

// The TENSOR batch the CPU pipeline makes of `crops`, each sample mirrored
// where `mirror` says.
Batch CpuTensors(const Batch& crops, const std::vector<bool>& mirror) {
  Batch tensors = crops;
  tensors.stage = Stage::kTensor;
  tensors.pixels.clear();
  tensors.flips.clear();
  tensors.images.resize(static_cast<size_t>(crops.n) * 3 * crops.h * crops.w);
  const size_t per = static_cast<size_t>(crops.h) * crops.w;
  for (int i = 0; i < crops.n; ++i) {
    ToTensorNormalize(crops.pixels.data() + i * per * 3, crops.h, crops.w,
                      tensors.images.data() + i * per * 3, mirror[i]);
  }
  return tensors;
}

// A FLIPPED batch of uint8 crops, normalised on the device, trains exactly
// as the TENSOR batch the CPU pipeline makes of the same crops.
TEST(TrainerTest, Uint8CropsNormalisedOnTheDeviceTrainAsCpuTensors) {
  const Batch crops = RandomCrops(Stage::kFlipped, 3);
  const Batch tensors = CpuTensors(crops, {false, false, false, false});
  const TrainerOptions options = CpuOptions("tinycnn", 4);
  const std::vector<double> from_crops = StepLosses(options, crops, 3);
  const std::vector<double> from_tensors = StepLosses(options, tensors, 3);
  for (int step = 0; step < 3; ++step) {
    EXPECT_NEAR(from_crops[step], from_tensors[step], 1e-6) << "step " << step;
  }
  Batch short_pixels = crops;
  short_pixels.pixels.pop_back();
  auto trainer = Trainer::Create(CpuOptions("tinycnn", 4));
  ASSERT_TRUE(trainer.ok());
  EXPECT_THAT((*trainer)->Step(short_pixels).status().message(), HasSubstr("pixels holds"));
  Batch cropped = crops;
  cropped.stage = Stage::kCropped;
  EXPECT_THAT((*trainer)->Step(cropped).status().message(),
              HasSubstr("needs a flip flag per sample: flips holds 0, expected n = 4"));
  Batch decoded = crops;
  decoded.stage = Stage::kRaw;
  EXPECT_THAT((*trainer)->Step(decoded).status().message(),
              HasSubstr("TENSOR, CROPPED or FLIPPED"));
}

// A CROPPED batch is flipped on the device where its flags say, then
// normalised: it trains exactly as the TENSOR batch of the same crops
// mirrored on the CPU.
TEST(TrainerTest, CropsFlippedOnTheDeviceTrainAsCpuTensors) {
  const Batch crops = RandomCrops(Stage::kCropped, 4, {1, 0, 0, 1});
  const Batch tensors = CpuTensors(crops, {true, false, false, true});
  const TrainerOptions options = CpuOptions("tinycnn", 4);
  const std::vector<double> from_crops = StepLosses(options, crops, 3);
  const std::vector<double> from_tensors = StepLosses(options, tensors, 3);
  // Without the flips the losses differ: the test sees them.
  const Batch unflipped = CpuTensors(crops, {false, false, false, false});
  const std::vector<double> from_unflipped = StepLosses(options, unflipped, 3);
  for (int step = 0; step < 3; ++step) {
    EXPECT_NEAR(from_crops[step], from_tensors[step], 1e-6) << "step " << step;
  }
  EXPECT_GT(std::abs(from_unflipped[2] - from_tensors[2]), 1e-6);
}

// bf16 autocast on the CPU trains (the loss falls as in float32); fp16,
// which LibTorch autocasts on cuda only, is refused on the CPU by name.
TEST(TrainerTest, Bf16AutocastTrainsAndFp16IsRefusedOnCpu) {
  TrainerOptions options = CpuOptions("tinycnn", 4);
  options.models[0].lr = 0.05;
  options.amp = "bf16";
  auto trainer = Trainer::Create(options);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  std::mt19937_64 rng(5);
  std::vector<double> losses;
  for (int i = 0; i < 20; ++i) {
    Batch batch = ColourBatch(/*n=*/32, /*side=*/32, rng);
    batch.index = i;
    auto step = (*trainer)->Step(batch);
    ASSERT_TRUE(step.ok()) << step.status();
    ASSERT_TRUE(std::isfinite(step->loss)) << "step " << i;
    losses.push_back(step->loss);
  }
  double last = 0;
  for (int i = 15; i < 20; ++i) last += losses[i] / 5;
  EXPECT_LT(last, 0.5 * losses[0]) << "first " << losses[0] << ", last five " << last;
  options.amp = "fp16";
  auto refused = Trainer::Create(options);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(),
              HasSubstr("TrainerOptions.amp fp16 needs a cuda device"));
  EXPECT_THAT(refused.status().message(), HasSubstr("use bf16 on cpu"));
  options.amp = "fp8";
  EXPECT_THAT(Trainer::Create(options).status().message(), HasSubstr("TrainerOptions.amp must be"));
}

// Channels-last weights and batches give the losses of the NCHW layout.
TEST(TrainerTest, ChannelsLastTrainsAsNchw) {
  const Batch batch = NoiseBatch(/*n=*/8, /*side=*/32, /*num_classes=*/4, /*seed=*/2);
  TrainerOptions options = CpuOptions("tinycnn", 4);
  const std::vector<double> nchw = StepLosses(options, batch, 3);
  options.channels_last = true;
  const std::vector<double> nhwc = StepLosses(options, batch, 3);
  for (int step = 0; step < 3; ++step) EXPECT_NEAR(nhwc[step], nchw[step], 1e-4) << step;
}

}  // namespace
}  // namespace sophon
