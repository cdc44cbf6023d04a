// sophon-order-stats: how random the group-aware order (--shuffle-window) is
// against a full shuffle, on a pack's groups and labels (no server needed).
// For each order it prints, over --epochs epochs of batches of --batch-size:
//   - label mix: the mean number of distinct labels in a batch and the mean
//     total-variation distance between a batch's label histogram and the
//     dataset's (0 = every batch has the dataset's mix);
//   - displacement: the mean |position - id| / n of a sample in the epoch
//     against its place in the pack (a full shuffle gives about 1/3);
//   - repeats: of the pairs of samples that share a batch in epoch e, the
//     fraction that share one again in epoch e + 1 (a full shuffle gives
//     about (b - 1) / (n - 1)).
//   sophon-order-stats --pack=PACKDIR [--windows=0,1,4,8,32] [--batch-size=64]
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "client/loader/sampler.h"
#include "sophon/cli/cli.h"
#include "sophon/data/pack_index.h"

ABSL_FLAG(std::string, pack, "", "Pack folder (its index gives the groups and labels). Required.");
ABSL_FLAG(std::string, windows, "0,1,4,8,32",
          "Orders to measure: 0 = full shuffle, K = --shuffle-window=K. Default 0,1,4,8,32.");
ABSL_FLAG(int, batch_size, 64, "Samples per batch. Default 64.");
ABSL_FLAG(int, epochs, 3, "Epochs measured (repeats compare consecutive ones). Default 3.");
ABSL_FLAG(uint64_t, seed, 0, "The orders' seed. Default 0.");

namespace {

struct Stats {
  double distinct = 0, tv = 0, displacement = 0, repeats = 0;
};

Stats Measure(const std::vector<uint32_t>& labels, int num_classes,
              const std::vector<sophon::SampleGroup>& groups, int window, int b, int epochs,
              uint64_t seed) {
  const uint64_t n = labels.size();
  std::vector<double> global(num_classes, 0);
  for (uint32_t l : labels) global[l] += 1.0 / n;
  Stats s;
  uint64_t batches = 0;
  std::vector<uint64_t> previous_batch_of;
  double repeat_sum = 0;
  int repeat_epochs = 0;
  for (int e = 0; e < epochs; ++e) {
    const std::vector<uint64_t> order =
        window > 0 ? sophon::GroupedEpochOrder(seed, e, groups, window)
                   : sophon::EpochOrder(seed, e, n);
    std::vector<uint64_t> batch_of(n);
    for (uint64_t p = 0; p < n; ++p) {
      batch_of[order[p]] = p / b;
      s.displacement +=
          std::fabs(static_cast<double>(p) - static_cast<double>(order[p])) / n / n;
    }
    for (uint64_t start = 0; start + b <= n; start += b) {
      std::vector<double> hist(num_classes, 0);
      for (uint64_t p = start; p < start + b; ++p) hist[labels[order[p]]] += 1.0 / b;
      double tv = 0;
      int distinct = 0;
      for (int c = 0; c < num_classes; ++c) {
        tv += std::fabs(hist[c] - global[c]) / 2;
        distinct += hist[c] > 0;
      }
      s.tv += tv;
      s.distinct += distinct;
      ++batches;
    }
    if (!previous_batch_of.empty()) {
      // Pairs sharing a batch in the previous epoch that share one again.
      uint64_t pairs = 0, again = 0;
      std::vector<std::vector<uint64_t>> members(n / b + 1);
      for (uint64_t id = 0; id < n; ++id) members[previous_batch_of[id]].push_back(id);
      for (const std::vector<uint64_t>& m : members) {
        for (size_t i = 0; i < m.size(); ++i) {
          for (size_t j = i + 1; j < m.size(); ++j) {
            ++pairs;
            again += batch_of[m[i]] == batch_of[m[j]];
          }
        }
      }
      repeat_sum += pairs ? static_cast<double>(again) / pairs : 0;
      ++repeat_epochs;
    }
    previous_batch_of = std::move(batch_of);
  }
  s.distinct /= batches;
  s.tv /= batches;
  s.displacement /= epochs;
  s.repeats = repeat_epochs ? repeat_sum / repeat_epochs : 0;
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  sophon::ParseProgramFlags(
      argc, argv,
      "Measures how random the group-aware order is.\n"
      "Usage: sophon-order-stats --pack=PACKDIR [--windows=0,1,4,8,32]");
  absl::StatusOr<sophon::PackIndex> index = sophon::ReadPackIndex(absl::GetFlag(FLAGS_pack));
  if (!index.ok()) {
    std::fprintf(stderr, "sophon-order-stats: %s\n", std::string(index.status().message()).c_str());
    return 1;
  }
  const int b = absl::GetFlag(FLAGS_batch_size);
  const int epochs = absl::GetFlag(FLAGS_epochs);
  if (b < 1 || epochs < 2) {
    std::fprintf(stderr, "sophon-order-stats: --batch-size must be >= 1 and --epochs >= 2\n");
    return 2;
  }
  std::vector<uint32_t> labels;
  for (const sophon::PackedSample& s : index->samples) labels.push_back(s.label);
  sophon::Shard shard;
  shard.size = labels.size();
  shard.group_size = index->group_size;
  const std::vector<sophon::SampleGroup> groups = sophon::ShardGroups({shard});
  std::printf("%zu samples, %zu classes, groups of %u, batches of %d, %d epochs\n\n",
              labels.size(), index->class_names.size(), index->group_size, b, epochs);
  std::printf("| order | distinct labels per batch | label TV distance | displacement | "
              "pairs again in one batch |\n|---|---:|---:|---:|---:|\n");
  for (absl::string_view w : absl::StrSplit(absl::GetFlag(FLAGS_windows), ',')) {
    int window = 0;
    if (!absl::SimpleAtoi(w, &window) || window < 0) {
      std::fprintf(stderr, "sophon-order-stats: --windows: '%s' is not a window\n",
                   std::string(w).c_str());
      return 2;
    }
    const Stats s = Measure(labels, static_cast<int>(index->class_names.size()), groups, window, b,
                            epochs, absl::GetFlag(FLAGS_seed));
    std::printf("| %s | %.2f | %.3f | %.3f | %.4f |\n",
                window == 0 ? "full shuffle" : ("window " + std::to_string(window)).c_str(),
                s.distinct, s.tv, s.displacement, s.repeats);
  }
  return 0;
}
