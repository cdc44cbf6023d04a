#include "sophon/planning/what_if.h"

#include <string>

#include "gtest/gtest.h"
#include "sophon/planning/profile_csv.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

// A profile of 40 samples saved to a folder, as smartoff writes one.
std::string SavedProfile() {
  DatasetProfile p;
  p.dataset = "what_if";
  p.crop_size = 224;
  p.stages = testing::StagesWithoutJpegCrop();
  for (uint64_t i = 0; i < 40; ++i) {
    SampleProfile s;
    s.id = i;
    s.bytes[Stage::kRaw] = 50000 + 10000 * i;
    s.bytes[Stage::kJpegCrop] = s.bytes[Stage::kRaw];
    SetSizedStageBytes(p.crop_size, &s);
    s.client = testing::MakeOpTimes(2e-3 + 1e-4 * i, 2e-5, 4e-4);
    p.samples.push_back(s);
  }
  const std::string folder = testing::MakeTempDir("what_if_profile");
  EXPECT_TRUE(SaveProfileFolder(p, folder).ok());
  return folder;
}

TEST(WhatIfTest, PlansEveryKindOnOneServerAndOnSeveral) {
  WhatIfOptions o;
  o.source.path = SavedProfile();
  o.net_mbit = 100;
  absl::StatusOr<WhatIf> one = PlanWhatIf(o);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->plans.size(), std::size(kAllPlannerKinds));
  EXPECT_TRUE(one->cluster_plans.empty());
  EXPECT_DOUBLE_EQ(one->resources.net_bytes_per_s, 100e6 / 8);
  const std::string json = FormatWhatIf(*one, /*json=*/true);
  EXPECT_NE(json.find("\"plans\""), std::string::npos) << json;

  o.servers = 3;
  o.layout = "replicated";
  o.server_net_mbit = {100, 200, 400};
  absl::StatusOr<WhatIf> three = PlanWhatIf(o);
  ASSERT_TRUE(three.ok()) << three.status();
  EXPECT_TRUE(three->plans.empty());
  ASSERT_EQ(three->cluster_plans.size(), std::size(kAllPlannerKinds));
  ASSERT_EQ(three->cluster.servers.size(), 3u);
  EXPECT_DOUBLE_EQ(three->cluster.servers[2].net_bytes_per_s, 400e6 / 8);
  EXPECT_DOUBLE_EQ(three->cluster.servers[0].remote_cpus, o.remote_cpus);
  // Every sample planned once, over the three servers.
  int64_t samples = 0;
  for (const ServerPlanCost& s : three->cluster_plans[0].cost.servers) samples += s.samples;
  EXPECT_EQ(samples, 40);
}

TEST(WhatIfTest, BadOptionsNameTheirField) {
  WhatIfOptions o;
  absl::Status s = PlanWhatIf(o).status();
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_NE(s.message().find("source.path"), absl::string_view::npos) << s;

  o.source.path = SavedProfile();
  o.servers = 2;
  o.server_remote_cpus = {1, 2, 3};
  s = PlanWhatIf(o).status();
  EXPECT_NE(s.message().find("server_remote_cpus has 3 values for 2 servers"),
            absl::string_view::npos)
      << s;

  o.server_remote_cpus.clear();
  o.layout = "striped";
  s = PlanWhatIf(o).status();
  EXPECT_NE(s.message().find("layout"), absl::string_view::npos) << s;

  o.layout = "sharded";
  o.net_mbit = 0;
  s = PlanWhatIf(o).status();
  EXPECT_NE(s.message().find("net_bytes_per_s"), absl::string_view::npos) << s;

  o.net_mbit = 100;
  o.source.path = testing::MakeTempDir("what_if_empty");
  EXPECT_TRUE(absl::IsNotFound(PlanWhatIf(o).status()));
}

}  // namespace
}  // namespace sophon
