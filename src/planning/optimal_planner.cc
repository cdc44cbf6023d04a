#include "sophon/planning/optimal_planner.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "sophon/planning/cost_model.h"
#include "sophon/planning/sophon_heuristic.h"

namespace sophon {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// Relative difference below which two predicted times count as equal (the
// sums are exact; this only absorbs the final floating-point divisions).
constexpr double kRelTolerance = 1e-12;

using SampleCosts = std::array<StageCost, kNumStages>;

// A stage no plan may choose (not in the profile's stages) costs this much
// remote work: it never enters a hull, and no move picks it.
constexpr int64_t kBarred = std::numeric_limits<int64_t>::max() / 4;

bool IsBarred(const StageCost& c) { return c.remote_ns >= kBarred; }

// The three resource times a plan's work implies, largest first (T_gpu is
// the same for every plan and left out).
struct Score {
  std::array<double, 3> sorted{};
};

Score ScoreOf(const EpochWork& work, const Resources& resources) {
  const PlanCost c = CostOfWork(work, resources);
  Score s;
  s.sorted = {c.net_s, c.remote_s, c.local_s};
  std::sort(s.sorted.begin(), s.sorted.end(), std::greater<double>());
  return s;
}

// Leximax order: the smaller largest time wins, then the smaller second, ...
bool Better(const Score& a, const Score& b) {
  for (int j = 0; j < 3; ++j) {
    const double x = a.sorted[j], y = b.sorted[j];
    if (x == y) continue;
    if (std::isinf(x) || std::isinf(y)) return x < y;
    if (std::fabs(x - y) <= kRelTolerance * std::max(std::fabs(x), std::fabs(y))) continue;
    return x < y;
  }
  return false;
}

EpochWork WorkOf(const std::vector<SampleCosts>& costs, const std::vector<Stage>& stages) {
  EpochWork work;
  work.samples = static_cast<int64_t>(costs.size());
  for (size_t i = 0; i < costs.size(); ++i) work.Add(costs[i][static_cast<int>(stages[i])]);
  return work;
}

// One edge of one sample's lower hull in (remote ns, bytes): moving the
// sample from stage `from` to stage `to` adds dx > 0 ns of offloaded work
// and dy bytes (usually negative).
struct Edge {
  uint32_t sample = 0;  // position in ids
  Stage from = kFirstStage;
  Stage to = kFirstStage;
  int64_t dx = 0;
  int64_t dy = 0;
};

// Appends the edges of the lower convex hull of a sample's stage points and
// returns the hull's first stage (least offloaded work, then fewest bytes).
Stage AppendHullEdges(uint32_t sample, const SampleCosts& c, std::vector<Edge>* edges) {
  // Points in increasing work (a skippable stage such as JPEG_CROP may cost
  // the storage node more or less than the next one); among equal work keep
  // the fewest bytes (the earlier stage on a full tie).
  std::array<int, kNumStages> order{};
  int m = 0;
  for (int k = 0; k < kNumStages; ++k) {
    if (!IsBarred(c[k])) order[m++] = k;
  }
  std::stable_sort(order.begin(), order.begin() + m,
                   [&](int a, int b) { return c[a].remote_ns < c[b].remote_ns; });
  std::array<int, kNumStages> pts{};
  int n = 0;
  for (int i = 0; i < m; ++i) {
    const int k = order[i];
    if (n > 0 && c[pts[n - 1]].remote_ns == c[k].remote_ns) {
      if (c[k].bytes < c[pts[n - 1]].bytes) pts[n - 1] = k;
      continue;
    }
    pts[n++] = k;
  }
  // Monotone chain, lower side: drop a middle point strictly above the chord
  // (collinear points stay: they are integral states on the path).
  std::array<int, kNumStages> hull{};
  int h = 0;
  for (int i = 0; i < n; ++i) {
    const int r = pts[i];
    while (h >= 2) {
      const StageCost& p = c[hull[h - 2]];
      const StageCost& q = c[hull[h - 1]];
      const __int128 cross =
          static_cast<__int128>(q.remote_ns - p.remote_ns) *
              (static_cast<__int128>(c[r].bytes) - static_cast<__int128>(p.bytes)) -
          (static_cast<__int128>(q.bytes) - static_cast<__int128>(p.bytes)) *
              static_cast<__int128>(c[r].remote_ns - p.remote_ns);
      if (cross >= 0) break;
      --h;
    }
    hull[h++] = r;
  }
  for (int i = 0; i + 1 < h; ++i) {
    Edge e;
    e.sample = sample;
    e.from = static_cast<Stage>(hull[i]);
    e.to = static_cast<Stage>(hull[i + 1]);
    e.dx = c[hull[i + 1]].remote_ns - c[hull[i]].remote_ns;
    e.dy = static_cast<int64_t>(c[hull[i + 1]].bytes) - static_cast<int64_t>(c[hull[i]].bytes);
    edges->push_back(e);
  }
  return static_cast<Stage>(hull[0]);
}

// min over theta in [0, 1] of max_j (a[j] + theta * (b[j] - a[j])): the best
// fractional point on a segment between two states' times.
double MinMaxOnSegment(const std::array<double, 3>& a, const std::array<double, 3>& b) {
  auto max_at = [&](double t) {
    double m = 0;
    for (int j = 0; j < 3; ++j) m = std::max(m, a[j] + t * (b[j] - a[j]));
    return m;
  };
  double best = std::min(max_at(0), max_at(1));
  for (int j = 0; j < 3; ++j) {
    for (int k = j + 1; k < 3; ++k) {
      const double slope_diff = (b[j] - a[j]) - (b[k] - a[k]);
      if (slope_diff == 0) continue;
      const double t = (a[k] - a[j]) / slope_diff;
      if (t > 0 && t < 1) best = std::min(best, max_at(t));
    }
  }
  return best;
}

struct HullWalk {
  std::vector<Stage> best_stages;  // the best integral state on the path
  double lp_min_s = kInf;          // LP optimum of max(T_net, T_remote, T_local)
};

// `costs` are the samples' real costs; `relaxed` the same with every stage's
// local work lowered to (the sample's cheapest total of remote + local) minus
// its remote work, so that remote + local is constant per sample as the
// hull walk needs (see optimal_planner.h). The walk runs on the relaxed
// costs (exact LP bound for them, hence a bound for the real ones, which are
// never lower) and picks its best state by the real costs.
HullWalk WalkHull(const std::vector<SampleCosts>& costs, const std::vector<SampleCosts>& relaxed,
                  const Resources& resources) {
  std::vector<Edge> edges;
  edges.reserve(costs.size() * 3);
  std::vector<Stage> stages(costs.size());
  for (size_t i = 0; i < costs.size(); ++i) {
    stages[i] = AppendHullEdges(static_cast<uint32_t>(i), relaxed[i], &edges);
  }
  // Ascending slope dy / dx (most bytes saved per offloaded second first);
  // exact rational comparison, so a sample's own edges keep their order.
  std::sort(edges.begin(), edges.end(), [](const Edge& a, const Edge& b) {
    const __int128 lhs = static_cast<__int128>(a.dy) * b.dx;
    const __int128 rhs = static_cast<__int128>(b.dy) * a.dx;
    if (lhs != rhs) return lhs < rhs;
    if (a.sample != b.sample) return a.sample < b.sample;
    return a.from < b.from;
  });

  EpochWork work = WorkOf(costs, stages);
  EpochWork bound_work = WorkOf(relaxed, stages);
  auto times = [&](const EpochWork& w) {
    const PlanCost c = CostOfWork(w, resources);
    return std::array<double, 3>{c.net_s, c.remote_s, c.local_s};
  };
  std::array<double, 3> prev = times(bound_work);
  HullWalk walk;
  walk.lp_min_s = *std::max_element(prev.begin(), prev.end());
  Score best_score = ScoreOf(work, resources);
  size_t best_prefix = 0;
  // With no storage CPU any offloaded work takes forever: the start (no
  // offloaded work) is the only finite state, and the edges are skipped.
  const bool can_offload = resources.remote_cpus > 0;
  for (size_t e = 0; can_offload && e < edges.size(); ++e) {
    const Edge& edge = edges[e];
    work.Subtract(costs[edge.sample][static_cast<int>(edge.from)]);
    work.Add(costs[edge.sample][static_cast<int>(edge.to)]);
    bound_work.Subtract(relaxed[edge.sample][static_cast<int>(edge.from)]);
    bound_work.Add(relaxed[edge.sample][static_cast<int>(edge.to)]);
    const std::array<double, 3> cur = times(bound_work);
    walk.lp_min_s = std::min(walk.lp_min_s, MinMaxOnSegment(prev, cur));
    prev = cur;
    const Score score = ScoreOf(work, resources);
    if (Better(score, best_score)) {
      best_score = score;
      best_prefix = e + 1;
    }
  }
  for (size_t e = 0; e < best_prefix; ++e) stages[edges[e].sample] = edges[e].to;
  walk.best_stages = std::move(stages);
  return walk;
}

// Single-sample moves that improve the score, a few passes at most.
void Polish(const std::vector<SampleCosts>& costs, const Resources& resources,
            std::vector<Stage>* stages) {
  constexpr int kMaxPasses = 4;
  EpochWork work = WorkOf(costs, *stages);
  Score score = ScoreOf(work, resources);
  for (int pass = 0; pass < kMaxPasses; ++pass) {
    int moves = 0;
    for (size_t i = 0; i < costs.size(); ++i) {
      for (int k = 0; k < kNumStages; ++k) {
        const int cur = static_cast<int>((*stages)[i]);
        if (k == cur || IsBarred(costs[i][k])) continue;
        EpochWork w = work;
        w.Subtract(costs[i][cur]);
        w.Add(costs[i][k]);
        const Score s = ScoreOf(w, resources);
        if (Better(s, score)) {
          work = w;
          score = s;
          (*stages)[i] = static_cast<Stage>(k);
          ++moves;
        }
      }
    }
    if (moves == 0) break;
  }
}

std::vector<SampleCosts> CostTable(const DatasetProfile& profile, absl::Span<const uint64_t> ids) {
  std::vector<SampleCosts> costs(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    for (int k = 0; k < kNumStages; ++k) {
      costs[i][k] = SampleStageCost(profile.samples[ids[i]], StageAt(k), profile.target);
      if (!profile.stages.Has(StageAt(k))) costs[i][k].remote_ns = kBarred;
    }
  }
  return costs;
}

std::vector<SampleCosts> RelaxedCosts(const std::vector<SampleCosts>& costs) {
  std::vector<SampleCosts> relaxed = costs;
  for (SampleCosts& c : relaxed) {
    int64_t cheapest = std::numeric_limits<int64_t>::max();
    for (const StageCost& k : c) {
      if (!IsBarred(k)) cheapest = std::min(cheapest, k.remote_ns + k.local_ns);
    }
    for (StageCost& k : c) {
      if (!IsBarred(k)) k.local_ns = cheapest - k.remote_ns;
    }
  }
  return relaxed;
}

double GpuSeconds(const Resources& resources, size_t samples) {
  EpochWork work;
  work.samples = static_cast<int64_t>(samples);
  return CostOfWork(work, resources).gpu_s;
}

}  // namespace

