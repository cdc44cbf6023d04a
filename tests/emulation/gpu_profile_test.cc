#include "sophon/emulation/gpu_profile.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

using ::testing::HasSubstr;

constexpr char kSophonCsv[] =
    "# a comment line\n"
    "gpu_type,model,batch_size,copy_seconds_per_batch,compute_seconds_per_batch,source\n"
    "V100,ResNet50,128,0.0128,0.35,\"estimate, from 367 img/s\"\n"
    "v100,resnet50,64,0.0064,0.175,measured\n"
    "\n"
    "a100,alexnet,256,0.006,0.04,\"quoted \"\"name\"\"\"\n";

TEST(GpuProfileTest, ParsesSophonFormatWithQuotesAndComments) {
  absl::StatusOr<GpuProfile> p = GpuProfile::Parse(kSophonCsv, "starter.csv");
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->rows().size(), 3u);
  const GpuProfileRow& r = p->rows()[0];
  EXPECT_EQ(r.gpu_type, "V100");
  EXPECT_EQ(r.model, "ResNet50");
  EXPECT_EQ(r.batch_size, 128);
  EXPECT_DOUBLE_EQ(r.copy_seconds, 0.0128);
  EXPECT_DOUBLE_EQ(r.compute_seconds, 0.35);
  EXPECT_EQ(r.source, "estimate, from 367 img/s");
  EXPECT_EQ(r.origin, "starter.csv:3");
  EXPECT_EQ(p->rows()[2].source, "quoted \"name\"");
  EXPECT_EQ(p->rows()[2].origin, "starter.csv:6");
}

TEST(GpuProfileTest, ParsesOriginalEmulatorFormatWithNotAvailableRows) {
  const std::string text =
      "v100\t16GB\talexnet\t256\t224\t4000\t0.010\t0.080\t5005\t50.05\t400.4\t\n"
      "v100\t16GB\tresnet50\t512\t224\tN/A\tN/A\tN/A\t2503\tN/A\tN/A\tout of memory\n"
      "v100\t16GB\tresnet50\t256\t224\t15000\t0.012\t0.66\t5005\t60.06\t3303.3\tok\n";
  absl::StatusOr<GpuProfile> p = GpuProfile::Parse(text, "emulator.tsv");
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->rows().size(), 3u);
  EXPECT_EQ(p->rows()[0].model, "alexnet");
  EXPECT_EQ(p->rows()[0].batch_size, 256);
  EXPECT_DOUBLE_EQ(p->rows()[0].copy_seconds, 0.010);
  EXPECT_DOUBLE_EQ(p->rows()[0].compute_seconds, 0.080);
  EXPECT_TRUE(p->rows()[0].fits);
  EXPECT_FALSE(p->rows()[1].fits);
  EXPECT_THAT(p->rows()[1].source, HasSubstr("out of memory"));

  absl::StatusOr<GpuStepTime> ok = p->Lookup("V100", "ResNet50", 256);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_DOUBLE_EQ(ok->compute_seconds, 0.66);
  absl::StatusOr<GpuStepTime> too_big = p->Lookup("v100", "resnet50", 512);
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(too_big.status().message(), HasSubstr("does not fit"));
  // Larger than a batch that did not fit: does not fit either.
  EXPECT_EQ(p->Lookup("v100", "resnet50", 1024).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(GpuProfileTest, MalformedRowsAreRejectedWithFileAndLine) {
  const std::string header = std::string(kGpuProfileHeader) + "\n";
  struct Case {
    std::string text;
    std::string where;
    std::string what;
  };
  const Case cases[] = {
      {header + "v100,resnet50,64,0.1,0.2,ok\nv100,resnet50,128,0.1\n", "p.csv:3:", "6"},
      {header + "v100,resnet50,0,0.1,0.2,x\n", "p.csv:2:", "batch size"},
      {header + "v100,resnet50,64,-1,0.2,x\n", "p.csv:2:", "copy_seconds_per_batch"},
      {header + "v100,resnet50,64,0.1,abc,x\n", "p.csv:2:", "compute_seconds_per_batch"},
      {header + "v100,resnet50,64,0.1,nan,x\n", "p.csv:2:", "compute_seconds_per_batch"},
      {header + "v100,resnet50,64,0.1,0.2,\"open\n", "p.csv:2:", "quote"},
      {header + "v100,,64,0.1,0.2,x\n", "p.csv:2:", "empty"},
      {header + "\n\nv100,resnet50,64,0.1,0.2,a\nV100,ResNet50,64,0.3,0.4,b\n",
       "p.csv:5:", "duplicate"},
      {"v100\t16GB\talexnet\t256\t224\n", "p.csv:1:", "12"},
      {"v100\t16GB\talexnet\tlots\t224\t1\t0.1\t0.2\t1\t1\t1\t\n", "p.csv:1:", "batch size"},
      {"gpu,model,batch\n", "p.csv:1:", "not a GPU profile"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<GpuProfile> p = GpuProfile::Parse(c.text, "p.csv");
    ASSERT_FALSE(p.ok()) << c.text;
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(p.status().message(), HasSubstr(c.where)) << c.text;
    EXPECT_THAT(p.status().message(), HasSubstr(c.what)) << c.text;
  }
}

TEST(GpuProfileTest, LookupIsCaseInsensitive) {
  absl::StatusOr<GpuProfile> p = GpuProfile::Parse(kSophonCsv, "starter.csv");
  ASSERT_TRUE(p.ok()) << p.status();
  for (const auto& [gpu, model] : {std::pair{"v100", "resnet50"}, std::pair{"V100", "RESNET50"},
                                   std::pair{"v100", "ResNet50"}}) {
    absl::StatusOr<GpuStepTime> t = p->Lookup(gpu, model, 128);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_FALSE(t->scaled);
    EXPECT_DOUBLE_EQ(t->compute_seconds, 0.35);
    EXPECT_DOUBLE_EQ(t->copy_seconds, 0.0128);
  }
}

TEST(GpuProfileTest, MissingBatchSizeScalesLinearlyFromTheNearestRow) {
  absl::StatusOr<GpuProfile> p = GpuProfile::Parse(kSophonCsv, "starter.csv");
  ASSERT_TRUE(p.ok()) << p.status();
  // 80 is nearest to 64: times x 80/64.
  absl::StatusOr<GpuStepTime> t = p->Lookup("v100", "resnet50", 80);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->scaled);
  EXPECT_EQ(t->row.batch_size, 64);
  EXPECT_DOUBLE_EQ(t->compute_seconds, 0.175 * 80 / 64);
  EXPECT_DOUBLE_EQ(t->copy_seconds, 0.0064 * 80 / 64);
  EXPECT_THAT(t->note, HasSubstr("scaled linearly from batch 64"));
  // 512 is nearest to 128: x4.
  t = p->Lookup("v100", "resnet50", 512);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->row.batch_size, 128);
  EXPECT_DOUBLE_EQ(t->compute_seconds, 0.35 * 4);
  // A tie (96 is 32 from both) goes to the larger batch.
  t = p->Lookup("v100", "resnet50", 96);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->row.batch_size, 128);
  EXPECT_DOUBLE_EQ(t->compute_seconds, 0.35 * 96 / 128);
}

