#include "sophon/data/tar.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace sophon {
namespace {

// ustar header fields: offset and length.
struct Field {
  size_t offset, length;
};
constexpr Field kName{0, 100}, kMode{100, 8}, kUid{108, 8}, kGid{116, 8}, kSize{124, 12},
    kMtime{136, 12}, kChecksum{148, 8}, kType{156, 1}, kMagic{257, 6}, kVersion{263, 2},
    kPrefix{345, 155};

absl::Status CheckName(absl::string_view name) {
  const auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("tar member name '", absl::CEscape(name),
                                                   "' ", why));
  };
  if (name.empty()) return bad("is empty");
  if (name.front() == '/') return bad("is absolute");
  for (unsigned char c : name) {
    if (c < 0x20 || c == 0x7f) return bad("holds a control character");
  }
  for (absl::string_view part : absl::StrSplit(name, '/')) {
    if (part.empty() || part == "." || part == "..") {
      return bad("has an empty, '.' or '..' component");
    }
  }
  return absl::OkStatus();
}

void PutOctal(uint64_t value, Field f, char* header) {
  // length - 1 digits and a NUL.
  std::string digits(f.length - 1, '0');
  for (size_t i = digits.size(); i-- > 0 && value > 0; value >>= 3) {
    digits[i] = static_cast<char>('0' + (value & 7));
  }
  std::memcpy(header + f.offset, digits.data(), digits.size());
  header[f.offset + f.length - 1] = '\0';
}

// An octal field: digits, optionally led by spaces and ended by NUL or
// space. nullopt if anything else.
std::optional<uint64_t> GetOctal(absl::string_view header, Field f) {
  absl::string_view s = header.substr(f.offset, f.length);
  size_t i = 0;
  while (i < s.size() && s[i] == ' ') ++i;
  uint64_t value = 0;
  size_t digits = 0;
  for (; i < s.size() && s[i] >= '0' && s[i] <= '7'; ++i, ++digits) {
    value = value * 8 + static_cast<uint64_t>(s[i] - '0');
  }
  if (digits == 0) return std::nullopt;
  for (; i < s.size(); ++i) {
    if (s[i] != '\0' && s[i] != ' ') return std::nullopt;
  }
  return value;
}

absl::string_view GetString(absl::string_view header, Field f) {
  absl::string_view s = header.substr(f.offset, f.length);
  return s.substr(0, std::min(s.size(), s.find('\0')));
}

uint64_t Checksum(absl::string_view header) {
  uint64_t sum = 0;
  for (size_t i = 0; i < kTarBlock; ++i) {
    const bool in_field = i >= kChecksum.offset && i < kChecksum.offset + kChecksum.length;
    sum += in_field ? ' ' : static_cast<unsigned char>(header[i]);
  }
  return sum;
}

}  // namespace

absl::Status AppendTarMember(absl::string_view name, absl::string_view data, std::string* out) {
  if (absl::Status s = CheckName(name); !s.ok()) return s;
  if (data.size() > kMaxTarMemberBytes) {
    return absl::InvalidArgumentError(absl::StrCat("tar member '", name, "' holds ", data.size(),
                                                   " bytes, over ustar's ", kMaxTarMemberBytes));
  }
  // The name, or a prefix (up to a '/') and the rest.
  absl::string_view prefix, rest = name;
  if (name.size() > kName.length) {
    const size_t cut = name.rfind('/', kPrefix.length);
    if (cut == absl::string_view::npos || name.size() - cut - 1 > kName.length) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tar member name '", name, "' does not fit ustar's 100 + 155 bytes split at a '/'"));
    }
    prefix = name.substr(0, cut);
    rest = name.substr(cut + 1);
  }
  char header[kTarBlock] = {};
  std::memcpy(header + kName.offset, rest.data(), rest.size());
  std::memcpy(header + kPrefix.offset, prefix.data(), prefix.size());
  PutOctal(0644, kMode, header);
  PutOctal(0, kUid, header);
  PutOctal(0, kGid, header);
  PutOctal(data.size(), kSize, header);
  PutOctal(0, kMtime, header);
  header[kType.offset] = '0';
  std::memcpy(header + kMagic.offset, "ustar", 6);  // with its NUL
  std::memcpy(header + kVersion.offset, "00", 2);
  // Six octal digits, a NUL and a space.
  const uint64_t sum = Checksum(absl::string_view(header, kTarBlock));
  PutOctal(sum, Field{kChecksum.offset, 7}, header);
  header[kChecksum.offset + 7] = ' ';
  out->append(header, kTarBlock);
  out->append(data.data(), data.size());
  out->append((kTarBlock - data.size() % kTarBlock) % kTarBlock, '\0');
  return absl::OkStatus();
}

