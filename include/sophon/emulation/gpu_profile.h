// GPU step-time profiles: how long one training step of a model takes on a
// GPU type, split into the host-to-device copy of the batch and the compute
// (forward + backward + optimizer step). `sophon-train --device=emulate`
// sleeps for these times instead of running the model; `sophon-profile-gpu`
// measures a real device and writes them.
//
// Two file formats are read (see profiles/gpu/README.md):
//  * Sophon's CSV, with this header (units in the column names):
//      gpu_type,model,batch_size,copy_seconds_per_batch,compute_seconds_per_batch,source
//    Fields may be double-quoted ("a, b"; "" is a quote). Blank lines and
//    lines starting with '#' are ignored.
//  * The original emulator's profile: tab-separated, no header, 12 columns
//    (GPU type, GPU memory, model name, batch size, input size, memory
//    required MB, cpu-to-gpu seconds per batch, GPU compute seconds per batch,
//    batches per epoch, transfer time per epoch, compute time per epoch,
//    reason), with N/A in the time columns where the model did not fit.
// No LibTorch, no logging: callers log what Lookup() reports.
#ifndef SOPHON_EMULATION_GPU_PROFILE_H_
#define SOPHON_EMULATION_GPU_PROFILE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sophon {

// Sophon's CSV header line, as FormatGpuProfileCsv writes it.
inline constexpr char kGpuProfileHeader[] =
    "gpu_type,model,batch_size,copy_seconds_per_batch,compute_seconds_per_batch,source";

struct GpuProfileRow {
  std::string gpu_type;        // as written in the file ("V100", "v100", ...)
  std::string model;           // architecture name as sophon-train spells it
  int batch_size = 0;          // > 0
  double copy_seconds = 0;     // host-to-device copy of one batch, >= 0
  double compute_seconds = 0;  // forward + backward + optimizer step of one batch, >= 0
  std::string source;          // where the figures come from (free text)
  bool fits = true;            // false: the original format said N/A (did not fit)
  std::string origin;          // "FILE:LINE" the row was read from
};

// The step time for one (GPU type, model, batch size), as Lookup() found it.
struct GpuStepTime {
  double copy_seconds = 0;
  double compute_seconds = 0;
  GpuProfileRow row;    // the row used (before any scaling)
  bool scaled = false;  // true when no row had this batch size
  std::string note;     // one line for the log: the row used, and any scaling
};

// Rows of one or more profile files. Immutable after loading; thread-safe.
class GpuProfile {
 public:
  GpuProfile() = default;

  // Parses `text`, detecting the format from its first non-comment line: the
  // Sophon header, or 12 tab-separated fields. `name` (a file name) is used
  // in errors and in each row's origin. InvalidArgument names name:line for a
  // malformed row (wrong column count, bad number, batch size <= 0, negative
  // time) and for a (gpu, model, batch) key given twice.
  static absl::StatusOr<GpuProfile> Parse(absl::string_view text, const std::string& name);

  // Reads and parses one file; NotFound when it cannot be opened.
  static absl::StatusOr<GpuProfile> Load(const std::string& path);

  // Loads comma-separated paths in order; a row of a later file replaces the
  // row with the same (gpu, model, batch) key of an earlier one.
  static absl::StatusOr<GpuProfile> LoadAll(const std::vector<std::string>& paths);

  // Adds `other`'s rows, replacing rows with the same key.
  void Merge(const GpuProfile& other);

  // The step time of `model` on `gpu_type` (both matched case-insensitively)
  // at `batch_size`. Without a row for that batch size, the times of the row
  // with the nearest batch size are scaled linearly (times * batch /
  // row batch) and the note says so. Errors: NotFound (listing what the
  // profile has) when no row matches gpu and model; FailedPrecondition when
  // the original format marked this or a smaller batch size N/A (did not fit).
  absl::StatusOr<GpuStepTime> Lookup(const std::string& gpu_type, const std::string& model,
                                     int batch_size) const;

  const std::vector<GpuProfileRow>& rows() const { return rows_; }

 private:
  std::vector<GpuProfileRow> rows_;
};

// Rows in Sophon's CSV format, header first (N/A rows are left out).
std::string FormatGpuProfileCsv(const std::vector<GpuProfileRow>& rows);

}  // namespace sophon

#endif  // SOPHON_EMULATION_GPU_PROFILE_H_
