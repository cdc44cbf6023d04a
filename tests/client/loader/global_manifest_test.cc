#include "client/loader/global_manifest.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace sophon {
namespace {

// A manifest of `classes` and per-sample labels (into them).
ServerManifest MakeManifest(const std::string& name, uint64_t fingerprint,
                            const std::vector<std::string>& classes,
                            const std::vector<uint32_t>& labels) {
  ServerManifest m;
  m.dataset_name = name;
  m.fingerprint = fingerprint;
  m.class_names = classes;
  m.labels = labels;
  for (size_t i = 0; i < labels.size(); ++i) {
    m.raw_sizes.push_back(static_cast<uint32_t>(1000 + fingerprint * 10 + i));
  }
  return m;
}

TEST(GlobalManifestTest, OneServerIsItsOwnManifest) {
  const ServerManifest a = MakeManifest("ds", 77, {"cat", "dog"}, {0, 1, 1});
  absl::StatusOr<GlobalManifest> g = GlobalManifest::Build({&a}, {"h:1"});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->layout(), DatasetLayout::kSingle);
  EXPECT_EQ(g->num_samples(), 3u);
  EXPECT_EQ(g->fingerprint(), 77u);
  EXPECT_EQ(g->name(), "ds");
  EXPECT_EQ(g->label(2), 1u);
  EXPECT_EQ(g->raw_size(1), a.raw_sizes[1]);
  EXPECT_EQ(g->LocalId(2), 2u);
}

TEST(GlobalManifestTest, ShardsAreOrderedByFingerprintWhateverTheAddressOrder) {
  // Shard 20 has classes {dog, eel}, shard 10 has {ant, dog}.
  const ServerManifest hi = MakeManifest("b", 20, {"dog", "eel"}, {0, 1, 1});
  const ServerManifest lo = MakeManifest("a", 10, {"ant", "dog"}, {1, 0});
  absl::StatusOr<GlobalManifest> g1 = GlobalManifest::Build({&hi, &lo}, {"h:1", "h:2"});
  absl::StatusOr<GlobalManifest> g2 = GlobalManifest::Build({&lo, &hi}, {"h:2", "h:1"});
  ASSERT_TRUE(g1.ok() && g2.ok());
  for (const GlobalManifest* g : {&*g1, &*g2}) {
    EXPECT_EQ(g->layout(), DatasetLayout::kSharded);
    EXPECT_EQ(g->num_samples(), 5u);
    EXPECT_EQ(g->class_names(), (std::vector<std::string>{"ant", "dog", "eel"}));
    EXPECT_EQ(g->name(), "a+b");
    // Shard 10 first: its samples are global 0..1, labels onto the merged names.
    EXPECT_EQ(g->label(0), 1u);  // dog
    EXPECT_EQ(g->label(1), 0u);  // ant
    EXPECT_EQ(g->label(2), 1u);  // dog of shard 20
    EXPECT_EQ(g->label(3), 2u);  // eel
    EXPECT_EQ(g->raw_size(2), hi.raw_sizes[0]);
    EXPECT_EQ(g->ShardOf(1), 0);
    EXPECT_EQ(g->ShardOf(2), 1);
    EXPECT_EQ(g->LocalId(4), 2u);
    EXPECT_EQ(g->shards()[1].base, 2u);
  }
  EXPECT_EQ(g1->fingerprint(), g2->fingerprint());
  EXPECT_NE(g1->fingerprint(), 10u);
  // Server indices follow the address order.
  EXPECT_EQ(g1->ShardOfServer(0), 1);
  EXPECT_EQ(g2->ShardOfServer(0), 0);
}

TEST(GlobalManifestTest, SameFingerprintMeansReplicasAndMixedLayoutsFollow) {
  const ServerManifest a = MakeManifest("a", 10, {"x"}, {0, 0});
  const ServerManifest b = MakeManifest("b", 20, {"y"}, {0});
  absl::StatusOr<GlobalManifest> replicated = GlobalManifest::Build({&a, &a}, {"h:1", "h:2"});
  ASSERT_TRUE(replicated.ok());
  EXPECT_EQ(replicated->layout(), DatasetLayout::kReplicated);
  EXPECT_EQ(replicated->num_samples(), 2u);
  EXPECT_EQ(replicated->fingerprint(), 10u);
  EXPECT_EQ(replicated->shards()[0].servers, (std::vector<int>{0, 1}));
  absl::StatusOr<GlobalManifest> mixed = GlobalManifest::Build({&b, &a, &a}, {"h:1", "h:2", "h:3"});
  ASSERT_TRUE(mixed.ok());
  EXPECT_EQ(mixed->layout(), DatasetLayout::kMixed);
  EXPECT_EQ(mixed->num_samples(), 3u);
  EXPECT_EQ(mixed->shards()[0].servers, (std::vector<int>{1, 2}));
  EXPECT_EQ(mixed->shards()[1].servers, (std::vector<int>{0}));
  EXPECT_NE(mixed->Describe({"h:1", "h:2", "h:3"}).find("mixed"), std::string::npos);
}

TEST(GlobalManifestTest, RefusesReplicasThatDisagreeAndMalformedManifests) {
  const ServerManifest a = MakeManifest("a", 10, {"x"}, {0, 0});
  const ServerManifest other = MakeManifest("a", 10, {"x"}, {0, 0, 0});
  absl::StatusOr<GlobalManifest> g = GlobalManifest::Build({&a, &other}, {"h:1", "h:2"});
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("h:1"), std::string::npos) << g.status();
  EXPECT_NE(g.status().message().find("h:2"), std::string::npos) << g.status();
  ServerManifest bad = a;
  bad.labels[1] = 5;
  g = GlobalManifest::Build({&bad}, {"h:9"});
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("h:9"), std::string::npos) << g.status();
  ServerManifest short_sizes = a;
  short_sizes.raw_sizes.pop_back();
  EXPECT_FALSE(GlobalManifest::Build({&short_sizes}, {"h:9"}).ok());
}

}  // namespace
}  // namespace sophon
