// sophon-stall-report: the arithmetic of the differential stall analysis
// (sophon/emulation/stall.h) for tools/sophon-stall. With --label it adds one row,
// computed from the three runs' figures, to the stall CSV; then it prints the
// table of every row in the CSV.
//   sophon-stall-report --csv=out/stall.csv --label=alexnet --images=1024 \
//       --synthetic-ips=2400 --cached-seconds=3.1 --configured-seconds=4.0
//   sophon-stall-report --csv=out/stall.csv          # table only
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "sophon/cli/cli.h"
#include "sophon/base/csv.h"
#include "sophon/emulation/stall.h"

ABSL_FLAG(std::string, csv, "", "Stall CSV to add to and print. Required.");
ABSL_FLAG(std::string, label, "", "Label of the row to add (e.g. the model); none = print only.");
ABSL_FLAG(int64_t, images, 0, "Images in the epoch of runs (2) and (3).");
ABSL_FLAG(double, synthetic_ips, 0, "Run (1): images/s of the training step alone.");
ABSL_FLAG(double, cached_seconds, 0, "Run (2): epoch seconds with the dataset fully cached.");
ABSL_FLAG(double, configured_seconds, 0, "Run (3): epoch seconds as configured (cold cache).");

namespace {

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "sophon-stall-report: %s\n", std::string(status.message()).c_str());
  return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  sophon::ParseProgramFlags(
      argc, argv,
      "Differential data-stall breakdown.\nUsage: sophon-stall-report --csv=FILE [--label=L "
      "--images=N --synthetic-ips=R --cached-seconds=T2 --configured-seconds=T3]");
  const std::string path = absl::GetFlag(FLAGS_csv);
  if (path.empty()) return Fail(absl::InvalidArgumentError("--csv is required"));

  std::vector<sophon::StallRow> rows;
  if (std::filesystem::exists(path)) {
    absl::StatusOr<std::string> text = sophon::csv::ReadFile(path);
    if (!text.ok()) return Fail(text.status());
    absl::StatusOr<std::vector<sophon::StallRow>> parsed = sophon::ParseStallCsv(*text, path);
    if (!parsed.ok()) return Fail(parsed.status());
    rows = *std::move(parsed);
  }
  if (!absl::GetFlag(FLAGS_label).empty()) {
    sophon::StallRow row;
    row.label = absl::GetFlag(FLAGS_label);
    row.inputs.images = static_cast<uint64_t>(std::max<int64_t>(0, absl::GetFlag(FLAGS_images)));
    row.inputs.synthetic_images_per_second = absl::GetFlag(FLAGS_synthetic_ips);
    row.inputs.cached_epoch_seconds = absl::GetFlag(FLAGS_cached_seconds);
    row.inputs.configured_epoch_seconds = absl::GetFlag(FLAGS_configured_seconds);
    absl::StatusOr<sophon::StallBreakdown> b = sophon::ComputeStallBreakdown(row.inputs);
    if (!b.ok()) return Fail(b.status());
    row.breakdown = *b;
    rows.push_back(row);
    std::ofstream out(path);
    out << sophon::FormatStallCsv(rows);
    if (!out) return Fail(absl::UnavailableError(absl::StrCat("cannot write '", path, "'")));
  }
  std::fputs(sophon::FormatStallTable(rows).c_str(), stdout);
  return 0;
}
