#include "sophon/planning/sophon_heuristic.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "sophon/planning/cost_model.h"

namespace sophon {

std::vector<Stage> PlanSophon(const DatasetProfile& profile, const Resources& resources,
                              absl::Span<const uint64_t> ids) {
  struct Candidate {
    Stage stage = kFirstStage;
    double bytes_saved = 0;
    double prep_s = 0;      // client CPU seconds from the first stage to `stage`
    double efficiency = 0;  // bytes saved per CPU second
  };
  std::vector<Candidate> candidates(ids.size());
  double net_bytes = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    const SampleProfile& s = profile.samples[ids[i]];
    const uint64_t raw_bytes = s.bytes[kFirstStage];
    net_bytes += static_cast<double>(raw_bytes);
    Candidate& c = candidates[i];
    uint64_t min_bytes = raw_bytes;
    for (Stage stage : AllStages()) {
      if (!profile.stages.Has(stage)) continue;
      if (s.bytes[stage] < min_bytes) {
        min_bytes = s.bytes[stage];
        c.stage = stage;
      }
    }
    if (c.stage == kFirstStage) continue;
    c.bytes_saved = static_cast<double>(raw_bytes - min_bytes);
    c.prep_s = s.client.Between(kFirstStage, c.stage);
    c.efficiency =
        c.prep_s > 0 ? c.bytes_saved / c.prep_s : std::numeric_limits<double>::infinity();
  }
  std::vector<size_t> order(ids.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return candidates[a].efficiency > candidates[b].efficiency;
  });

  std::vector<Stage> stages(ids.size(), kFirstStage);
  double remote_s = 0;  // client CPU seconds offloaded so far
  for (size_t i : order) {
    const Candidate& c = candidates[i];
    if (c.stage == kFirstStage) break;  // no saving here nor after (efficiency 0)
    const double net_after = (net_bytes - c.bytes_saved) / resources.net_bytes_per_s;
    const double remote_after =
        ResourceSeconds((remote_s + c.prep_s) * resources.remote_speed, resources.remote_cpus);
    if (net_after < remote_after) break;
    net_bytes -= c.bytes_saved;
    remote_s += c.prep_s;
    stages[i] = c.stage;
  }
  return stages;
}

}  // namespace sophon
