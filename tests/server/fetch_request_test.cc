#include "server/fetch_request.h"

#include <memory>

#include "gtest/gtest.h"
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
  EXPECT_TRUE(c->samples[0].error.ok());
  EXPECT_EQ(c->samples[0].bytes, static_cast<int64_t>(source_->entry(0).raw_size));
  EXPECT_EQ(c->samples[1].error.code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(c->samples[2].error.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(c->samples[3].error.ok());
  EXPECT_EQ(c->samples[3].bytes, 64 * 64 * 3 * 4);
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
  EXPECT_EQ(CheckFetchRequest(zero_crop, *source_, options_, &limit).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(limit, Limit::kInvalidRequest);
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
  EXPECT_EQ(c->samples[0].error.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(c->samples[0].error.message().find("max_stream_inflight_bytes"), std::string::npos);
  EXPECT_TRUE(c->samples[1].error.ok());
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

}  // namespace
}  // namespace sophon
