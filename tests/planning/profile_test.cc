#include "sophon/planning/profile.h"
#include "sophon/planning/resources.h"

#include <cmath>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/ops/fake_extractor.h"
#include "sophon/data/image_folder.h"
#include "sophon/planning/original_profile.h"
#include "sophon/planning/profile_csv.h"
#include "sophon/planning/profile_loader.h"
#include "sophon/profiling/profiler.h"
#include "sophon/planning/times_model.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

using ::testing::HasSubstr;

DatasetProfile SmallProfile() {
  DatasetProfile p;
  p.dataset = "my data%set";
  p.fingerprint = 0x0123456789abcdefULL;
  p.crop_size = 224;
  p.server_speed_factor = 1.25;
  for (uint64_t i = 0; i < 3; ++i) {
    SampleProfile s;
    s.id = i;
    s.bytes[Stage::kRaw] = 100000 + 17 * i;
    s.bytes[Stage::kCropped] = 150528;
    s.bytes[Stage::kFlipped] = 150528;
    s.bytes[Stage::kTensor] = 602112;
    s.bytes[Stage::kJpegCrop] = 61234 + 5 * i;
    s.client = testing::MakeOpTimes(0.00412345678 + i * 1e-4, 2.1e-5, 3.1e-4);
    s.client[Op::kJpegCrop] = 0.00123456789;
    s.client[Op::kDecodeJpegCrop] = 0.00345678912 + i * 1e-5;
    s.source_pixels = i == 1 ? 0 : 1024 * 768;
    s.width = i == 1 ? 0 : 1024;
    s.height = i == 1 ? 0 : 768;
    s.crop_part = i == 1 ? 0 : 0.123456 * (i + 1);
    s.crop_reach = i == 1 ? 0 : 0.25 * (i + 1);
    p.samples.push_back(s);
  }
  return p;
}

void ExpectSameProfile(const DatasetProfile& a, const DatasetProfile& b) {
  EXPECT_EQ(a.dataset, b.dataset);
  EXPECT_EQ(a.fingerprint, b.fingerprint);
  EXPECT_EQ(a.crop_size, b.crop_size);
  EXPECT_DOUBLE_EQ(a.server_speed_factor, b.server_speed_factor);
  EXPECT_EQ(a.times_source, b.times_source);
  EXPECT_EQ(a.stages, b.stages);
  ASSERT_EQ(a.samples.size(), b.samples.size());
  for (size_t i = 0; i < a.samples.size(); ++i) {
    const SampleProfile& x = a.samples[i];
    const SampleProfile& y = b.samples[i];
    EXPECT_EQ(x.id, y.id);
    EXPECT_EQ(x.bytes, y.bytes);
    EXPECT_EQ(x.source_pixels, y.source_pixels);
    EXPECT_EQ(x.width, y.width);
    EXPECT_EQ(x.height, y.height);
    EXPECT_NEAR(x.crop_part, y.crop_part, 1e-6);
    EXPECT_NEAR(x.crop_reach, y.crop_reach, 1e-6);
    // Written with 9 significant digits.
    for (const OpInfo& op : kOpTable) {
      EXPECT_NEAR(x.client[op.op], y.client[op.op], 1e-8 * x.client[op.op]) << op.name;
    }
  }
}

TEST(SophonProfileTest, RoundTripsThroughTheCsvFormat) {
  const DatasetProfile p = SmallProfile();
  const std::string path = testing::MakeTempDir("profile_rt") + "/p.csv";
  ASSERT_TRUE(WriteSophonProfile(p, path).ok());
  absl::StatusOr<DatasetProfile> back = ReadSophonProfile(path);
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSameProfile(p, *back);
}

