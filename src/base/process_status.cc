#include "sophon/base/process_status.h"

#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace sophon {

absl::StatusOr<ProcessStatus> ReadProcessStatus(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  ProcessStatus status;
  bool have_rss = false, have_threads = false;
  std::string line;
  while (std::getline(in, line)) {
    absl::string_view rest = line;
    const bool rss = absl::ConsumePrefix(&rest, "VmRSS:");
    if (rss || absl::ConsumePrefix(&rest, "VmHWM:")) {
      // "VmRSS:	  123456 kB"
      rest = absl::StripAsciiWhitespace(rest);
      absl::ConsumeSuffix(&rest, "kB");
      uint64_t kb = 0;
      if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(rest), &kb)) {
        return absl::DataLossError(absl::StrCat(path, ": bad memory line: ", line));
      }
      (rss ? status.rss_bytes : status.peak_rss_bytes) = kb * 1024;
      have_rss = have_rss || rss;
    } else if (absl::ConsumePrefix(&rest, "Threads:")) {
      if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(rest), &status.threads)) {
        return absl::DataLossError(absl::StrCat(path, ": bad Threads line: ", line));
      }
      have_threads = true;
    }
  }
  if (!have_rss || !have_threads) {
    return absl::DataLossError(
        absl::StrCat(path, ": no ", have_rss ? "Threads" : "VmRSS", " line"));
  }
  return status;
}

uint64_t ResidentBytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long long size = 0, resident = 0;
  const int n = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  if (n != 2) return 0;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

int OpenFileDescriptors() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int n = 0;
  while (const dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++n;
  }
  closedir(dir);
  return n - 1;  // the descriptor opendir itself holds
}

}  // namespace sophon
