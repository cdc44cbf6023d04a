// sophon-pack: writes a dataset as WebDataset tar shards in groups the
// storage node reads at once, indexes shards that exist, verifies a pack.
//   sophon-pack --data=DIR --out=PACKDIR [--group-size=G | --group-bytes=N]
//   sophon-pack index PACKDIR [--group-size=G] [--follow-symlinks=inside|all]
//   sophon-pack verify PACKDIR [--follow-symlinks=inside|all]
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "sophon/cli/cli.h"
#include "sophon/data/open_source.h"
#include "sophon/data/pack_writer.h"

ABSL_FLAG(std::string, data, "",
          "Dataset to pack: an ImageFolder root (DIR/CLASS/*.jpg) or another pack. Required to "
          "write a pack.");
ABSL_FLAG(std::string, out, "", "Folder the pack is written to (created; must be empty).");
ABSL_FLAG(int, group_size, 32,
          "Samples per group: the storage node reads a group with one I/O. Default 32 (for "
          "`index`: the group size of the shards found).");
ABSL_FLAG(int64_t, group_bytes, 0,
          "Instead of --group-size: groups of about this many bytes (the group size is this "
          "over the mean sample size). Default 0 = use --group-size.");
ABSL_FLAG(int64_t, shard_bytes, int64_t{1} << 30,
          "A shard is closed at the first group boundary past this many bytes. Default 1 GiB.");
ABSL_FLAG(bool, shuffle, true,
          "Shuffle the samples before grouping them, so that each group mixes classes. Default "
          "true.");
ABSL_FLAG(uint64_t, seed, 0, "Seed of that shuffle. Default 0.");
ABSL_FLAG(bool, progress, true, "A progress line on a terminal (stderr). Default true.");
ABSL_FLAG(std::string, follow_symlinks, "inside",
          "Which symbolic links are followed, as by sophon-server --follow-symlinks: 'inside' "
          "(only those whose target lies inside the dataset root or the pack folder: a shard, "
          "index or classes.txt that resolves outside the pack folder is refused, so `index` "
          "indexes only what the server would read) or 'all'. Default inside.");

