#include "client/loader/server_list.h"

#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

TEST(ServerListTest, ParsesCommaListsAndRefusesBadOrRepeatedItems) {
  absl::StatusOr<std::vector<std::string>> list = ParseServerList("a:1, b:2 ,10.0.0.1:50051");
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(*list, (std::vector<std::string>{"a:1", "b:2", "10.0.0.1:50051"}));
  for (const char* bad : {"", "a:1,,b:2", "a", "a:0", "a:99999", ":5"}) {
    EXPECT_FALSE(ParseServerList(bad).ok()) << bad;
  }
  absl::StatusOr<std::vector<std::string>> twice = ParseServerList("a:1,b:2,a:1");
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("a:1 is listed twice"), std::string::npos);
}

TEST(ServerListTest, ReadsAFileSkippingCommentsAndNamingTheBadLine) {
  const std::string dir = testing::MakeTempDir("server_list");
  testing::WriteFile(dir + "/ok", "# storage nodes\na:1\n\n  b:2  \n");
  absl::StatusOr<std::vector<std::string>> list = ReadServersFile(dir + "/ok");
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(*list, (std::vector<std::string>{"a:1", "b:2"}));
  testing::WriteFile(dir + "/bad", "a:1\nnot-an-address\n");
  absl::StatusOr<std::vector<std::string>> bad = ReadServersFile(dir + "/bad");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(dir + "/bad:2"), std::string::npos) << bad.status();
  testing::WriteFile(dir + "/empty", "# nothing\n");
  EXPECT_FALSE(ReadServersFile(dir + "/empty").ok());
  EXPECT_EQ(ReadServersFile(dir + "/missing").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace sophon