TEST(SophonProfileTest, FeaturesRoundTripAndVersion2FilesHaveNone) {
  DatasetProfile p = SmallProfile();
  p.stages.Add(Stage::kFeatures);
  for (SampleProfile& s : p.samples) {
    s.bytes[Stage::kFeatures] = 1024;
    s.client[Op::kFeatures] = 0.25;
  }
  const std::string dir = testing::MakeTempDir("profile_features");
  ASSERT_TRUE(WriteSophonProfile(p, dir + "/p.csv").ok());
  absl::StatusOr<DatasetProfile> back = ReadSophonProfile(dir + "/p.csv");
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSameProfile(p, *back);
  EXPECT_TRUE(back->stages.Has(Stage::kFeatures));
  // Offered, its size must not be 0.
  p.samples[1].bytes[Stage::kFeatures] = 0;
  EXPECT_FALSE(p.Validate().ok());

  // A file of the previous version: no features columns, so no FEATURES.
  const std::string v2 =
      "# sophon-profile v2\n"
      "# dataset=d fingerprint=ff crop_size=224 server_speed=1 times=measured "
      "stages=raw,jpeg_crop,cropped,flipped,tensor\n"
      "id,raw_bytes,jpeg_crop_bytes,cropped_bytes,flipped_bytes,tensor_bytes,jpeg_crop_s,"
      "decode_jpeg_crop_s,decode_crop_s,flip_s,tensor_s,source_pixels\n"
      "0,10,5,20,20,80,0.05,0.09,0.1,0.01,0.02,100\n";
  absl::StatusOr<DatasetProfile> old = ParseSophonProfile(v2, "old.csv");
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_FALSE(old->stages.Has(Stage::kFeatures));
  EXPECT_EQ(old->samples[0].bytes[Stage::kTensor], 80u);
  EXPECT_EQ(old->samples[0].bytes[Stage::kFeatures], 0u);
  EXPECT_DOUBLE_EQ(old->samples[0].client[Op::kTensor], 0.02);
  EXPECT_EQ(old->samples[0].client[Op::kFeatures], 0.0);
  EXPECT_EQ(old->samples[0].source_pixels, 100u);
}

TEST(SophonProfileTest, PredictionsRoundTripAndVersion3FilesHaveNone) {
  DatasetProfile p = SmallProfile();
  p.stages.Add(Stage::kFeatures).Add(Stage::kPredictions);
  for (SampleProfile& s : p.samples) {
    s.bytes[Stage::kFeatures] = 1024;
    s.bytes[Stage::kPredictions] = 40;
    s.client[Op::kFeatures] = 0.25;
    s.client[Op::kPredict] = 0.001;
  }
  const std::string dir = testing::MakeTempDir("profile_predictions");
  ASSERT_TRUE(WriteSophonProfile(p, dir + "/p.csv").ok());
  const std::string text = testing::ReadFile(dir + "/p.csv");
  EXPECT_EQ(text.rfind("# sophon-profile v5\n", 0), 0u) << text.substr(0, 40);
  EXPECT_NE(text.find("predictions_bytes"), std::string::npos);
  EXPECT_NE(text.find("predict_s"), std::string::npos);
  absl::StatusOr<DatasetProfile> back = ReadSophonProfile(dir + "/p.csv");
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSameProfile(p, *back);
  EXPECT_TRUE(back->stages.Has(Stage::kPredictions));

  // A file of version 3: features but no predictions columns.
  const std::string v3 =
      "# sophon-profile v3\n"
      "# dataset=d fingerprint=ff crop_size=224 server_speed=1 times=measured "
      "stages=raw,jpeg_crop,cropped,flipped,tensor,features\n"
      "id,raw_bytes,jpeg_crop_bytes,cropped_bytes,flipped_bytes,tensor_bytes,features_bytes,"
      "jpeg_crop_s,decode_jpeg_crop_s,decode_crop_s,flip_s,tensor_s,features_s,source_pixels\n"
      "0,10,5,20,20,80,1024,0.05,0.09,0.1,0.01,0.02,0.3,100\n";
  absl::StatusOr<DatasetProfile> old = ParseSophonProfile(v3, "old.csv");
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_TRUE(old->stages.Has(Stage::kFeatures));
  EXPECT_FALSE(old->stages.Has(Stage::kPredictions));
  EXPECT_EQ(old->samples[0].bytes[Stage::kFeatures], 1024u);
  EXPECT_DOUBLE_EQ(old->samples[0].client[Op::kFeatures], 0.3);
  EXPECT_EQ(old->samples[0].bytes[Stage::kPredictions], 0u);
  EXPECT_EQ(old->samples[0].source_pixels, 100u);
  EXPECT_EQ(old->samples[0].width, 0u);  // sizes and crop parts came in version 5
  EXPECT_EQ(old->samples[0].crop_part, 0);
  // A version this build does not know is refused as such.
  const absl::Status v9 = ParseSophonProfile("# sophon-profile v9\n", "new.csv").status();
  EXPECT_TRUE(absl::IsFailedPrecondition(v9)) << v9;
  EXPECT_NE(v9.message().find("v2' to '# sophon-profile v5"), std::string::npos) << v9;
}

