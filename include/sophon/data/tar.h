// POSIX ustar archive members: what a pack's shards are made of (a shard is a
// WebDataset tar: the files KEY.jpg and KEY.cls of each sample, in order).
// Writing appends members to a buffer; reading checks one 512-byte header
// block as untrusted input (checksum, magic, octal fields, the member's type
// and name, and that its data lies inside the file) before anything trusts it.
#ifndef SOPHON_DATA_TAR_H_
#define SOPHON_DATA_TAR_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sophon {

inline constexpr uint64_t kTarBlock = 512;
// The largest member size a ustar header's 11 octal digits can hold.
inline constexpr uint64_t kMaxTarMemberBytes = (uint64_t{1} << 33) - 1;

// Bytes a member of `size` data bytes takes: its header and its data padded
// to whole blocks.
constexpr uint64_t TarMemberBytes(uint64_t size) {
  return kTarBlock + (size + kTarBlock - 1) / kTarBlock * kTarBlock;
}

// Appends a regular file member `name` holding `data` to `out` (mode 0644,
// owner 0, mtime 0, so a pack's bytes depend only on its contents).
// InvalidArgument naming the member for a name that is empty, absolute, has a
// "." or ".." component, a control character, or does not fit ustar's 100 +
// 155 bytes (split at a '/'), or for data over kMaxTarMemberBytes.
absl::Status AppendTarMember(absl::string_view name, absl::string_view data, std::string* out);
// Appends the two zero blocks that end an archive.
void AppendTarEnd(std::string* out);

// One member as its header describes it.
struct TarMember {
  std::string name;         // prefix/name, checked as AppendTarMember's names
  uint64_t data_offset = 0; // in the file: the header's offset + 512
  uint64_t size = 0;        // data bytes
  bool pax = false;
  // A pax extended header ('x' or 'g', only with allow_pax): its data holds
  // records for the next member (ApplyPaxRecords), `name` is meaningless.
  // The offset of the next header: data_offset + size padded to a block.
  uint64_t next_offset() const {
    return data_offset + (size + kTarBlock - 1) / kTarBlock * kTarBlock;
  }
};

// Parses the header block `block` (kTarBlock bytes) found at `offset` of a
// file of `file_size` bytes named `file` (for messages). nullopt for a zero
// block (the end of the archive). InvalidArgument naming the file and the
// offset for a bad checksum, magic or octal field, a member other than a
// regular file (links, directories, pax and GNU extension headers), a bad
// name, or data past the end of the file. With allow_pax a pax extended
// header (which Python's tarfile writes before a member with a long name or a
// fractional mtime) comes back with `pax` set.
absl::StatusOr<std::optional<TarMember>> ParseTarHeader(absl::string_view block, uint64_t offset,
                                                        uint64_t file_size, absl::string_view file,
                                                        bool allow_pax = false);

// Applies the records of a pax extended header's data to the member that
// follows it: `path` replaces its name (checked as AppendTarMember's names),
// `size` its size; other keys are ignored. InvalidArgument for a malformed
// record. The caller checks the new size against the file.
absl::Status ApplyPaxRecords(absl::string_view records, TarMember* next);

}  // namespace sophon

#endif  // SOPHON_DATA_TAR_H_
