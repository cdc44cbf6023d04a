// The fixed modes: every sample at the same stage (nooff, resizeoff, alloff).
#ifndef SOPHON_CLIENT_OFFLOAD_FIXED_POLICY_H_
#define SOPHON_CLIENT_OFFLOAD_FIXED_POLICY_H_

#include <string>

#include "client/loader/offload_policy.h"

namespace sophon {

class FixedPolicy final : public OffloadPolicy {
 public:
  // `name` is the mode's name for reports.
  FixedPolicy(Stage stage, std::string name) : stage_(stage), name_(std::move(name)) {}

  std::string name() const override { return name_; }
  absl::Status BeginEpoch(uint64_t, absl::Span<const uint64_t>) override {
    return absl::OkStatus();
  }
  void Plan(int64_t, absl::Span<const uint64_t>, absl::Span<SampleAssignment> out) override {
    for (SampleAssignment& a : out) a = SampleAssignment{stage_, SampleAssignment::kAnyServer};
  }

 private:
  const Stage stage_;
  const std::string name_;
};

}  // namespace sophon

#endif  // SOPHON_CLIENT_OFFLOAD_FIXED_POLICY_H_
