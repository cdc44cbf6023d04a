#include "client/loader/server_list.h"

#include <fstream>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace sophon {
namespace {

absl::Status CheckAddress(absl::string_view address, absl::string_view where) {
  const size_t colon = address.rfind(':');
  uint32_t port = 0;
  if (address.empty() || colon == absl::string_view::npos || colon == 0 ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port == 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(where, "'", address,
                                                   "' is not a storage server HOST:PORT"));
  }
  return absl::OkStatus();
}

absl::Status AddAddress(absl::string_view address, absl::string_view where,
                        std::vector<std::string>* out, std::set<std::string>* seen) {
  if (absl::Status s = CheckAddress(address, where); !s.ok()) return s;
  if (!seen->insert(std::string(address)).second) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "storage server ", address, " is listed twice"));
  }
  out->emplace_back(address);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ParseServerList(absl::string_view list) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (absl::string_view item : absl::StrSplit(list, ',')) {
    if (absl::Status s = AddAddress(absl::StripAsciiWhitespace(item), "", &out, &seen); !s.ok()) {
      return s;
    }
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> ReadServersFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot read the servers file '", path, "'"));
  }
  std::vector<std::string> out;
  std::set<std::string> seen;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    const absl::string_view item = absl::StripAsciiWhitespace(line);
    if (item.empty() || item[0] == '#') continue;
    if (absl::Status s = AddAddress(item, absl::StrCat(path, ":", n, ": "), &out, &seen);
        !s.ok()) {
      return s;
    }
  }
  if (out.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the servers file '", path, "' lists no storage server"));
  }
  return out;
}

}  // namespace sophon