TEST(SophonProfileTest, FolderRefusesAProfileOfAnotherFileList) {
  const DatasetProfile p = SmallProfile();
  const std::string folder = testing::MakeTempDir("profile_folder") + "/profiles/ds";
  ASSERT_TRUE(SaveProfileFolder(p, folder).ok());
  absl::StatusOr<DatasetProfile> same = LoadProfileFolder(folder, p.fingerprint);
  ASSERT_TRUE(same.ok()) << same.status();
  ExpectSameProfile(p, *same);

  absl::StatusOr<DatasetProfile> other = LoadProfileFolder(folder, 0xfeedULL);
  EXPECT_EQ(other.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(other.status().message(), HasSubstr("0123456789abcdef"));
  EXPECT_THAT(other.status().message(), HasSubstr("000000000000feed"));

  EXPECT_EQ(LoadProfileFolder(folder + "/nothing", p.fingerprint).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(DefaultProfileFolder("imagenet"), "profiles/imagenet/");
}

TEST(SophonProfileTest, MeasuredProfileIsKeyedByTheDatasetFingerprint) {
  testing::TestDatasetOptions ds_options;
  ds_options.classes = 2;
  ds_options.per_class = 3;
  const std::string root = testing::MakeTestDataset("profile_measured", ds_options);
  absl::StatusOr<std::unique_ptr<ImageFolderSource>> ds = ImageFolderSource::Open(root);
  ASSERT_TRUE(ds.ok()) << ds.status();
  ProfilerOptions options;
  options.pipeline.augment.crop_size = 32;
  options.epochs = 2;
  absl::StatusOr<DatasetProfile> p = MeasureProfile(**ds, options);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->fingerprint, (*ds)->fingerprint());
  EXPECT_EQ(p->dataset, (*ds)->name());
  ASSERT_EQ(p->samples.size(), 6u);
  for (const SampleProfile& s : p->samples) {
    EXPECT_EQ(s.bytes[Stage::kRaw], (*ds)->entry(s.id).raw_size);
    EXPECT_EQ(s.bytes[Stage::kCropped], 32u * 32 * 3);
    EXPECT_EQ(s.bytes[Stage::kTensor], 32u * 32 * 3 * 4);
    EXPECT_GE(s.source_pixels, 160u * 160);
    EXPECT_GT(s.client[Op::kDecodeCrop], 0);
    EXPECT_EQ(s.bytes[Stage::kFeatures], 0u);  // no backbone: not measured
  }
  EXPECT_FALSE(p->stages.Has(Stage::kFeatures));
  // With a backbone, FEATURES is measured too.
  testing::FakeExtractor fake(10);
  ProfilerOptions with_backbone = options;
  with_backbone.pipeline.backbone = &fake;
  absl::StatusOr<DatasetProfile> f = MeasureProfile(**ds, with_backbone);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_TRUE(f->stages.Has(Stage::kFeatures));
  for (const SampleProfile& s : f->samples) EXPECT_EQ(s.bytes[Stage::kFeatures], 20u);
  const std::string folder = DefaultProfileFolder((*ds)->name());
  const std::string dir = testing::MakeTempDir("profile_measured_out") + "/" + folder;
  ASSERT_TRUE(SaveProfileFolder(*p, dir).ok());
  EXPECT_TRUE(LoadProfileFolder(dir, (*ds)->fingerprint()).ok());
  // Another file in the dataset: the profile no longer applies.
  testing::WriteFile(root + "/class_0/extra.jpg", "not even a jpeg");
  absl::StatusOr<std::unique_ptr<ImageFolderSource>> changed = ImageFolderSource::Open(root);
  ASSERT_TRUE(changed.ok());
  EXPECT_EQ(LoadProfileFolder(dir, (*changed)->fingerprint()).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // And the bad file fails profiling with its name.
  absl::StatusOr<DatasetProfile> bad = MeasureProfile(**changed, options);
  EXPECT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("extra.jpg"));
}

TEST(SophonProfileTest, MalformedLinesAreRejectedWithTheirLineNumber) {
  const std::string head =
      "# sophon-profile v2\n"
      "# dataset=d fingerprint=ff crop_size=224 server_speed=1 times=measured\n"
      "id,raw_bytes,jpeg_crop_bytes,cropped_bytes,flipped_bytes,tensor_bytes,jpeg_crop_s,"
      "decode_jpeg_crop_s,decode_crop_s,flip_s,tensor_s,source_pixels\n"
      "0,10,5,20,20,80,0.05,0.09,0.1,0.01,0.02,100\n";
  ASSERT_TRUE(ParseSophonProfile(head, "f.csv").ok());
  struct Case {
    std::string text;
    std::string where;
  };
  const Case cases[] = {
      {head + "1,10,5,20,20,eighty,0.05,0.09,0.1,0.01,0.02,100\n", "f.csv:5:"},  // not a number
      {head + "1,10,5,20,20,80,0.05,0.09,0.1,0.01\n", "f.csv:5:"},  // too few fields
      {head + "2,10,5,20,20,80,0.05,0.09,0.1,0.01,0.02,100\n", "f.csv:5:"},  // id out of sequence
      {head + "1,10,5,20,20,80,0.05,0.09,-0.1,0.01,0.02,100\n", "f.csv:5:"},  // negative time
      {head + "1,0,5,20,20,80,0.05,0.09,0.1,0.01,0.02,100\n", "f.csv:5:"},  // zero size
      {head.substr(0, head.find("id,")) + "# dataset=d fingerprint=ff crop_size=224 stages=raw,"
       "jpg\n", "f.csv:3:"},                                        // unknown stage
      {"id,raw\n", "f.csv:1:"},                                      // not a profile
      {"# sophon-profile v2\nid,raw_bytes\n", "f.csv:2:"},           // bad header
  };
  for (const Case& c : cases) {
    absl::StatusOr<DatasetProfile> p = ParseSophonProfile(c.text, "f.csv");
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(p.status().message(), HasSubstr(c.where)) << c.text;
  }
  // The metadata line is required before the column header.
  absl::StatusOr<DatasetProfile> no_meta = ParseSophonProfile(
      "# sophon-profile v2\nid,raw_bytes,jpeg_crop_bytes,cropped_bytes,flipped_bytes,"
      "tensor_bytes,jpeg_crop_s,decode_jpeg_crop_s,decode_crop_s,flip_s,tensor_s,"
      "source_pixels\n",
      "f.csv");
  EXPECT_THAT(no_meta.status().message(), HasSubstr("f.csv:2:"));
  // A profile of the format before the lossless crop is another version:
  // FailedPrecondition (smartoff profiles again), naming the line.
  absl::StatusOr<DatasetProfile> v1 = ParseSophonProfile("# sophon-profile v1\n", "f.csv");
  EXPECT_EQ(v1.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(v1.status().message(), HasSubstr("f.csv:1:"));
  // The stages line narrows what planners may choose; RAW stays required.
  absl::StatusOr<DatasetProfile> narrowed = ParseSophonProfile(
      "# sophon-profile v2\n"
      "# dataset=d fingerprint=ff crop_size=224 stages=raw,cropped,tensor\n" +
          head.substr(head.find("id,")),
      "f.csv");
  ASSERT_TRUE(narrowed.ok()) << narrowed.status();
  EXPECT_EQ(StageSetNames(narrowed->stages), "raw,cropped,tensor");
  EXPECT_FALSE(ParseSophonProfile("# sophon-profile v2\n"
                                  "# dataset=d fingerprint=ff crop_size=224 stages=cropped\n" +
                                      head.substr(head.find("id,")),
                                  "f.csv")
                   .ok());
}

constexpr char kSizes[] =
    "index;raw;decoding;original_shape;RandomResizedCrop;RandomHorizontalFlip;ToTensor;"
    "Normalize;\n"
    "0;462687;1886241;(1024, 614);150561;150561;602145;602145;\n"
    "1;95615;2359329;(1024, 768);150561;150561;602145;602145;\r\n"
    "\n";
constexpr char kTimes[] =
    "index,loader,decoding,RandomResizedCrop,RandomHorizontalFlip,ToTensor,Normalize,\n"
    "0,0.001,0.01,0.002,0.0001,0.0003,0.0004,\n"
    "1,0.002,0.02,0.004,0.0002,0.0006,0.0008,\n";

TEST(OriginalProfileTest, ParsesSizesWithTrailingSeparatorsAndShapes) {
  absl::StatusOr<DatasetProfile> p = ParseOriginalSizes(kSizes, "prep_sizes.csv", 0);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->crop_size, 224);  // inferred from 150561 = 224 * 224 * 3 + 33
  EXPECT_EQ(p->fingerprint, 0u);
  ASSERT_EQ(p->samples.size(), 2u);
  const SampleProfile& s = p->samples[1];
  EXPECT_EQ(s.id, 1u);
  EXPECT_EQ(s.bytes[Stage::kRaw], 95615u);
  EXPECT_EQ(s.bytes[Stage::kCropped], 150561u);
  EXPECT_EQ(s.bytes[Stage::kFlipped], 150561u);
  EXPECT_EQ(s.bytes[Stage::kTensor], 602145u);
  // The original system had no lossless crop: no plan may choose it.
  EXPECT_EQ(s.bytes[Stage::kJpegCrop], 95615u);
  EXPECT_FALSE(p->stages.Has(Stage::kJpegCrop));
  EXPECT_TRUE(p->stages.Has(Stage::kCropped));
  EXPECT_EQ(s.source_pixels, 1024u * 768u);
  EXPECT_EQ(p->samples[0].source_pixels, 1024u * 614u);
}

TEST(OriginalProfileTest, TimesMapOntoSophonOps) {
  absl::StatusOr<DatasetProfile> p = ParseOriginalSizes(kSizes, "prep_sizes.csv", 0);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(ParseOriginalTimes(kTimes, "prep_times.csv", &*p).ok());
  EXPECT_EQ(p->times_source, TimesSource::kMeasured);
  const OpTimes& t = p->samples[1].client;
  EXPECT_DOUBLE_EQ(t[Op::kDecodeCrop], 0.002 + 0.02 + 0.004);  // loader + decoding + crop
  EXPECT_DOUBLE_EQ(t[Op::kFlip], 0.0002);
  EXPECT_DOUBLE_EQ(t[Op::kTensor], 0.0006 + 0.0008);  // ToTensor + Normalize
}

TEST(OriginalProfileTest, MalformedLinesAreRejectedWithTheirLineNumber) {
  const std::string sizes_head =
      "index;raw;decoding;original_shape;RandomResizedCrop;RandomHorizontalFlip;ToTensor;"
      "Normalize;\n"
      "0;462687;1886241;(1024, 614);150561;150561;602145;602145;\n";
  const char* bad_sizes[] = {
      "1;462687;1886241;(1024 614);150561;150561;602145;602145;\n",   // shape
      "1;462687;1886241;(1024, 614);150561;150561;602145;\n",         // a field short
      "1;46x687;1886241;(1024, 614);150561;150561;602145;602145;\n",  // raw
      "5;462687;1886241;(1024, 614);150561;150561;602145;602145;\n",  // index
      "1,462687,1886241,(1024, 614),150561,150561,602145,602145,\n",  // separator
  };
  for (const char* row : bad_sizes) {
    absl::StatusOr<DatasetProfile> p = ParseOriginalSizes(sizes_head + row, "s.csv", 0);
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << row;
    EXPECT_THAT(p.status().message(), HasSubstr("s.csv:3:")) << row;
  }
  EXPECT_THAT(ParseOriginalSizes("index;raw;\n0;5;\n", "s.csv", 0).status().message(),
              HasSubstr("s.csv:1:"));

  const std::string times_head =
      "index,loader,decoding,RandomResizedCrop,RandomHorizontalFlip,ToTensor,Normalize,\n"
      "0,0.001,0.01,0.002,0.0001,0.0003,0.0004,\n";
  const char* bad_times[] = {
      "1,0.002,0.02,0.004,0.0002,0.0006,\n",          // a field short
      "1,0.002,0.02,fast,0.0002,0.0006,0.0008,\n",    // not a number
      "1,0.002,-0.02,0.004,0.0002,0.0006,0.0008,\n",  // negative
      "7,0.002,0.02,0.004,0.0002,0.0006,0.0008,\n",   // index
  };
  for (const char* row : bad_times) {
    absl::StatusOr<DatasetProfile> p = ParseOriginalSizes(kSizes, "s.csv", 0);
    ASSERT_TRUE(p.ok());
    absl::Status s = ParseOriginalTimes(times_head + row, "t.csv", &*p);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << row;
    EXPECT_THAT(s.message(), HasSubstr("t.csv:3:")) << row;
  }
  // One row fewer than the sizes file.
  absl::StatusOr<DatasetProfile> p = ParseOriginalSizes(kSizes, "s.csv", 0);
  ASSERT_TRUE(p.ok());
  EXPECT_THAT(ParseOriginalTimes(times_head, "t.csv", &*p).message(),
              HasSubstr("t.csv has 1 samples, the sizes file has 2"));
}

TEST(OriginalProfileTest, WithoutTimesTheModelFillsThem) {
  const std::string dir = testing::MakeTempDir("original_model");
  testing::WriteFile(dir + "/prep_sizes.csv", kSizes);
  OriginalProfileOptions options;
  options.sizes_path = dir + "/prep_sizes.csv";
  options.model.ops[Op::kDecodeCrop].s_per_raw_byte = 1e-8;
  options.model.ops[Op::kDecodeCrop].s_per_source_pixel = 2e-9;
  options.model.ops[Op::kDecodeCrop].s_fixed = 1e-4;
  options.model.ops[Op::kFlip].s_per_output_pixel = 1e-10;
  options.model.ops[Op::kTensor].s_per_output_pixel = 3e-9;
  absl::StatusOr<DatasetProfile> p = ReadOriginalProfile(options);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->times_source, TimesSource::kModel);
  EXPECT_EQ(p->dataset, std::filesystem::path(dir).filename().string());
  const OpTimes t = p->samples[0].client;
  EXPECT_DOUBLE_EQ(t[Op::kDecodeCrop], 1e-8 * 462687 + 2e-9 * 1024 * 614 + 1e-4);
  EXPECT_DOUBLE_EQ(t[Op::kFlip], 1e-10 * 224 * 224);
  EXPECT_DOUBLE_EQ(t[Op::kTensor], 3e-9 * 224 * 224);

  // The built-in model is a real calibration: every coefficient is set.
  const TimesModel d = DefaultTimesModel();
  EXPECT_TRUE(d.Validate().ok());
  EXPECT_GT(d.ops[Op::kDecodeCrop].s_per_raw_byte + d.ops[Op::kDecodeCrop].s_per_source_pixel,
            0);
  EXPECT_GT(d.ops[Op::kFlip].s_per_output_pixel, 0);
  EXPECT_GT(d.ops[Op::kTensor].s_per_output_pixel, 0);
}

