#include "src/data/pread_exact.h"

#include <unistd.h>

#include <cerrno>

namespace sophon {

PreadResult PreadExact(int fd, uint64_t offset, uint64_t size, std::string* out) {
  out->resize(size);
  PreadResult r;
  while (r.bytes < size) {
    const ssize_t n = ::pread(fd, out->data() + r.bytes, size - r.bytes,
                              static_cast<off_t>(offset + r.bytes));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      r.error = errno;
      break;
    }
    if (n == 0) break;
    r.bytes += static_cast<uint64_t>(n);
  }
  return r;
}

}  // namespace sophon