OptimalPlan PlanOptimal(const DatasetProfile& profile, const Resources& resources,
                        absl::Span<const uint64_t> ids) {
  const std::vector<SampleCosts> costs = CostTable(profile, ids);
  HullWalk walk = WalkHull(costs, RelaxedCosts(costs), resources);

  // Candidates: the path's best state, every stage for all samples (the
  // fixed modes among them) and the heuristic.
  std::vector<std::vector<Stage>> candidates;
  candidates.push_back(std::move(walk.best_stages));
  for (Stage s : AllStages()) {
    if (profile.stages.Has(s)) candidates.emplace_back(ids.size(), s);
  }
  candidates.push_back(PlanSophon(profile, resources, ids));
  size_t best = 0;
  Score best_score = ScoreOf(WorkOf(costs, candidates[0]), resources);
  for (size_t c = 1; c < candidates.size(); ++c) {
    const Score s = ScoreOf(WorkOf(costs, candidates[c]), resources);
    if (Better(s, best_score)) {
      best = c;
      best_score = s;
    }
  }
  OptimalPlan plan;
  plan.stages = std::move(candidates[best]);
  Polish(costs, resources, &plan.stages);

  const double gpu_s = GpuSeconds(resources, ids.size());
  EpochWork work = WorkOf(costs, plan.stages);
  const double predicted = CostOfWork(work, resources).epoch_s;
  // The bound cannot exceed a plan that exists; min() only absorbs rounding.
  plan.lower_bound_s = std::min(std::max(walk.lp_min_s, gpu_s), predicted);
  return plan;
}

}  // namespace sophon
