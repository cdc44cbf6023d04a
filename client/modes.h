// Offload modes: how far the storage node processes each sample.
#ifndef SOPHON_CLIENT_MODES_H_
#define SOPHON_CLIENT_MODES_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sophon/stage.h"

namespace sophon {

enum class Mode {
  kNoOff,      // everything RAW; the training node does all the work
  kResizeOff,  // storage node decodes, crops, resizes and flips (FLIPPED); "piloff"
  kAllOff,     // storage node does everything (TENSOR)
  kSmartOff,   // per sample, from the profile and the cost model (smartoff.h)
};

// Accepts nooff, resizeoff, piloff, alloff, smartoff and the original system's
// remote_nooff, remote_piloff, remote_alloff.
absl::StatusOr<Mode> ParseMode(absl::string_view name);
const char* ModeName(Mode mode);

// For every sample of an epoch, the stage at which the storage node stops.
class Planner {
 public:
  virtual ~Planner() = default;
  // `order` lists the sample ids of the epoch in request order; returns one
  // stage per entry of `order`.
  virtual std::vector<Stage> PlanEpoch(uint64_t epoch, const std::vector<uint64_t>& order) = 0;
};

// The same stage for every sample.
class FixedPlanner final : public Planner {
 public:
  explicit FixedPlanner(Stage stage) : stage_(stage) {}
  // REQUIRES: mode is not kSmartOff.
  explicit FixedPlanner(Mode mode);
  std::vector<Stage> PlanEpoch(uint64_t epoch, const std::vector<uint64_t>& order) override;

 private:
  Stage stage_;
};

}  // namespace sophon

#endif  // SOPHON_CLIENT_MODES_H_
