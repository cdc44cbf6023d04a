#include "server/byte_budget.h"

#include <algorithm>

namespace sophon {

bool ByteBudget::TryAcquireOrWait(int64_t bytes, Waiter* waiter, bool* registered) {
  absl::MutexLock lock(&mu_);
  if (registered != nullptr) *registered = false;
  // An empty budget admits anything, so that one sample larger than the
  // capacity cannot wait forever (the service refuses such samples earlier).
  if (used_ == 0 || used_ + bytes <= capacity_) {
    AddLocked(bytes);
    return true;
  }
  if (waiter != nullptr && std::find(waiters_.begin(), waiters_.end(), waiter) == waiters_.end()) {
    waiters_.push_back(waiter);
    if (registered != nullptr) *registered = true;
  }
  return false;
}

void ByteBudget::ForceAcquire(int64_t bytes) {
  absl::MutexLock lock(&mu_);
  AddLocked(bytes);
}

void ByteBudget::AddLocked(int64_t bytes) {
  const bool was_idle = used_ == 0;
  used_ += bytes;
  if (used_ < 0) used_ = 0;
  if (on_transition_ && was_idle != (used_ == 0)) on_transition_(/*busy=*/was_idle);
}

void ByteBudget::Release(int64_t bytes) {
  std::vector<Waiter*> woken;
  {
    absl::MutexLock lock(&mu_);
    AddLocked(-bytes);
    woken.swap(waiters_);
  }
  for (Waiter* w : woken) w->OnBytesReleased();
}

bool ByteBudget::RemoveWaiter(Waiter* waiter) {
  absl::MutexLock lock(&mu_);
  auto it = std::find(waiters_.begin(), waiters_.end(), waiter);
  if (it == waiters_.end()) return false;
  waiters_.erase(it);
  return true;
}

int64_t ByteBudget::used() const {
  absl::MutexLock lock(&mu_);
  return used_;
}

int ByteBudget::waiters() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(waiters_.size());
}

}  // namespace sophon
