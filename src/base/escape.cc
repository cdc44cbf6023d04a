#include "sophon/base/escape.h"

#include <cstdint>

#include "absl/strings/str_format.h"

namespace sophon {
namespace {

// Length of the valid UTF-8 sequence at s[i] (1..4) and its code point, or 0
// if the bytes there are not valid UTF-8 (overlong forms, surrogates and code
// points past U+10FFFF are invalid, as protobuf's check has them).
int Utf8Sequence(absl::string_view s, size_t i, uint32_t* cp) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t c = b(i);
  if (c < 0x80) {
    *cp = c;
    return 1;
  }
  int len = 0;
  uint32_t min = 0;
  if ((c & 0xE0) == 0xC0) {
    len = 2, *cp = c & 0x1F, min = 0x80;
  } else if ((c & 0xF0) == 0xE0) {
    len = 3, *cp = c & 0x0F, min = 0x800;
  } else if ((c & 0xF8) == 0xF0) {
    len = 4, *cp = c & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  for (int k = 1; k < len; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
    *cp = (*cp << 6) | (b(i + k) & 0x3F);
  }
  if (*cp < min || *cp > 0x10FFFF || (*cp >= 0xD800 && *cp <= 0xDFFF)) return 0;
  return len;
}

// Code points (beyond ASCII) that can forge or reorder a log line.
bool IsHiddenControl(uint32_t cp) {
  return (cp >= 0x80 && cp <= 0x9F) || cp == 0x2028 || cp == 0x2029 ||
         (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069);
}

}  // namespace

std::string EscapeName(absl::string_view name) {
  std::string out;
  out.reserve(name.size());
  for (size_t i = 0; i < name.size();) {
    uint32_t cp = 0;
    const int len = Utf8Sequence(name, i, &cp);
    if (len == 0) {
      absl::StrAppendFormat(&out, "\\x%02x", static_cast<uint8_t>(name[i]));
      ++i;
      continue;
    }
    if (len == 1) {
      switch (cp) {
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        default:
          if (cp < 0x20 || cp == 0x7F) {
            absl::StrAppendFormat(&out, "\\x%02x", cp);
          } else {
            out.push_back(static_cast<char>(cp));
          }
      }
    } else if (IsHiddenControl(cp)) {
      absl::StrAppendFormat(&out, "\\u%04x", cp);
    } else {
      out.append(name.data() + i, len);
    }
    i += len;
  }
  return out;
}

}  // namespace sophon
