// The storage servers a training job reads from, as the user lists them.
#ifndef SOPHON_CLIENT_LOADER_SERVER_LIST_H_
#define SOPHON_CLIENT_LOADER_SERVER_LIST_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sophon {

// "host1:port,host2:port" -> addresses (spaces around items dropped).
// InvalidArgument naming the item for an empty one, one without a port, or
// one listed twice.
absl::StatusOr<std::vector<std::string>> ParseServerList(absl::string_view list);

// A file with one HOST:PORT a line; blank lines and lines starting with '#'
// are skipped. Errors name the file and the line.
absl::StatusOr<std::vector<std::string>> ReadServersFile(const std::string& path);

}  // namespace sophon

#endif  // SOPHON_CLIENT_LOADER_SERVER_LIST_H_
