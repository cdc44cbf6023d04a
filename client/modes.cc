#include "modes.h"

#include "absl/strings/str_cat.h"

namespace sophon {

absl::StatusOr<Mode> ParseMode(absl::string_view name) {
  if (name == "nooff" || name == "remote_nooff") return Mode::kNoOff;
  if (name == "resizeoff" || name == "piloff" || name == "remote_piloff") return Mode::kResizeOff;
  if (name == "alloff" || name == "remote_alloff") return Mode::kAllOff;
  if (name == "smartoff") return Mode::kSmartOff;
  return absl::InvalidArgumentError(absl::StrCat(
      "--mode: unknown mode '", name,
      "' (expected nooff, resizeoff, alloff, smartoff; aliases remote_nooff, piloff, remote_piloff, "
      "remote_alloff)"));
}

const char* ModeName(Mode mode) {
  switch (mode) {
    case Mode::kNoOff: return "nooff";
    case Mode::kResizeOff: return "resizeoff";
    case Mode::kAllOff: return "alloff";
    case Mode::kSmartOff: return "smartoff";
  }
  return "unknown";
}

FixedPlanner::FixedPlanner(Mode mode)
    : stage_(mode == Mode::kNoOff      ? Stage::kRaw
             : mode == Mode::kResizeOff ? Stage::kFlipped
                                        : Stage::kTensor) {}

std::vector<Stage> FixedPlanner::PlanEpoch(uint64_t, const std::vector<uint64_t>& order) {
  return std::vector<Stage>(order.size(), stage_);
}

}  // namespace sophon