void AppendTarEnd(std::string* out) { out->append(2 * kTarBlock, '\0'); }

absl::StatusOr<std::optional<TarMember>> ParseTarHeader(absl::string_view block, uint64_t offset,
                                                        uint64_t file_size, absl::string_view file,
                                                        bool allow_pax) {
  const auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat(file, ": the tar header at offset ", offset, " ", why));
  };
  if (block.size() != kTarBlock) {
    return bad(absl::StrCat("is ", block.size(), " bytes, not ", kTarBlock, " (truncated)"));
  }
  if (std::all_of(block.begin(), block.end(), [](char c) { return c == '\0'; })) {
    return std::optional<TarMember>();
  }
  const std::optional<uint64_t> sum = GetOctal(block, kChecksum);
  if (!sum || *sum != Checksum(block)) return bad("has a bad checksum");
  if (block.substr(kMagic.offset, 5) != "ustar") return bad("is not a ustar header");
  const char type = block[kType.offset];
  const bool pax = allow_pax && (type == 'x' || type == 'g');
  if (type != '0' && type != '\0' && !pax) {
    return bad(absl::StrCat("describes a member of type '", absl::CEscape(std::string(1, type)),
                            "'; a pack holds regular files only (no links, directories or pax "
                            "and GNU extension headers)"));
  }
  const std::optional<uint64_t> size = GetOctal(block, kSize);
  if (!size) return bad("has a bad size field");
  TarMember m;
  const absl::string_view prefix = GetString(block, kPrefix);
  m.name = prefix.empty() ? std::string(GetString(block, kName))
                          : absl::StrCat(prefix, "/", GetString(block, kName));
  m.pax = pax;
  if (absl::Status s = CheckName(m.name); !s.ok() && !pax) return bad(s.message());
  m.data_offset = offset + kTarBlock;
  m.size = *size;
  if (m.data_offset > file_size || m.size > file_size - m.data_offset) {
    return bad(absl::StrCat("gives '", m.name, "' ", m.size, " bytes, past the end of the ",
                            file_size, "-byte file (truncated?)"));
  }
  return std::optional<TarMember>(std::move(m));
}

absl::Status ApplyPaxRecords(absl::string_view records, TarMember* next) {
  while (!records.empty()) {
    // "LENGTH key=value\n", LENGTH counting the whole record.
    const size_t space = records.find(' ');
    uint64_t length = 0;
    if (space == absl::string_view::npos || space == 0 ||
        !absl::SimpleAtoi(records.substr(0, space), &length) || length <= space + 1 ||
        length > records.size() || records[length - 1] != '\n') {
      return absl::InvalidArgumentError("malformed pax extended header record");
    }
    const absl::string_view record = records.substr(space + 1, length - space - 2);
    records.remove_prefix(length);
    const size_t eq = record.find('=');
    if (eq == absl::string_view::npos) {
      return absl::InvalidArgumentError("pax extended header record without '='");
    }
    const absl::string_view key = record.substr(0, eq), value = record.substr(eq + 1);
    if (key == "path") {
      if (absl::Status s = CheckName(value); !s.ok()) return s;
      next->name = std::string(value);
    } else if (key == "size") {
      uint64_t size = 0;
      if (!absl::SimpleAtoi(value, &size) || size > kMaxTarMemberBytes) {
        return absl::InvalidArgumentError(
            absl::StrCat("pax size '", absl::CEscape(value), "' is not a member size"));
      }
      next->size = size;
    }
  }
  return absl::OkStatus();
}

}  // namespace sophon
