#include "server/byte_budget.h"

#include "gtest/gtest.h"

namespace sophon {
namespace {

struct CountingWaiter : ByteBudget::Waiter {
  void OnBytesReleased() override { ++woken; }
  int woken = 0;
};

TEST(ByteBudgetTest, AdmitsUpToCapacityThenRegistersTheWaiterOnce) {
  ByteBudget budget(100);
  CountingWaiter w;
  bool registered = false;
  EXPECT_TRUE(budget.TryAcquireOrWait(60, &w, &registered));
  EXPECT_FALSE(registered);
  EXPECT_FALSE(budget.TryAcquireOrWait(50, &w, &registered));
  EXPECT_TRUE(registered);
  EXPECT_FALSE(budget.TryAcquireOrWait(50, &w, &registered));
  EXPECT_FALSE(registered);  // already waiting
  EXPECT_EQ(budget.waiters(), 1);
  EXPECT_EQ(budget.used(), 60);
  budget.Release(60);
  EXPECT_EQ(w.woken, 1);
  EXPECT_EQ(budget.waiters(), 0);
  EXPECT_TRUE(budget.TryAcquireOrWait(100, &w, &registered));
  EXPECT_EQ(budget.used(), 100);
}

TEST(ByteBudgetTest, AnEmptyBudgetAdmitsOneOversizedReservation) {
  ByteBudget budget(10);
  EXPECT_TRUE(budget.TryAcquireOrWait(50, nullptr));
  EXPECT_FALSE(budget.TryAcquireOrWait(1, nullptr));
  budget.Release(50);
  EXPECT_EQ(budget.used(), 0);
}

TEST(ByteBudgetTest, RemovedWaitersAreNotWoken) {
  ByteBudget budget(10);
  CountingWaiter a, b;
  ASSERT_TRUE(budget.TryAcquireOrWait(10, nullptr));
  EXPECT_FALSE(budget.TryAcquireOrWait(5, &a));
  EXPECT_FALSE(budget.TryAcquireOrWait(5, &b));
  EXPECT_TRUE(budget.RemoveWaiter(&a));
  EXPECT_FALSE(budget.RemoveWaiter(&a));
  budget.Release(10);
  EXPECT_EQ(a.woken, 0);
  EXPECT_EQ(b.woken, 1);
}

TEST(ByteBudgetTest, ForceAcquireMayExceedCapacityAndReleaseNeverGoesNegative) {
  ByteBudget budget(10);
  budget.ForceAcquire(25);
  EXPECT_EQ(budget.used(), 25);
  EXPECT_FALSE(budget.TryAcquireOrWait(1, nullptr));
  budget.Release(40);
  EXPECT_EQ(budget.used(), 0);
}

}  // namespace
}  // namespace sophon
