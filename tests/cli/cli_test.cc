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

}  // namespace
}  // namespace sophon
