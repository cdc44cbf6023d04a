// Data-stall breakdown by the differential method (as in "Analyzing and
// Mitigating Data Stalls in DNN Training", DS-Analyzer): three runs of the
// same epoch size,
//   (1) the training step alone on synthetic in-memory batches: its maximum
//       ingestion rate gives the compute time of the epoch;
//   (2) the real pipeline with the dataset fully in the page cache: what it
//       takes beyond (1) is the prep stall (CPU preprocessing not hidden);
//   (3) the real pipeline as configured (cold cache, remote server, link):
//       what it takes beyond (2) is the fetch stall (I/O and network).
#ifndef SOPHON_EMULATION_STALL_H_
#define SOPHON_EMULATION_STALL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace sophon {

struct StallInputs {
  uint64_t images = 0;                     // images in the epoch of runs (2) and (3)
  double synthetic_images_per_second = 0;  // run (1)
  double cached_epoch_seconds = 0;         // run (2)
  double configured_epoch_seconds = 0;     // run (3)
};

struct StallBreakdown {
  double epoch_seconds = 0;        // run (3): compute + prep_stall + fetch_stall
  double compute_seconds = 0;      // images / synthetic rate, at most epoch_seconds
  double prep_stall_seconds = 0;   // (2) - (1), clamped to [0, epoch - compute]
  double fetch_stall_seconds = 0;  // the rest of the epoch: (3) - (2) when nothing was clamped
  // The differences before clamping: negative values are measurement noise
  // (a run that was faster than the one it is compared with).
  double raw_prep_stall_seconds = 0;
  double raw_fetch_stall_seconds = 0;
  bool clamped = false;  // a raw difference fell outside its range

  double compute_fraction() const;
  double prep_fraction() const;
  double fetch_fraction() const;
};

// InvalidArgument for images == 0 or a rate or time that is not > 0.
absl::StatusOr<StallBreakdown> ComputeStallBreakdown(const StallInputs& in);

// One labelled breakdown ("alexnet", "resnet50 / nooff", ...).
struct StallRow {
  std::string label;
  StallInputs inputs;
  StallBreakdown breakdown;
};

// A fixed-width table: label, epoch s, compute s (%), prep stall s (%),
// fetch stall s (%).
std::string FormatStallTable(const std::vector<StallRow>& rows);

// CSV with a header line; ParseStallCsv reads it back (errors name line).
std::string FormatStallCsv(const std::vector<StallRow>& rows);
absl::StatusOr<std::vector<StallRow>> ParseStallCsv(const std::string& text,
                                                    const std::string& name);

}  // namespace sophon

#endif  // SOPHON_EMULATION_STALL_H_
