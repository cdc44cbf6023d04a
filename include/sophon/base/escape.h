// Escaping of untrusted names (file names, paths) for logs, error messages
// and protobuf `string` fields, which must be valid UTF-8.
#ifndef SOPHON_BASE_ESCAPE_H_
#define SOPHON_BASE_ESCAPE_H_

#include <string>

#include "absl/strings/string_view.h"

namespace sophon {

// `name` as printable, valid UTF-8 on one line. Valid UTF-8 text is kept as
// is, except: a backslash becomes "\\"; \n, \r and \t become "\n", "\r",
// "\t"; other control characters (U+0000..U+001F, U+007F) and every byte that
// is not part of valid UTF-8 become "\xNN" (lower-case hex); C1 controls
// (U+0080..U+009F), the line and paragraph separators (U+2028, U+2029) and
// the bidirectional overrides (U+202A..U+202E, U+2066..U+2069) become
// "\uNNNN". The mapping is injective (two names never escape alike), and a
// name of printable UTF-8 without backslashes is unchanged.
std::string EscapeName(absl::string_view name);

}  // namespace sophon

#endif  // SOPHON_BASE_ESCAPE_H_
