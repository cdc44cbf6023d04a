#include "server/fetch_request.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/ops/fake_extractor.h"
#include "sophon/data/image_folder.h"
#include "sophon/net/wire.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

class FetchRequestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::TestDatasetOptions d;
    d.classes = 1;
    d.per_class = 3;
    auto source = ImageFolderSource::Open(testing::MakeTestDataset("fetch_request", d));
    ASSERT_TRUE(source.ok()) << source.status();
    source_ = *std::move(source);
  }
  v1::FetchRequest Request(int crop) {
    v1::FetchRequest r;
    AugmentOptions aug;
    aug.crop_size = crop;
    *r.mutable_augment() = ToProto(aug);
    return r;
  }
  std::unique_ptr<ImageFolderSource> source_;
  ServiceOptions options_;
};

TEST_F(FetchRequestTest, GarbageAndOversizedMessagesAreRefusedNamingWhy) {
  v1::FetchRequest r;
  Limit limit;
  absl::Status s = ParseFetchRequest(std::string("\x22\xff\xff", 3), options_, &r, &limit);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(limit, Limit::kInvalidRequest);
  options_.max_request_bytes = 64;
  s = ParseFetchRequest(std::string(65, '\0'), options_, &r, &limit);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(limit, Limit::kMaxRequestBytes);
  EXPECT_STREQ(LimitName(limit), "max_request_bytes");
}

TEST_F(FetchRequestTest, PerSampleProblemsDoNotRefuseTheMessage) {
  v1::FetchRequest r = Request(64);
  r.add_samples()->set_id(0);
  r.add_samples()->set_id(99);
  v1::SampleRequest* bad_stage = r.add_samples();
  bad_stage->set_id(1);
  bad_stage->set_target_stage(static_cast<v1::Stage>(42));
  v1::SampleRequest* tensor = r.add_samples();
  tensor->set_id(2);
  tensor->set_target_stage(v1::STAGE_TENSOR);
  Limit limit;
  absl::StatusOr<CheckedRequest> c = CheckFetchRequest(r, *source_, options_, &limit);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->samples.size(), 4u);
  EXPECT_EQ(c->samples[0].refusal, SampleRefusal::kNone);
  EXPECT_EQ(c->samples[0].bytes, static_cast<int64_t>(source_->entry(0).raw_size));
  EXPECT_EQ(SampleError(c->samples[1], *source_, options_).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(SampleError(c->samples[2], *source_, options_).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c->samples[3].refusal, SampleRefusal::kNone);
  EXPECT_EQ(c->samples[3].bytes, 64 * 64 * 3 * 4);
}

