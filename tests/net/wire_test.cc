#include "sophon/net/wire.h"

#include "gtest/gtest.h"

namespace sophon {
namespace {

TEST(WireTest, StageDataRoundTrips) {
  for (Stage stage : {Stage::kRaw, Stage::kCropped, Stage::kFlipped, Stage::kTensor}) {
    StageData d;
    d.stage = stage;
    if (stage != Stage::kRaw) d.height = d.width = 4;
    d.data.assign(stage == Stage::kRaw ? 10 : StagePayloadBytes(stage, 4), 'x');
    v1::Sample sample;
    StageDataToProto(d, &sample);
    absl::StatusOr<StageData> back = StageDataFromProto(&sample);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->stage, stage);
    EXPECT_EQ(back->height, d.height);
    EXPECT_EQ(back->data, d.data);
  }
}

TEST(WireTest, RejectsPayloadThatDoesNotMatchItsShape) {
  StageData d;
  d.stage = Stage::kTensor;
  d.height = d.width = 4;
  d.data.assign(StagePayloadBytes(Stage::kTensor, 4), 'x');
  v1::Sample sample;
  sample.set_id(17);
  StageDataToProto(d, &sample);
  sample.mutable_payload()->pop_back();
  absl::Status s = StageDataFromProto(&sample).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("sample 17"), std::string::npos);
}

TEST(WireTest, AugmentConfigIsValidated) {
  AugmentOptions o;
  o.crop_size = 96;
  absl::StatusOr<AugmentOptions> back = FromProto(ToProto(o));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->crop_size, 96);
  v1::AugmentConfig bad = ToProto(o);
  bad.set_scale_min(2.0);
  EXPECT_FALSE(FromProto(bad).ok());
}

TEST(WireTest, SampleStatusRoundTrips) {
  v1::Sample s;
  EXPECT_TRUE(SampleStatus(s).ok());
  SetSampleStatus(absl::InvalidArgumentError("sample 3 (a/b.jpg): invalid JPEG"), &s);
  EXPECT_EQ(SampleStatus(s).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SampleStatus(s).message(), "sample 3 (a/b.jpg): invalid JPEG");
}

}  // namespace
}  // namespace sophon
