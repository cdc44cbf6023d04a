#include "sophon/net/wire.h"

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

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

TEST(WireTest, FeatureVectorsCrossAsFp16WithTheirLength) {
  StageData d;
  d.stage = Stage::kFeatures;
  d.height = 1;
  d.width = 5;
  d.data.assign(10, 'y');
  v1::Sample sample;
  sample.set_id(3);
  StageDataToProto(d, &sample);
  EXPECT_EQ(sample.stage(), v1::STAGE_FEATURES);
  EXPECT_EQ(sample.dtype(), v1::DTYPE_FLOAT16);
  ASSERT_EQ(sample.shape_size(), 1);
  EXPECT_EQ(sample.shape(0), 5u);
  v1::Sample copy = sample;
  absl::StatusOr<StageData> back = StageDataFromProto(&copy);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->height, 1);
  EXPECT_EQ(back->width, 5);
  EXPECT_EQ(back->data, d.data);
  // A length that does not match the bytes, a zero length, or a huge one.
  for (uint32_t length : {4u, 0u, (1u << 20) + 1}) {
    v1::Sample bad = sample;
    bad.set_shape(0, length);
    const absl::Status s = StageDataFromProto(&bad).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << length;
    EXPECT_NE(s.message().find("sample 3 (features)"), std::string::npos) << s;
  }
  v1::Sample float32 = sample;
  float32.set_dtype(v1::DTYPE_FLOAT32);
  EXPECT_EQ(StageDataFromProto(&float32).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(WireTest, PredictionsCrossAsFloat32PairsAndRequestsCarryTopK) {
  StageData d;
  d.stage = Stage::kPredictions;
  d.height = 1;
  d.width = 4;  // two (class, probability) pairs
  const float pairs[] = {2, 0.75f, 0, 0.25f};
  d.data.assign(reinterpret_cast<const char*>(pairs), sizeof(pairs));
  v1::Sample sample;
  StageDataToProto(d, &sample);
  EXPECT_EQ(sample.stage(), v1::STAGE_PREDICTIONS);
  EXPECT_EQ(sample.dtype(), v1::DTYPE_FLOAT32);
  absl::StatusOr<StageData> back = StageDataFromProto(&sample);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->width, 4);
  EXPECT_EQ(back->data, d.data);

  PipelineOptions pipeline;
  pipeline.top_k = 7;
  FetchRequestBuilder builder(1, 2, pipeline);
  builder.Add(5, Stage::kPredictions);
  const v1::FetchRequest request = builder.Take();
  EXPECT_EQ(request.top_k(), 7u);
  EXPECT_EQ(request.samples(0).target_stage(), v1::STAGE_PREDICTIONS);
  // The next message carries it too.
  builder.Add(6, Stage::kPredictions);
  EXPECT_EQ(builder.Take().top_k(), 7u);
}

TEST(WireTest, AugmentConfigIsValidated) {
  AugmentOptions o;
  o.crop_size = 96;
  absl::StatusOr<AugmentOptions> back = FromProto(ToProto(o));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->crop_size, 96);
  EXPECT_EQ(back->eval_resize, 0);
  v1::AugmentConfig bad = ToProto(o);
  bad.set_scale_min(2.0);
  EXPECT_FALSE(FromProto(bad).ok());
  // The evaluation transform crosses the wire; a resize smaller than the crop
  // (or absurdly large, from a hostile client) is refused.
  o.eval_resize = 110;
  back = FromProto(ToProto(o));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->eval_resize, 110);
  bad = ToProto(o);
  bad.set_eval_resize(50);
  EXPECT_FALSE(FromProto(bad).ok());
  bad.set_eval_resize(4000000000u);
  EXPECT_FALSE(FromProto(bad).ok());
  // The value sent is the value reported, not what an int could hold of it.
  bad.set_eval_resize(4294967295u);
  absl::StatusOr<AugmentOptions> huge = FromProto(bad);
  EXPECT_NE(huge.status().message().find("got 4294967295"), std::string::npos) << huge.status();
  bad = ToProto(o);
  bad.set_crop_size(3000000000u);
  huge = FromProto(bad);
  EXPECT_NE(huge.status().message().find("got 3000000000"), std::string::npos) << huge.status();
}

