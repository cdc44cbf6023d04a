#include "client/loader/global_manifest.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace sophon {
namespace {

// A manifest of `classes` and per-sample labels (into them).
v1::Manifest MakeManifest(const std::string& name, uint64_t fingerprint,
                          const std::vector<std::string>& classes,
                          const std::vector<uint32_t>& labels) {
  v1::Manifest m;
  m.set_dataset_name(name);
  m.set_fingerprint(fingerprint);
  m.set_num_samples(static_cast<uint32_t>(labels.size()));
  for (const std::string& c : classes) m.add_class_names(c);
  for (size_t i = 0; i < labels.size(); ++i) {
    m.add_labels(labels[i]);
    m.add_raw_sizes(1000 + fingerprint * 10 + i);
    m.add_relative_paths(classes[labels[i]] + "/" + std::to_string(i) + ".jpg");
  }
  return m;
}

TEST(GlobalManifestTest, OneServerIsItsOwnManifest) {
  const v1::Manifest a = MakeManifest("ds", 77, {"cat", "dog"}, {0, 1, 1});
  absl::StatusOr<GlobalManifest> g = GlobalManifest::Build({&a}, {"h:1"});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->layout(), DatasetLayout::kSingle);
  EXPECT_EQ(g->num_samples(), 3u);
  EXPECT_EQ(g->fingerprint(), 77u);
  EXPECT_EQ(g->name(), "ds");
  EXPECT_EQ(g->label(2), 1u);
  EXPECT_EQ(g->raw_size(1), a.raw_sizes(1));
  EXPECT_EQ(g->LocalId(2), 2u);
}

TEST(GlobalManifestTest, ShardsAreOrderedByFingerprintWhateverTheAddressOrder) {
  // Shard 20 has classes {dog, eel}, shard 10 has {ant, dog}.
  const v1::Manifest hi = MakeManifest("b", 20, {"dog", "eel"}, {0, 1, 1});
  const v1::Manifest lo = MakeManifest("a", 10, {"ant", "dog"}, {1, 0});
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
    EXPECT_EQ(g->raw_size(2), hi.raw_sizes(0));
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
  const v1::Manifest a = MakeManifest("a", 10, {"x"}, {0, 0});
  const v1::Manifest b = MakeManifest("b", 20, {"y"}, {0});
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
  const v1::Manifest a = MakeManifest("a", 10, {"x"}, {0, 0});
  const v1::Manifest other = MakeManifest("a", 10, {"x"}, {0, 0, 0});
  absl::StatusOr<GlobalManifest> g = GlobalManifest::Build({&a, &other}, {"h:1", "h:2"});
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("h:1"), std::string::npos) << g.status();
  EXPECT_NE(g.status().message().find("h:2"), std::string::npos) << g.status();
  v1::Manifest bad = a;
  bad.set_labels(1, 5);
  g = GlobalManifest::Build({&bad}, {"h:9"});
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("h:9"), std::string::npos) << g.status();
  v1::Manifest short_sizes = a;
  short_sizes.mutable_raw_sizes()->RemoveLast();
  EXPECT_FALSE(GlobalManifest::Build({&short_sizes}, {"h:9"}).ok());
}

}  // namespace
}  // namespace sophon