namespace {

// The options whose errors name a flag.
const sophon::FlagNames kFlagNames = {
    {"ImageFolderOptions.follow_symlinks", "--follow-symlinks"},
    {"PackSourceOptions.follow_symlinks", "--follow-symlinks"},
};

int Fail(const absl::Status& status) {
  return sophon::FailProgram("sophon-pack", status, kFlagNames);
}

// --follow-symlinks, parsed (checked before any command runs).
sophon::FollowSymlinks FollowFlag() {
  return *sophon::ParseFollowSymlinks(absl::GetFlag(FLAGS_follow_symlinks));
}

// A progress line rewritten in place on a terminal, at most 10 times a second.
sophon::PackProgressFn ProgressLine(const char* verb) {
  if (!absl::GetFlag(FLAGS_progress) || !isatty(STDERR_FILENO)) return nullptr;
  const absl::Time start = absl::Now();
  auto last = std::make_shared<absl::Time>(absl::InfinitePast());
  return [=](const sophon::PackProgress& p) {
    const absl::Time now = absl::Now();
    const bool done = p.samples_total > 0 && p.samples_done == p.samples_total;
    if (!done && now - *last < absl::Milliseconds(100)) return;
    *last = now;
    const double s = absl::ToDoubleSeconds(now - start);
    if (p.samples_total > 0) {
      std::fprintf(stderr, "\r%s %llu / %llu samples (%.1f MB, %.1f MB/s)%s", verb,
                   static_cast<unsigned long long>(p.samples_done),
                   static_cast<unsigned long long>(p.samples_total), p.bytes_done / 1e6,
                   s > 0 ? p.bytes_done / 1e6 / s : 0.0, done ? "\n" : "");
    } else {
      std::fprintf(stderr, "\r%s %llu samples (%.1f MB)", verb,
                   static_cast<unsigned long long>(p.samples_done), p.bytes_done / 1e6);
    }
  };
}

int Write() {
  if (absl::GetFlag(FLAGS_data).empty() || absl::GetFlag(FLAGS_out).empty()) {
    return Fail(absl::InvalidArgumentError("--data=DIR and --out=PACKDIR are required"));
  }
  sophon::ImageFolderOptions source_options;
  source_options.follow_symlinks = FollowFlag();
  absl::StatusOr<std::unique_ptr<sophon::SampleSource>> source =
      sophon::OpenSampleSource(absl::GetFlag(FLAGS_data), source_options);
  if (!source.ok()) return Fail(source.status());
  sophon::PackWriteOptions options;
  if (absl::GetFlag(FLAGS_group_bytes) > 0) {
    options.group_size = 0;
    options.group_bytes = absl::GetFlag(FLAGS_group_bytes);
  } else {
    if (absl::GetFlag(FLAGS_group_size) < 1) {
      return Fail(absl::InvalidArgumentError(absl::StrCat(
          "--group-size must be >= 1, got ", absl::GetFlag(FLAGS_group_size))));
    }
    options.group_size = static_cast<uint32_t>(absl::GetFlag(FLAGS_group_size));
  }
  options.shard_bytes = absl::GetFlag(FLAGS_shard_bytes);
  options.shuffle = absl::GetFlag(FLAGS_shuffle);
  options.seed = absl::GetFlag(FLAGS_seed);
  if (absl::Status s = options.Validate(); !s.ok()) {
    return Fail(absl::InvalidArgumentError(absl::StrCat("--shard-bytes: ", s.message())));
  }
  const absl::Time start = absl::Now();
  absl::StatusOr<sophon::PackIndex> index = sophon::WritePack(
      **source, absl::GetFlag(FLAGS_out), options, ProgressLine("packed"));
  if (!index.ok()) return Fail(index.status());
  uint64_t bytes = 0;
  for (const sophon::PackedSample& s : index->samples) bytes += s.size;
  std::printf("packed %zu samples (%.1f MB) of %s into %zu shards in %s: groups of %u, %.1f s\n",
              index->samples.size(), bytes / 1e6, (*source)->name().c_str(),
              index->shards.size(), absl::GetFlag(FLAGS_out).c_str(), index->group_size,
              absl::ToDoubleSeconds(absl::Now() - start));
  return 0;
}

int Index(const std::string& dir) {
  if (absl::GetFlag(FLAGS_group_size) < 1) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("--group-size must be >= 1, got ", absl::GetFlag(FLAGS_group_size))));
  }
  absl::StatusOr<sophon::PackIndex> index = sophon::IndexShards(
      dir, static_cast<uint32_t>(absl::GetFlag(FLAGS_group_size)), ProgressLine("indexed"),
      FollowFlag());
  if (!index.ok()) return Fail(index.status());
  std::printf("indexed %zu samples of %zu classes in %zu shards of %s: groups of %u\n",
              index->samples.size(), index->class_names.size(), index->shards.size(),
              dir.c_str(), index->group_size);
  return 0;
}

int Verify(const std::string& dir) {
  absl::StatusOr<sophon::PackVerifyReport> report =
      sophon::VerifyPack(dir, ProgressLine("verified"), FollowFlag());
  if (!report.ok()) return Fail(report.status());
  for (const std::string& e : report->errors) std::fprintf(stderr, "sophon-pack: %s\n", e.c_str());
  if (report->bad > report->errors.size()) {
    std::fprintf(stderr, "sophon-pack: ... and %llu more\n",
                 static_cast<unsigned long long>(report->bad - report->errors.size()));
  }
  std::printf("%s: %llu samples, %llu bad\n", dir.c_str(),
              static_cast<unsigned long long>(report->samples),
              static_cast<unsigned long long>(report->bad));
  return report->bad == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> rest = sophon::ParseProgramFlags(
      argc, argv,
      "Packs a dataset as WebDataset tar shards with an index, indexes existing shards, or "
      "verifies a pack.\n"
      "Usage: sophon-pack --data=DIR --out=PACKDIR [--group-size=G | --group-bytes=N]\n"
      "       sophon-pack index PACKDIR [--group-size=G]\n"
      "       sophon-pack verify PACKDIR");
  if (absl::Status s = sophon::ParseFollowSymlinks(absl::GetFlag(FLAGS_follow_symlinks)).status();
      !s.ok()) {
    return Fail(s);
  }
  if (rest.size() == 1) return Write();
  const std::string command = rest[1];
  if ((command == "index" || command == "verify") && rest.size() == 3) {
    return command == "index" ? Index(rest[2]) : Verify(rest[2]);
  }
  return Fail(absl::InvalidArgumentError(
      "usage: sophon-pack --data=DIR --out=PACKDIR | sophon-pack index PACKDIR | sophon-pack "
      "verify PACKDIR"));
}
