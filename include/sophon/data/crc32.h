// zlib's CRC-32: the checksum of pack samples and indexes and of the training
// node's cached sample files.
#ifndef SOPHON_DATA_CRC32_H_
#define SOPHON_DATA_CRC32_H_

#include <cstdint>

#include "absl/strings/string_view.h"

namespace sophon {

// zlib's CRC-32 of `bytes`, of any length.
uint32_t Crc32(absl::string_view bytes);

}  // namespace sophon

#endif  // SOPHON_DATA_CRC32_H_