TEST(OriginalProfileTest, ThePublishedOpenImagesProfileParses) {
  const std::string path =
      std::string(SOPHON_SOURCE_DIR) + "/../shared/profiles/openimages-sophon/prep_sizes.csv";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "not present: " << path;
  ProfileSource source;
  source.path = std::filesystem::path(path).parent_path().string();
  absl::StatusOr<DatasetProfile> p = LoadProfile(source);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->dataset, "openimages-sophon");
  EXPECT_EQ(p->crop_size, 224);
  EXPECT_EQ(p->times_source, TimesSource::kModel);  // its prep_times.csv was never published
  ASSERT_EQ(p->samples.size(), 40000u);
  EXPECT_EQ(p->samples[0].bytes[Stage::kRaw], 462687u);
  EXPECT_EQ(p->samples[0].source_pixels, 1024u * 614u);
  EXPECT_EQ(p->samples[0].bytes[Stage::kTensor], 602145u);
  EXPECT_EQ(p->samples[39999].bytes[Stage::kRaw], 579397u);
  EXPECT_GT(p->samples[39999].client[Op::kDecodeCrop], 0);
}

TEST(ProfileLoaderTest, FindsEitherFormatInAFolder) {
  const std::string dir = testing::MakeTempDir("loader_dispatch");
  testing::WriteFile(dir + "/prep_sizes.csv", kSizes);
  testing::WriteFile(dir + "/prep_times.csv", kTimes);
  ProfileSource source;
  source.path = dir;
  absl::StatusOr<DatasetProfile> original = LoadProfile(source);
  ASSERT_TRUE(original.ok()) << original.status();
  EXPECT_EQ(original->times_source, TimesSource::kMeasured);  // prep_times.csv beside it
  EXPECT_DOUBLE_EQ(original->samples[0].client[Op::kFlip], 0.0001);

  ASSERT_TRUE(SaveProfileFolder(SmallProfile(), dir).ok());
  absl::StatusOr<DatasetProfile> sophon = LoadProfile(source);  // sample_profile.csv wins
  ASSERT_TRUE(sophon.ok()) << sophon.status();
  EXPECT_EQ(sophon->samples.size(), 3u);

  source.times_path = dir + "/prep_times.csv";
  EXPECT_EQ(LoadProfile(source).status().code(), absl::StatusCode::kInvalidArgument);

  source.path = dir + "/missing";
  EXPECT_EQ(LoadProfile(source).status().code(), absl::StatusCode::kNotFound);
  source.path = testing::MakeTempDir("loader_empty");
  EXPECT_EQ(LoadProfile(source).status().code(), absl::StatusCode::kNotFound);
}

