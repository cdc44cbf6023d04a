#include "sophon/cli/cli.h"

#include "gtest/gtest.h"

namespace sophon {
namespace {

TEST(NormalizeFlagNamesTest, DashesInNamesOnly) {
  const char* argv[] = {"prog", "--prep-workers=4", "--data=/a-b/c-d", "-log-level", "debug",
                        "--", "--not-a-flag"};
  std::vector<std::string> out = NormalizeFlagNames(7, const_cast<char**>(argv));
  EXPECT_EQ(out[0], "prog");
  EXPECT_EQ(out[1], "--prep_workers=4");
  EXPECT_EQ(out[2], "--data=/a-b/c-d");
  EXPECT_EQ(out[3], "-log_level");
  EXPECT_EQ(out[4], "debug");
  EXPECT_EQ(out[6], "--not-a-flag");
  ArgvHolder holder(7, const_cast<char**>(argv));
  EXPECT_EQ(holder.argc(), 7);
  EXPECT_STREQ(holder.argv()[1], "--prep_workers=4");
  EXPECT_EQ(holder.argv()[7], nullptr);
}

TEST(CommaListTest, ParsesTrimsAndConverts) {
  CommaList list;
  std::string error;
  ASSERT_TRUE(AbslParseFlag(" 50, 100,,2000 ", &list, &error));
  EXPECT_EQ(list.items, (std::vector<std::string>{"50", "100", "2000"}));
  EXPECT_EQ(AbslUnparseFlag(list), "50,100,2000");
  EXPECT_EQ(*list.Numbers("--x"), (std::vector<double>{50, 100, 2000}));
  EXPECT_EQ(*list.PositiveInts("--x"), (std::vector<int>{50, 100, 2000}));
  ASSERT_TRUE(AbslParseFlag("1,-2", &list, &error));
  EXPECT_EQ(list.PositiveInts("--sizes").status().message(),
            "--sizes: '-2' is not a positive integer");
  ASSERT_TRUE(AbslParseFlag("1,x", &list, &error));
  EXPECT_NE(list.Numbers("--bw").status().message().find("'x' is not a number"),
            std::string::npos);
  ASSERT_TRUE(AbslParseFlag("", &list, &error));
  EXPECT_EQ(list.Numbers("--bw").status().message(), "--bw: give at least one value");
}

TEST(CommaListTest, PerModelValues) {
  CommaList one({"0.1"});
  EXPECT_EQ(*one.PerModel("--lr", 0, "--fused-models"), (std::vector<double>{0.1}));
  EXPECT_EQ(*one.PerModel("--lr", 3, "--fused-models"), (std::vector<double>{0.1, 0.1, 0.1}));
  CommaList three({"0.1", "0.05", "1e-3"});
  EXPECT_EQ(*three.PerModel("--lr", 3, "--fused-models"),
            (std::vector<double>{0.1, 0.05, 1e-3}));
  EXPECT_EQ(three.PerModel("--lr", 4, "--fused-models").status().message(),
            "--lr has 3 values but --fused-models=4: give one value for all 4 models, or one "
            "per model");
  EXPECT_EQ(three.PerModel("--lr", 0, "--fused-models").status().message(),
            "--lr has 3 values, one per model: train 3 models with --fused-models=3, or give "
            "one value");
  EXPECT_EQ(three.PerModel("--lr", 1, "--fused-models").status().code(),
            absl::StatusCode::kInvalidArgument);
  CommaList bad({"0.1", "fast"});
  EXPECT_EQ(bad.PerModel("--momentum", 2, "--fused-models").status().message(),
            "--momentum: 'fast' is not a number");
  EXPECT_FALSE(CommaList({"inf"}).PerModel("--lr", 1, "--fused-models").ok());
  EXPECT_FALSE(CommaList().PerModel("--lr", 2, "--fused-models").ok());
}

TEST(ParseRangeTest, TwoNumbersOrAnErrorNamingTheFlag) {
  double lo = 0, hi = 0;
  ASSERT_TRUE(ParseRange("scale", "0.08, 1.0", &lo, &hi).ok());
  EXPECT_DOUBLE_EQ(lo, 0.08);
  EXPECT_DOUBLE_EQ(hi, 1.0);
  const absl::Status bad = ParseRange("ratio", "3/4", &lo, &hi);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("--ratio must be MIN,MAX"), std::string::npos);
}

TEST(FlagErrorTest, PrefixesTheFlag) {
  EXPECT_EQ(FlagError("--mode", absl::InvalidArgumentError("unknown mode 'x'")).message(),
            "--mode: unknown mode 'x'");
  EXPECT_EQ(FailProgram("prog", absl::InvalidArgumentError("LoaderOptions.batch_size bad"),
                        {{"LoaderOptions.batch_size", "--batch-size"}}),
            2);
  EXPECT_EQ(FailProgram("prog", absl::UnavailableError("server gone"), {}), 1);
}

}  // namespace
}  // namespace sophon