TEST(WireTest, SampleStatusRoundTrips) {
  v1::Sample s;
  EXPECT_TRUE(SampleStatus(s).ok());
  SetSampleStatus(absl::InvalidArgumentError("sample 3 (a/b.jpg): invalid JPEG"), &s);
  EXPECT_EQ(SampleStatus(s).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SampleStatus(s).message(), "sample 3 (a/b.jpg): invalid JPEG");
}

// Wire values are not pipeline positions (JPEG_CROP is 1 in the pipeline, 4
// on the wire): every stage survives the wire both ways, and a JPEG region
// keeps where it lies.
TEST(WireTest, EveryStageCrossesTheWireAsItsOwnValue) {
  bool some_differ = false;
  for (Stage stage : AllStages()) {
    absl::StatusOr<Stage> back = StageFromProto(StageToProto(stage));
    ASSERT_TRUE(back.ok()) << StageName(stage);
    EXPECT_EQ(*back, stage);
    some_differ |= static_cast<int>(StageToProto(stage)) != StageIndex(stage);
  }
  EXPECT_TRUE(some_differ) << "the test no longer tells wire values from pipeline positions";
  StageData region;
  region.stage = Stage::kJpegCrop;
  region.data = "\xff\xd8 a region \xff\xd9";
  region.height = 768;
  region.width = 1024;
  region.region_top = 48;
  region.region_left = 320;
  v1::Sample sample;
  StageDataToProto(region, &sample);
  EXPECT_EQ(sample.stage(), v1::STAGE_JPEG_CROP);
  absl::StatusOr<StageData> got = StageDataFromProto(&sample);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->stage, Stage::kJpegCrop);
  EXPECT_EQ(got->data, region.data);
  EXPECT_EQ(got->height, 768);
  EXPECT_EQ(got->width, 1024);
  EXPECT_EQ(got->region_top, 48);
  EXPECT_EQ(got->region_left, 320);
  // A region outside its image, or none, is refused.
  StageDataToProto(region, &sample);
  sample.mutable_region()->set_top(768);
  EXPECT_FALSE(StageDataFromProto(&sample).ok());
  StageDataToProto(region, &sample);
  sample.clear_region();
  EXPECT_FALSE(StageDataFromProto(&sample).ok());
}

// The trial that found two direct casts between the pipeline's Stage and the
// wire enum: no source file converts between them except through the table
// (StageToProto / StageFromProto in src/net/wire.cc). A cast of an integer
// literal (a deliberately invalid wire value in a test) is allowed.
TEST(WireTest, NoSourceCastsBetweenPipelineStagesAndWireValues) {
  namespace fs = std::filesystem;
  const std::regex to_wire(R"(static_cast<\s*(sophon::)?v1::Stage\s*>\s*\(\s*[^0-9\s])");
  const std::regex from_wire(R"(static_cast<\s*(sophon::)?Stage\s*>\s*\([^)]*stage\(\))");
  std::vector<std::string> found;
  int files = 0;
  for (const char* dir : {"src", "server", "client", "tools", "tests", "fuzz"}) {
    const fs::path root = fs::path(SOPHON_SOURCE_DIR) / dir;
    if (!fs::exists(root)) continue;
    for (const fs::directory_entry& e : fs::recursive_directory_iterator(root)) {
      const std::string ext = e.path().extension().string();
      if (!e.is_regular_file() || (ext != ".cc" && ext != ".h")) continue;
      if (e.path().filename() == "wire.cc" || e.path().filename() == "wire_test.cc") continue;
      ++files;
      std::ifstream in(e.path());
      std::string line;
      for (int n = 1; std::getline(in, line); ++n) {
        if (std::regex_search(line, to_wire) || std::regex_search(line, from_wire)) {
          found.push_back(e.path().string() + ":" + std::to_string(n) + ": " + line);
        }
      }
    }
  }
  EXPECT_GT(files, 100);
  for (const std::string& f : found) ADD_FAILURE() << "convert through StageToProto: " << f;
}

}  // namespace
}  // namespace sophon