TEST(GpuProfileTest, UnknownGpuOrModelIsNotFoundAndListsWhatExists) {
  absl::StatusOr<GpuProfile> p = GpuProfile::Parse(kSophonCsv, "starter.csv");
  ASSERT_TRUE(p.ok()) << p.status();
  absl::StatusOr<GpuStepTime> t = p->Lookup("h100", "resnet50", 64);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(t.status().message(), HasSubstr("a100, v100"));
  t = p->Lookup("a100", "resnet50", 64);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(t.status().message(), HasSubstr("alexnet"));
  EXPECT_EQ(p->Lookup("v100", "resnet50", 0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(GpuProfileTest, WrittenCsvParsesBackAndLaterFilesOverride) {
  absl::StatusOr<GpuProfile> p = GpuProfile::Parse(kSophonCsv, "starter.csv");
  ASSERT_TRUE(p.ok()) << p.status();
  const std::string csv = FormatGpuProfileCsv(p->rows());
  absl::StatusOr<GpuProfile> back = GpuProfile::Parse(csv, "written.csv");
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << csv;
  ASSERT_EQ(back->rows().size(), p->rows().size());
  for (size_t i = 0; i < back->rows().size(); ++i) {
    EXPECT_EQ(back->rows()[i].source, p->rows()[i].source);
    EXPECT_DOUBLE_EQ(back->rows()[i].compute_seconds, p->rows()[i].compute_seconds);
  }

  const std::string dir = testing::MakeTempDir("gpu_profile_files");
  testing::WriteFile(dir + "/a.csv", kSophonCsv);
  testing::WriteFile(dir + "/b.csv",
                     std::string(kGpuProfileHeader) + "\nv100,RESNET50,64,0.001,0.1,mine\n");
  absl::StatusOr<GpuProfile> all = GpuProfile::LoadAll({dir + "/a.csv", dir + "/b.csv"});
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->rows().size(), 3u);
  absl::StatusOr<GpuStepTime> t = all->Lookup("v100", "resnet50", 64);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_DOUBLE_EQ(t->compute_seconds, 0.1);
  EXPECT_EQ(t->row.source, "mine");
  EXPECT_EQ(GpuProfile::Load(dir + "/missing.csv").status().code(), absl::StatusCode::kNotFound);
}

TEST(GpuProfileTest, ShippedStarterProfileParsesAndCoversTheModels) {
  absl::StatusOr<GpuProfile> p =
      GpuProfile::Load(std::string(SOPHON_SOURCE_DIR) + "/profiles/gpu/starter.csv");
  ASSERT_TRUE(p.ok()) << p.status();
  for (const char* gpu : {"v100", "a100"}) {
    for (const char* model : {"alexnet", "resnet18", "resnet50"}) {
      for (int batch : {64, 128, 256}) {
        absl::StatusOr<GpuStepTime> t = p->Lookup(gpu, model, batch);
        ASSERT_TRUE(t.ok()) << gpu << " " << model << " " << batch << ": " << t.status();
        EXPECT_FALSE(t->scaled) << gpu << " " << model << " " << batch;
        EXPECT_GT(t->compute_seconds, 0);
        EXPECT_FALSE(t->row.source.empty());
      }
    }
  }
}

}  // namespace
}  // namespace sophon
