// Resident memory, thread count and open files of this process, from /proc.
#ifndef SOPHON_BASE_PROCESS_STATUS_H_
#define SOPHON_BASE_PROCESS_STATUS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace sophon {

struct ProcessStatus {
  uint64_t rss_bytes = 0;       // VmRSS: resident set size
  uint64_t peak_rss_bytes = 0;  // VmHWM: the most ever resident (0 if not reported)
  int threads = 0;         // Threads
};

// Parses a /proc/<pid>/status file (VmRSS in kB, Threads). Errors name the
// file and the missing field.
absl::StatusOr<ProcessStatus> ReadProcessStatus(const std::string& path = "/proc/self/status");

// Resident set size in bytes from /proc/self/statm (cheaper than the status
// file: one line of numbers); 0 when it cannot be read.
uint64_t ResidentBytes();

// Number of open file descriptors (entries of /proc/self/fd); -1 when the
// directory cannot be read.
int OpenFileDescriptors();

}  // namespace sophon

#endif  // SOPHON_BASE_PROCESS_STATUS_H_
