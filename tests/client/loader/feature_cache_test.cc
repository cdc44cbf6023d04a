#include "client/loader/feature_cache.h"

#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "sophon/base/half.h"

namespace sophon {
namespace {

std::vector<uint16_t> Halves(std::vector<float> values) {
  std::vector<uint16_t> out(values.size());
  FloatsToHalves(values.data(), values.size(), out.data());
  return out;
}

TEST(FeatureCacheTest, GivesBackWhatItHoldsExactly) {
  FeatureCache cache(10, 3, 1 << 10);
  std::vector<float> out(3, -7.0f);
  EXPECT_FALSE(cache.Get(4, out.data()));
  EXPECT_EQ(out[0], -7.0f);
  cache.Put(4, Halves({0.5f, -1.25f, 3.0f}).data());
  ASSERT_TRUE(cache.Get(4, out.data()));
  EXPECT_EQ(out, (std::vector<float>{0.5f, -1.25f, 3.0f}));
  // A second Put of a held sample changes nothing.
  cache.Put(4, Halves({9.0f, 9.0f, 9.0f}).data());
  ASSERT_TRUE(cache.Get(4, out.data()));
  EXPECT_EQ(out[0], 0.5f);
  EXPECT_EQ(cache.held_samples(), 1);
  EXPECT_EQ(cache.held_bytes(), 6);
  // Ids outside the dataset are neither kept nor found.
  cache.Put(10, Halves({1, 2, 3}).data());
  EXPECT_FALSE(cache.Get(10, out.data()));
}

TEST(FeatureCacheTest, KeepsTheFirstSamplesThatFitItsBytes) {
  FeatureCache cache(100, 4, 3 * 4 * 2 + 5);  // room for 3 vectors
  for (uint64_t id = 0; id < 10; ++id) cache.Put(id, Halves({1, 2, 3, 4}).data());
  EXPECT_EQ(cache.held_samples(), 3);
  EXPECT_LE(cache.held_bytes(), 3 * 4 * 2 + 5);
  std::vector<float> out(4);
  EXPECT_TRUE(cache.Get(2, out.data()));
  EXPECT_FALSE(cache.Get(3, out.data()));
  FeatureCache none(100, 4, 7);  // not even one vector
  none.Put(0, Halves({1, 2, 3, 4}).data());
  EXPECT_FALSE(none.Get(0, out.data()));
}

TEST(FeatureCacheTest, ConcurrentPutsAndGets) {
  FeatureCache cache(1000, 8, 1 << 20);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&cache, t] {
      std::vector<float> out(8);
      for (uint64_t id = t; id < 1000; id += 4) {
        const float v = static_cast<float>(id);
        cache.Put(id, Halves(std::vector<float>(8, v)).data());
        EXPECT_TRUE(cache.Get(id, out.data()));
        EXPECT_EQ(out[7], v);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(cache.held_samples(), 1000);
}

}  // namespace
}  // namespace sophon
