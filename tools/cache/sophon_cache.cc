// sophon-cache: page-cache control for a dataset on a storage node, like
// vmtouch. Reports how much of the dataset's files is resident in the page
// cache, evicts them (so an experiment starts cold) or reads them in (so it
// starts fully cached).
//   sophon-cache --data=DIR [--status]   residency only
//   sophon-cache --data=DIR --evict      posix_fadvise(DONTNEED) every file
//   sophon-cache --data=DIR --warm       read every file
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "sophon/cli/cli.h"
#include "sophon/data/open_source.h"
#include "sophon/data/page_cache.h"

ABSL_FLAG(std::string, data, "",
          "Dataset: an ImageFolder root (DIR/CLASS/*.jpg) or a pack folder. Required.");
ABSL_FLAG(bool, evict, false, "Drop the dataset's files from the page cache. Default false.");
ABSL_FLAG(bool, warm, false, "Read the dataset's files into the page cache. Default false.");
ABSL_FLAG(bool, status, false,
          "Print the resident fraction only (the default when neither --evict nor --warm).");

namespace {

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "sophon-cache: %s\n", std::string(status.message()).c_str());
  return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  sophon::ParseProgramFlags(
      argc, argv,
      "Page-cache control for a dataset.\nUsage: sophon-cache --data=DIR [--status | --evict | "
      "--warm]");
  const bool evict = absl::GetFlag(FLAGS_evict);
  const bool warm = absl::GetFlag(FLAGS_warm);
  if (evict && warm) {
    return Fail(absl::InvalidArgumentError("--evict and --warm exclude each other"));
  }
  if (absl::GetFlag(FLAGS_data).empty()) {
    return Fail(absl::InvalidArgumentError("--data=DIR is required"));
  }
  absl::StatusOr<std::unique_ptr<sophon::SampleSource>> dataset =
      sophon::OpenSampleSource(absl::GetFlag(FLAGS_data));
  if (!dataset.ok()) return Fail(dataset.status());
  const std::vector<std::string> paths = sophon::DatasetFilePaths(**dataset);

  absl::StatusOr<sophon::CacheResidency> before = sophon::MeasureResidency(paths);
  if (!before.ok()) return Fail(before.status());
  std::printf("%s: %s\n", (evict || warm) ? "before" : "resident",
              sophon::FormatResidency(*before).c_str());
  if (!evict && !warm) return 0;
  absl::StatusOr<sophon::CacheResidency> after =
      evict ? sophon::EvictFromPageCache(paths) : sophon::WarmPageCache(paths);
  if (!after.ok()) return Fail(after.status());
  std::printf("after %s: %s\n", evict ? "evict" : "warm", sophon::FormatResidency(*after).c_str());
  if (evict && after->fraction() > 0.5) {
    std::fprintf(stderr,
                 "sophon-cache: warning: %.0f%% is still resident; this filesystem may not "
                 "support eviction (tmpfs?), or another process maps the files\n",
                 100 * after->fraction());
  }
  return 0;
}
