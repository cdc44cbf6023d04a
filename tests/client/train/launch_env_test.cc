#include "client/train/launch_env.h"

#include <map>
#include <string>

#include "gtest/gtest.h"

namespace sophon {
namespace {

std::function<const char*(const char*)> Env(std::map<std::string, std::string> vars) {
  auto owned = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  return [owned](const char* name) -> const char* {
    auto it = owned->find(name);
    return it == owned->end() ? nullptr : it->second.c_str();
  };
}

TEST(LaunchEnvTest, DefaultsToOneProcess) {
  absl::StatusOr<DistributedOptions> o = ResolveLaunch({}, {}, Env({}));
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->world_size, 1);
  EXPECT_EQ(o->rank, 0);
}

TEST(LaunchEnvTest, ReadsTorchrunsVariablesAndFlagsWin) {
  const auto env = Env({{"WORLD_SIZE", "4"}, {"RANK", "3"}, {"MASTER_ADDR", "10.1.2.3"},
                        {"MASTER_PORT", "29600"}, {"LOCAL_RANK", "1"}});
  absl::StatusOr<DistributedOptions> o = ResolveLaunch({}, {}, env);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->world_size, 4);
  EXPECT_EQ(o->rank, 3);
  EXPECT_EQ(o->master_addr, "10.1.2.3");
  EXPECT_EQ(o->master_port, 29600);
  LaunchFlags flags;
  flags.rank = 1;
  flags.master_addr = "127.0.0.1";
  o = ResolveLaunch(flags, {}, env);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->rank, 1);
  EXPECT_EQ(o->world_size, 4);
  EXPECT_EQ(o->master_addr, "127.0.0.1");
}

TEST(LaunchEnvTest, BadValuesNameTheVariableOrTheField) {
  absl::StatusOr<DistributedOptions> o = ResolveLaunch({}, {}, Env({{"RANK", "x"}}));
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("RANK='x'"), std::string::npos) << o.status();
  o = ResolveLaunch({}, {}, Env({{"WORLD_SIZE", "2"}, {"RANK", "2"}}));
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("DistributedOptions.rank"), std::string::npos)
      << o.status();
  LaunchFlags flags;
  flags.master_port = 70000;
  EXPECT_FALSE(ResolveLaunch(flags, {}, Env({{"WORLD_SIZE", "2"}})).ok());
}

TEST(LaunchEnvTest, LocalWorldSizeFromTheFlagTheVariableOrALoopbackMaster) {
  DistributedOptions d;
  d.world_size = 4;
  d.master_addr = "10.1.2.3";
  EXPECT_EQ(*ResolveLocalWorldSize(-1, d, Env({})), 1);  // rank 0 elsewhere: alone here
  EXPECT_EQ(*ResolveLocalWorldSize(-1, d, Env({{"LOCAL_WORLD_SIZE", "2"}})), 2);
  EXPECT_EQ(*ResolveLocalWorldSize(3, d, Env({{"LOCAL_WORLD_SIZE", "2"}})), 3);  // the flag wins
  d.master_addr = "127.0.0.1";
  EXPECT_EQ(*ResolveLocalWorldSize(-1, d, Env({})), 4);  // every rank meets on this host
  d.world_size = 1;
  EXPECT_EQ(*ResolveLocalWorldSize(-1, d, Env({})), 1);
}

TEST(LaunchEnvTest, LocalWorldSizeOutsideTheWorldNamesTheFlagOrVariable) {
  DistributedOptions d;
  d.world_size = 2;
  absl::StatusOr<int> local = ResolveLocalWorldSize(3, d, Env({}));
  ASSERT_FALSE(local.ok());
  EXPECT_NE(local.status().message().find("--local-world-size is 3"), std::string::npos)
      << local.status();
  local = ResolveLocalWorldSize(0, d, Env({}));
  ASSERT_FALSE(local.ok());
  EXPECT_NE(local.status().message().find("--local-world-size"), std::string::npos);
  local = ResolveLocalWorldSize(-1, d, Env({{"LOCAL_WORLD_SIZE", "8"}}));
  ASSERT_FALSE(local.ok());
  EXPECT_NE(local.status().message().find("LOCAL_WORLD_SIZE is 8"), std::string::npos)
      << local.status();
  local = ResolveLocalWorldSize(-1, d, Env({{"LOCAL_WORLD_SIZE", "two"}}));
  ASSERT_FALSE(local.ok());
  EXPECT_NE(local.status().message().find("LOCAL_WORLD_SIZE='two'"), std::string::npos)
      << local.status();
}

}  // namespace
}  // namespace sophon