TEST(TimesModelTest, FitRecoversTheCoefficientsOfExactData) {
  TimesModel truth;
  truth.ops[Op::kDecodeCrop].s_per_raw_byte = 4e-9;
  truth.ops[Op::kDecodeCrop].s_per_source_pixel = 3e-9;
  truth.ops[Op::kDecodeCrop].s_fixed = 2e-4;
  truth.ops[Op::kFlip].s_per_output_pixel = 5e-10;
  truth.ops[Op::kTensor].s_per_output_pixel = 6e-9;
  DatasetProfile p;
  p.dataset = "fit";
  for (uint64_t i = 0; i < 50; ++i) {
    SampleProfile s;
    s.id = i;
    s.bytes[Stage::kRaw] = 20000 + (i * 7919) % 500000;
    s.source_pixels = 300000 + (i * 104729) % 900000;
    s.bytes[Stage::kCropped] = s.bytes[Stage::kFlipped] = 150528;
    s.bytes[Stage::kTensor] = 602112;
    s.client = PredictOpTimes(truth, s.bytes[Stage::kRaw], s.source_pixels, p.crop_size);
    p.samples.push_back(s);
  }
  absl::StatusOr<TimesModel> fit = FitTimesModel(p);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_NEAR(fit->ops[Op::kDecodeCrop].s_per_raw_byte, truth.ops[Op::kDecodeCrop].s_per_raw_byte, 1e-6 * truth.ops[Op::kDecodeCrop].s_per_raw_byte);
  EXPECT_NEAR(fit->ops[Op::kDecodeCrop].s_per_source_pixel, truth.ops[Op::kDecodeCrop].s_per_source_pixel, 1e-6 * truth.ops[Op::kDecodeCrop].s_per_source_pixel);
  EXPECT_NEAR(fit->ops[Op::kDecodeCrop].s_fixed, truth.ops[Op::kDecodeCrop].s_fixed, 1e-6 * truth.ops[Op::kDecodeCrop].s_fixed);
  EXPECT_NEAR(fit->ops[Op::kFlip].s_per_output_pixel, truth.ops[Op::kFlip].s_per_output_pixel, 1e-9 * truth.ops[Op::kFlip].s_per_output_pixel);
  EXPECT_NEAR(fit->ops[Op::kTensor].s_per_output_pixel, truth.ops[Op::kTensor].s_per_output_pixel, 1e-9 * truth.ops[Op::kTensor].s_per_output_pixel);

  // A term that would come out negative is dropped, not returned negative.
  for (SampleProfile& s : p.samples) {
    s.client[Op::kDecodeCrop] = 1e-3 - 1e-10 * static_cast<double>(s.bytes[Stage::kRaw]);
  }
  fit = FitTimesModel(p);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_TRUE(fit->Validate().ok());

  p.samples.resize(2);
  EXPECT_EQ(FitTimesModel(p).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(ResourcesTest, ValidateNamesTheOption) {
  Resources r;
  r.net_bytes_per_s = MbitToBytesPerSecond(500);
  EXPECT_DOUBLE_EQ(r.net_bytes_per_s, 62.5e6);
  EXPECT_TRUE(r.Validate().ok());
  Resources bad = r;
  bad.net_bytes_per_s = 0;
  EXPECT_THAT(bad.Validate().message(), HasSubstr("Resources.net_bytes_per_s"));
  bad = r;
  bad.remote_cpus = -1;
  EXPECT_THAT(bad.Validate().message(), HasSubstr("Resources.remote_cpus"));
  bad = r;
  bad.local_cpus = 0;
  EXPECT_THAT(bad.Validate().message(), HasSubstr("Resources.local_cpus"));
  bad = r;
  bad.batch_size = 0;
  EXPECT_THAT(bad.Validate().message(), HasSubstr("Resources.batch_size"));
  r.remote_cpus = 0;  // allowed: the storage node then only sends RAW
  EXPECT_TRUE(r.Validate().ok());
}

TEST(DatasetProfileTest, ValidateNamesTheSample) {
  DatasetProfile p = SmallProfile();
  EXPECT_TRUE(p.Validate().ok());
  p.samples[2].client[Op::kFlip] = std::nan("");
  EXPECT_THAT(p.Validate().message(), HasSubstr("sample 2"));
  p = SmallProfile();
  p.samples[1].id = 5;
  EXPECT_THAT(p.Validate().message(), HasSubstr("has id 5"));
}

// Each epoch draws its crops again: the sizes a profile measured are one draw.
TEST(ExpectedJpegCropsTest, CropsTakeTheDatasetsRatioAndDeclinedFilesStayWhole) {
  DatasetProfile profile;
  profile.stages = StageSet::All();
  const uint64_t raw[] = {100000, 200000, 50000};
  const uint64_t crop[] = {10000, 90000, 50000};  // the last was declined: sent whole
  for (uint64_t id = 0; id < 3; ++id) {
    SampleProfile s;
    s.id = id;
    s.bytes[kFirstStage] = raw[id];
    s.bytes[Stage::kJpegCrop] = crop[id];
    s.client[Op::kDecodeCrop] = 0.004;
    s.client[Op::kDecodeJpegCrop] = id == 0 ? 0.001 : 0.003;
    profile.samples.push_back(s);
  }
  UseExpectedJpegCrops(&profile);
  // (10000 + 90000) / (100000 + 200000) of each file.
  EXPECT_EQ(profile.samples[0].bytes[Stage::kJpegCrop], 33333u);
  EXPECT_EQ(profile.samples[1].bytes[Stage::kJpegCrop], 66667u);
  EXPECT_EQ(profile.samples[2].bytes[Stage::kJpegCrop], 50000u);
  // (0.001 + 0.003) / (0.004 + 0.004) of each decode.
  EXPECT_DOUBLE_EQ(profile.samples[0].client[Op::kDecodeJpegCrop], 0.002);
  EXPECT_DOUBLE_EQ(profile.samples[1].client[Op::kDecodeJpegCrop], 0.002);
  EXPECT_DOUBLE_EQ(profile.samples[2].client[Op::kDecodeJpegCrop], 0.003);
  // The total is what the profiled epoch measured.
  EXPECT_NEAR(static_cast<double>(profile.samples[0].bytes[Stage::kJpegCrop] +
                                  profile.samples[1].bytes[Stage::kJpegCrop]),
              100000.0, 1.0);
}

// A profile whose op times grow with the file and with the part of it the crop kept.
DatasetProfile CropDependentProfile(int n) {
  DatasetProfile profile;
  profile.stages = StageSet::All();
  for (int i = 0; i < n; ++i) {
    SampleProfile s;
    s.id = static_cast<uint64_t>(i);
    const double raw = i % 2 == 0 ? 100000 : 200000;
    const double area = 0.1 + 0.8 * ((i * 7) % n) / n;  // crops of every size, either file
    s.bytes[kFirstStage] = static_cast<uint64_t>(raw);
    s.bytes[Stage::kJpegCrop] = static_cast<uint64_t>(raw * area);
    s.client[Op::kJpegCrop] = 0.002 + 1e-8 * raw + 3e-8 * raw * area;
    s.client[Op::kDecodeCrop] = 0.001 + 2e-8 * raw + 1e-8 * raw * area;
    s.client[Op::kDecodeJpegCrop] = 0.0005 + 4e-8 * raw * area;
    profile.samples.push_back(s);
  }
  return profile;
}

// The profiled epoch's crops make some samples look cheap: every epoch draws new ones.
TEST(ExpectedJpegCropsTest, CropDependentTimesTakeTheAverageCropOfTheirFileSize) {
  DatasetProfile profile = CropDependentProfile(40);
  double mean_area = 0;
  for (const SampleProfile& s : profile.samples) {
    mean_area += static_cast<double>(s.bytes[Stage::kJpegCrop]) / s.bytes[kFirstStage];
  }
  mean_area /= 40;
  UseExpectedJpegCrops(&profile);
  for (const SampleProfile& s : profile.samples) {
    const double raw = static_cast<double>(s.bytes[kFirstStage]);
    SCOPED_TRACE(::testing::Message() << "sample " << s.id);
    EXPECT_NEAR(s.client[Op::kJpegCrop], 0.002 + 1e-8 * raw + 3e-8 * raw * mean_area, 1e-9);
    EXPECT_NEAR(s.client[Op::kDecodeCrop], 0.001 + 2e-8 * raw + 1e-8 * raw * mean_area, 1e-9);
    EXPECT_NEAR(s.client[Op::kDecodeJpegCrop], 0.0005 + 4e-8 * raw * mean_area, 1e-9);
  }
  // Two files of one size cost the same whatever crop the profile drew for them.
  EXPECT_NEAR(profile.samples[0].client[Op::kDecodeCrop],
              profile.samples[2].client[Op::kDecodeCrop], 1e-12);
  EXPECT_LT(profile.samples[0].client[Op::kDecodeCrop],
            profile.samples[1].client[Op::kDecodeCrop]);
}

TEST(ExpectedJpegCropsTest, FilesOfOneSizeGetTheirMeanTime) {
  DatasetProfile profile = CropDependentProfile(40);
  double mean = 0;
  for (SampleProfile& s : profile.samples) {
    const double area = static_cast<double>(s.bytes[Stage::kJpegCrop]) / s.bytes[kFirstStage];
    s.bytes[kFirstStage] = 100000;
    s.bytes[Stage::kJpegCrop] = static_cast<uint64_t>(100000 * area);
    s.client[Op::kDecodeCrop] = 0.002 + 0.004 * area;
    mean += s.client[Op::kDecodeCrop] / 40;
  }
  UseExpectedJpegCrops(&profile);  // no size term to fit: a singular fit
  for (const SampleProfile& s : profile.samples) {
    EXPECT_NEAR(s.client[Op::kDecodeCrop], mean, 1e-6) << "sample " << s.id;
  }
}

TEST(ExpectedJpegCropsTest, AProfileWithoutTheLosslessCropIsLeftAlone) {
  DatasetProfile profile;
  profile.stages = StageSet::All();
  profile.stages.Remove(Stage::kJpegCrop);
  SampleProfile s;
  s.bytes[kFirstStage] = 1000;
  s.bytes[Stage::kJpegCrop] = 10;
  profile.samples.push_back(s);
  UseExpectedJpegCrops(&profile);
  EXPECT_EQ(profile.samples[0].bytes[Stage::kJpegCrop], 10u);
}

}  // namespace
}  // namespace sophon