TEST_F(FetchRequestTest, FeaturesNeedABackboneAndReserveItsVector) {
  v1::FetchRequest r = Request(64);
  v1::SampleRequest* features = r.add_samples();
  features->set_id(1);
  features->set_target_stage(v1::STAGE_FEATURES);
  Limit limit;
  absl::StatusOr<CheckedRequest> none = CheckFetchRequest(r, *source_, options_, &limit);
  ASSERT_TRUE(none.ok()) << none.status();
  ASSERT_EQ(none->samples[0].refusal, SampleRefusal::kNoBackbone);
  const absl::Status error = SampleError(none->samples[0], *source_, options_);
  EXPECT_EQ(error.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(error.message().find("sample 1: stage features needs a backbone"), std::string::npos)
      << error;

  options_.backbone = std::make_shared<testing::FakeExtractor>(512);
  absl::StatusOr<CheckedRequest> with = CheckFetchRequest(r, *source_, options_, &limit);
  ASSERT_TRUE(with.ok()) << with.status();
  EXPECT_EQ(with->samples[0].refusal, SampleRefusal::kNone);
  EXPECT_EQ(with->samples[0].bytes, 512 * 2);  // fp16
  EXPECT_EQ(with->pipeline->backbone, options_.backbone.get());
}

TEST_F(FetchRequestTest, PredictionsNeedAModelAndReserveTheirPairs) {
  v1::FetchRequest r = Request(64);
  v1::SampleRequest* predictions = r.add_samples();
  predictions->set_id(2);
  predictions->set_target_stage(v1::STAGE_PREDICTIONS);
  Limit limit;
  absl::StatusOr<CheckedRequest> none = CheckFetchRequest(r, *source_, options_, &limit);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->samples[0].refusal, SampleRefusal::kNoBackbone);

  options_.backbone = std::make_shared<testing::FakeExtractor>(512, 1, /*classes=*/10);
  // top_k unset: the default, 5 pairs of 2 floats.
  absl::StatusOr<CheckedRequest> with = CheckFetchRequest(r, *source_, options_, &limit);
  ASSERT_TRUE(with.ok()) << with.status();
  EXPECT_EQ(with->samples[0].refusal, SampleRefusal::kNone);
  EXPECT_EQ(with->samples[0].bytes, 5 * 2 * 4);
  // Asked for 3; asked for more than the model's 10 classes: 10.
  r.set_top_k(3);
  with = CheckFetchRequest(r, *source_, options_, &limit);
  ASSERT_TRUE(with.ok()) << with.status();
  EXPECT_EQ(with->pipeline->top_k, 3);
  EXPECT_EQ(with->samples[0].bytes, 3 * 2 * 4);
  r.set_top_k(1000);
  with = CheckFetchRequest(r, *source_, options_, &limit);
  ASSERT_TRUE(with.ok()) << with.status();
  EXPECT_EQ(with->samples[0].bytes, 10 * 2 * 4);
  // A top_k past what a payload may hold refuses the message.
  r.set_top_k(kMaxTopK + 1);
  const absl::Status big = CheckFetchRequest(r, *source_, options_, &limit).status();
  EXPECT_EQ(big.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(limit, Limit::kInvalidRequest);
  EXPECT_NE(big.message().find("top_k"), std::string::npos) << big;
}

TEST_F(FetchRequestTest, WholeMessageLimits) {
  options_.max_crop_size = 128;
  options_.max_ids_per_request = 2;
  Limit limit;
  v1::FetchRequest big_crop = Request(129);
  EXPECT_EQ(CheckFetchRequest(big_crop, *source_, options_, &limit).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(limit, Limit::kMaxCropSize);
  v1::FetchRequest many = Request(64);
  for (int i = 0; i < 3; ++i) many.add_samples()->set_id(0);
  EXPECT_EQ(CheckFetchRequest(many, *source_, options_, &limit).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(limit, Limit::kMaxIdsPerRequest);
  v1::FetchRequest zero_crop = Request(0);
  const absl::Status zero = CheckFetchRequest(zero_crop, *source_, options_, &limit).status();
  EXPECT_EQ(zero.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(limit, Limit::kInvalidRequest);
  // The range named is the server's, not the library's.
  EXPECT_NE(zero.message().find("[1, 128]"), std::string::npos) << zero;
}

TEST_F(FetchRequestTest, ASampleLargerThanAStreamMayHoldFailsAlone) {
  options_.max_stream_inflight_bytes = 64 * 64 * 3 * 4 - 1;
  v1::FetchRequest r = Request(64);
  v1::SampleRequest* t = r.add_samples();
  t->set_id(0);
  t->set_target_stage(v1::STAGE_TENSOR);
  r.add_samples()->set_id(1);  // RAW, small
  Limit limit;
  absl::StatusOr<CheckedRequest> c = CheckFetchRequest(r, *source_, options_, &limit);
  ASSERT_TRUE(c.ok());
  const absl::Status error = SampleError(c->samples[0], *source_, options_);
  EXPECT_EQ(error.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(error.message().find("max_stream_inflight_bytes"), std::string::npos) << error;
  EXPECT_EQ(c->samples[1].refusal, SampleRefusal::kNone);
}

TEST(ServiceOptionsTest, ValidateNamesTheField) {
  ServiceOptions o;
  EXPECT_TRUE(o.Validate().ok());
  o.max_streams_per_peer = 0;
  EXPECT_NE(o.Validate().message().find("ServiceOptions.max_streams_per_peer"), std::string::npos);
  o = ServiceOptions();
  o.max_stream_inflight_bytes = o.inflight_budget_bytes + 1;
  EXPECT_NE(o.Validate().message().find("ServiceOptions.max_stream_inflight_bytes"),
            std::string::npos);
  o = ServiceOptions();
  o.idle_stream_timeout = absl::ZeroDuration();
  EXPECT_NE(o.Validate().message().find("ServiceOptions.idle_stream_timeout"), std::string::npos);
}

// The seed corpus of the request fuzzer (fuzz/corpus/request). A seed's name
// starts with what CheckFetchRequest makes of it under the default options:
// ok (accepted; per-sample errors allowed), invalid or exhausted (refused).
// Regenerate the checked-in corpus with
//   SOPHON_FUZZ_CORPUS_OUT=fuzz/corpus/request build/fetch_request_test
struct Seed {
  std::string name;
  std::string bytes;
};

std::vector<Seed> MakeRequestSeeds() {
  std::vector<Seed> seeds;
  auto add = [&](const std::string& name, const v1::FetchRequest& r) {
    seeds.push_back({name, r.SerializeAsString()});
  };
  auto request = [](int crop, std::vector<std::pair<uint64_t, v1::Stage>> samples) {
    v1::FetchRequest r;
    AugmentOptions aug;
    aug.crop_size = crop;
    *r.mutable_augment() = ToProto(aug);
    r.set_seed(7);
    r.set_epoch(1);
    for (auto [id, stage] : samples) {
      v1::SampleRequest* s = r.add_samples();
      s->set_id(id);
      s->set_target_stage(stage);
    }
    return r;
  };
  add("ok-raw", request(32, {{0, v1::STAGE_RAW}, {1, v1::STAGE_RAW}}));
  add("ok-every-stage", request(16, {{0, v1::STAGE_RAW}, {1, v1::STAGE_CROPPED},
                                     {2, v1::STAGE_FLIPPED}, {0, v1::STAGE_TENSOR}}));
  add("ok-out-of-range-and-bad-stage",
      request(32, {{1000000, v1::STAGE_TENSOR}, {1, static_cast<v1::Stage>(9)}}));
  v1::FetchRequest huge_ratio = request(24, {{0, v1::STAGE_TENSOR}, {1, v1::STAGE_CROPPED}});
  huge_ratio.mutable_augment()->set_ratio_min(1e-300);
  huge_ratio.mutable_augment()->set_ratio_max(1e92);
  add("ok-huge-ratio", huge_ratio);
  add("invalid-zero-crop", request(0, {{0, v1::STAGE_CROPPED}}));
  add("invalid-crop-over-limit", request(4096, {{0, v1::STAGE_TENSOR}}));
  v1::FetchRequest bad_scale = request(32, {{0, v1::STAGE_CROPPED}});
  bad_scale.mutable_augment()->set_scale_min(2.0);
  add("invalid-scale", bad_scale);
  std::vector<std::pair<uint64_t, v1::Stage>> many(5000, {0, v1::STAGE_RAW});
  add("exhausted-too-many-ids", request(32, many));
  seeds.push_back({"invalid-garbage", std::string("\x22\xff\xff\xff\x0f", 5)});
  return seeds;
}

absl::StatusCode SeedOutcome(const std::string& bytes, const SampleSource& source) {
  ServiceOptions options;
  v1::FetchRequest r;
  Limit limit;
  absl::Status s = ParseFetchRequest(bytes, options, &r, &limit);
  if (s.ok()) s = CheckFetchRequest(r, source, options, &limit).status();
  return s.code();
}

absl::StatusCode ExpectedOutcome(const std::string& name) {
  const std::string status = name.substr(0, name.find('-'));
  if (status == "ok") return absl::StatusCode::kOk;
  if (status == "exhausted") return absl::StatusCode::kResourceExhausted;
  return absl::StatusCode::kInvalidArgument;
}

TEST_F(FetchRequestTest, SeedsAreCheckedAsTheirNamesSay) {
  const char* out = std::getenv("SOPHON_FUZZ_CORPUS_OUT");
  for (const Seed& seed : MakeRequestSeeds()) {
    EXPECT_EQ(SeedOutcome(seed.bytes, *source_), ExpectedOutcome(seed.name)) << seed.name;
    if (out != nullptr) testing::WriteFile(std::string(out) + "/" + seed.name, seed.bytes);
  }
}

TEST_F(FetchRequestTest, CheckedInSeedsAreCheckedAsTheirNamesSay) {
  const std::filesystem::path dir =
      std::filesystem::path(SOPHON_SOURCE_DIR) / "fuzz/corpus/request";
  int seeds = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    EXPECT_EQ(SeedOutcome(testing::ReadFile(entry.path().string()), *source_),
              ExpectedOutcome(name))
        << name;
    ++seeds;
  }
  EXPECT_GE(seeds, 8);
}

}  // namespace
}  // namespace sophon
