#include "tools/bench/h2_raw.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace sophon {
namespace {

constexpr absl::string_view kPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
enum FrameType : uint8_t {
  kData = 0,
  kHeaders = 1,
  kRstStream = 3,
  kSettings = 4,
  kPing = 6,
  kGoaway = 7,
  kWindowUpdate = 8,
};
constexpr uint8_t kEndStream = 0x1;
constexpr uint8_t kAck = 0x1;
constexpr uint8_t kEndHeaders = 0x4;
constexpr uint16_t kSettingsEnablePush = 2;
constexpr uint16_t kSettingsMaxConcurrentStreams = 3;
constexpr uint16_t kSettingsInitialWindowSize = 4;
constexpr uint16_t kSettingsMaxFrameSize = 5;

void Put32(std::string* out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out->push_back(static_cast<char>(v >> shift));
}

uint32_t Get32(absl::string_view s) {
  return (static_cast<uint32_t>(static_cast<uint8_t>(s[0])) << 24) |
         (static_cast<uint32_t>(static_cast<uint8_t>(s[1])) << 16) |
         (static_cast<uint32_t>(static_cast<uint8_t>(s[2])) << 8) |
         static_cast<uint32_t>(static_cast<uint8_t>(s[3]));
}

// HPACK integer with an N-bit prefix (RFC 7541 5.1); `first` holds the bits
// above the prefix.
void PutHpackInt(std::string* out, uint8_t first, int prefix_bits, uint64_t v) {
  const uint64_t max = (1u << prefix_bits) - 1;
  if (v < max) {
    out->push_back(static_cast<char>(first | v));
    return;
  }
  out->push_back(static_cast<char>(first | max));
  v -= max;
  while (v >= 128) {
    out->push_back(static_cast<char>((v & 127) | 128));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

// A literal header field without indexing, new name, no Huffman (6.2.2).
void PutLiteralHeader(std::string* out, absl::string_view name, absl::string_view value) {
  out->push_back(0);
  PutHpackInt(out, 0, 7, name.size());
  out->append(name.data(), name.size());
  PutHpackInt(out, 0, 7, value.size());
  out->append(value.data(), value.size());
}

}  // namespace

absl::StatusOr<std::unique_ptr<H2RawConnection>> H2RawConnection::Connect(
    const H2RawOptions& options) {
  const std::string where = absl::StrCat(options.host, ":", options.port);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(options.port));
  if (inet_pton(AF_INET, options.host.c_str(), &to.sin_addr) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("raw HTTP/2: '", options.host, "' is not an IPv4 address"));
  }
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("raw HTTP/2 to ", where, ": socket: ",
                                               std::strerror(errno)));
  }
  auto fail = [&](absl::string_view what) {
    const std::string message =
        absl::StrCat("raw HTTP/2 to ", where,
                     options.source_address.empty() ? ""
                                                    : absl::StrCat(" from ", options.source_address),
                     ": ", what, ": ", std::strerror(errno));
    close(fd);
    return absl::UnavailableError(message);
  };
  if (!options.source_address.empty()) {
    sockaddr_in from{};
    from.sin_family = AF_INET;
    if (inet_pton(AF_INET, options.source_address.c_str(), &from.sin_addr) != 1) {
      close(fd);
      return absl::InvalidArgumentError(absl::StrCat(
          "raw HTTP/2: source '", options.source_address, "' is not an IPv4 address"));
    }
    if (bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from)) != 0) return fail("bind");
  }
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) != 0) return fail("fcntl");
  if (connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
    if (errno != EINPROGRESS) return fail("connect");
    pollfd p{fd, POLLOUT, 0};
    const int ms = static_cast<int>(absl::ToInt64Milliseconds(options.connect_timeout));
    if (poll(&p, 1, ms) != 1) {
      errno = ETIMEDOUT;
      return fail("connect");
    }
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      errno = err;
      return fail("connect");
    }
  }
  std::unique_ptr<H2RawConnection> c(new H2RawConnection(options, fd));
  c->out_.append(kPreface.data(), kPreface.size());
  std::string settings;
  auto setting = [&settings](uint16_t id, uint32_t value) {
    settings.push_back(static_cast<char>(id >> 8));
    settings.push_back(static_cast<char>(id));
    Put32(&settings, value);
  };
  setting(kSettingsEnablePush, 0);
  setting(kSettingsInitialWindowSize, options.receive_window);
  c->QueueFrame(kSettings, 0, 0, settings);
  if (options.connection_window > 65535) {
    std::string inc;
    Put32(&inc, options.connection_window - 65535);
    c->QueueFrame(kWindowUpdate, 0, 0, inc);
  }
  return c;
}

H2RawConnection::H2RawConnection(const H2RawOptions& options, int fd)
    : options_(options), authority_(absl::StrCat(options.host, ":", options.port)), fd_(fd) {}

H2RawConnection::~H2RawConnection() {
  if (fd_ >= 0) close(fd_);
}

std::string H2RawConnection::GrpcPrefix(uint32_t length) {
  std::string p(1, '\0');
  Put32(&p, length);
  return p;
}

void H2RawConnection::QueueFrame(uint8_t type, uint8_t flags, uint32_t stream,
                                 absl::string_view payload) {
  const uint32_t n = static_cast<uint32_t>(payload.size());
  out_.push_back(static_cast<char>(n >> 16));
  out_.push_back(static_cast<char>(n >> 8));
  out_.push_back(static_cast<char>(n));
  out_.push_back(static_cast<char>(type));
  out_.push_back(static_cast<char>(flags));
  Put32(&out_, stream & 0x7fffffffu);
  out_.append(payload.data(), payload.size());
}

uint32_t H2RawConnection::StartCall(absl::string_view path, bool end_stream) {
  const uint32_t id = next_stream_;
  next_stream_ += 2;
  std::string block;
  PutLiteralHeader(&block, ":method", "POST");
  PutLiteralHeader(&block, ":scheme", "http");
  PutLiteralHeader(&block, ":path", path);
  PutLiteralHeader(&block, ":authority", authority_);
  PutLiteralHeader(&block, "content-type", "application/grpc");
  PutLiteralHeader(&block, "te", "trailers");
  QueueFrame(kHeaders, kEndHeaders | (end_stream ? kEndStream : 0), id, block);
  streams_[id].send_window = peer_initial_window_;
  ++counters_.streams_started;
  return id;
}

size_t H2RawConnection::SendData(uint32_t stream, absl::string_view data, bool end_stream) {
  auto it = streams_.find(stream);
  if (it == streams_.end()) return 0;
  const int64_t room = std::min(it->second.send_window, conn_send_window_);
  const size_t n = static_cast<size_t>(std::max<int64_t>(
      0, std::min<int64_t>(room, static_cast<int64_t>(data.size()))));
  if (n == 0 && !(end_stream && data.empty())) return 0;
  size_t done = 0;
  do {
    const size_t chunk = std::min<size_t>(n - done, peer_max_frame_);
    const bool last = done + chunk == n;
    QueueFrame(kData, last && end_stream && n == data.size() ? kEndStream : 0, stream,
               data.substr(done, chunk));
    done += chunk;
  } while (done < n);
  it->second.send_window -= static_cast<int64_t>(n);
  conn_send_window_ -= static_cast<int64_t>(n);
  counters_.data_bytes_sent += n;
  return n;
}

void H2RawConnection::ResetStream(uint32_t stream, uint32_t error_code) {
  std::string payload;
  Put32(&payload, error_code);
  QueueFrame(kRstStream, 0, stream, payload);
  streams_.erase(stream);
}

int64_t H2RawConnection::stream_send_window(uint32_t stream) const {
  auto it = streams_.find(stream);
  return it == streams_.end() ? 0 : it->second.send_window;
}

void H2RawConnection::EndStream(uint32_t stream) {
  if (streams_.erase(stream) > 0) ++counters_.streams_ended_by_peer;
}

void H2RawConnection::HandleFrame(uint8_t type, uint8_t flags, uint32_t stream,
                                  absl::string_view payload) {
  switch (type) {
    case kData: {
      counters_.data_bytes_received += payload.size();
      if (options_.replenish && !payload.empty()) {
        std::string inc;
        Put32(&inc, static_cast<uint32_t>(payload.size()));
        QueueFrame(kWindowUpdate, 0, 0, inc);
        if (IsOpen(stream) && !(flags & kEndStream)) QueueFrame(kWindowUpdate, 0, stream, inc);
      }
      if (flags & kEndStream) EndStream(stream);
      break;
    }
    case kHeaders:
      if (IsOpen(stream)) ++counters_.streams_with_headers;
      if (flags & kEndStream) EndStream(stream);
      break;
    case kRstStream: {
      const uint32_t code = payload.size() >= 4 ? Get32(payload) : 0;
      if (streams_.erase(stream) > 0) {
        ++counters_.streams_reset_by_peer;
        ++counters_.resets_by_code[code];
      }
      break;
    }
    case kSettings: {
      if (flags & kAck) break;
      got_settings_ = true;
      for (size_t i = 0; i + 6 <= payload.size(); i += 6) {
        const uint16_t id = static_cast<uint16_t>((static_cast<uint8_t>(payload[i]) << 8) |
                                                  static_cast<uint8_t>(payload[i + 1]));
        const uint32_t value = Get32(payload.substr(i + 2, 4));
        if (id == kSettingsInitialWindowSize) {
          const int64_t delta = static_cast<int64_t>(value) - peer_initial_window_;
          peer_initial_window_ = value;
          for (auto& [id, s] : streams_) s.send_window += delta;
        } else if (id == kSettingsMaxFrameSize) {
          peer_max_frame_ = value;
        } else if (id == kSettingsMaxConcurrentStreams) {
          peer_max_streams_ = value;
        }
      }
      QueueFrame(kSettings, kAck, 0, {});
      break;
    }
    case kPing:
      if (!(flags & kAck)) QueueFrame(kPing, kAck, 0, payload);
      break;
    case kGoaway:
      goaway_ = true;
      goaway_code_ = payload.size() >= 8 ? Get32(payload.substr(4)) : 0;
      break;
    case kWindowUpdate: {
      const int64_t inc = payload.size() >= 4 ? (Get32(payload) & 0x7fffffffu) : 0;
      if (stream == 0) {
        conn_send_window_ += inc;
      } else if (auto it = streams_.find(stream); it != streams_.end()) {
        it->second.send_window += inc;
      }
      break;
    }
    default:
      break;  // PRIORITY, PUSH_PROMISE (disabled), CONTINUATION, unknown
  }
}

absl::Status H2RawConnection::ReadSome() {
  char buf[65536];
  while (true) {
    const ssize_t n = recv(fd_, buf, sizeof(buf), 0);
    if (n > 0) {
      counters_.bytes_read += static_cast<uint64_t>(n);
      in_.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n == 0) {
      closed_ = true;
      break;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    closed_ = true;
    return absl::UnavailableError(absl::StrCat("raw HTTP/2 to ", authority_, ": recv: ",
                                               std::strerror(errno)));
  }
  size_t pos = 0;
  while (in_.size() - pos >= 9) {
    const uint32_t len = (static_cast<uint32_t>(static_cast<uint8_t>(in_[pos])) << 16) |
                         (static_cast<uint32_t>(static_cast<uint8_t>(in_[pos + 1])) << 8) |
                         static_cast<uint32_t>(static_cast<uint8_t>(in_[pos + 2]));
    if (in_.size() - pos < 9 + len) break;
    const uint8_t type = static_cast<uint8_t>(in_[pos + 3]);
    const uint8_t flags = static_cast<uint8_t>(in_[pos + 4]);
    const uint32_t stream = Get32(absl::string_view(in_).substr(pos + 5, 4)) & 0x7fffffffu;
    HandleFrame(type, flags, stream, absl::string_view(in_).substr(pos + 9, len));
    pos += 9 + len;
  }
  in_.erase(0, pos);
  if (closed_) {
    return absl::UnavailableError(
        absl::StrCat("raw HTTP/2 to ", authority_, ": the server closed the connection"));
  }
  return absl::OkStatus();
}

absl::Status H2RawConnection::WriteSome() {
  while (out_pos_ < out_.size()) {
    const ssize_t n = send(fd_, out_.data() + out_pos_, out_.size() - out_pos_, MSG_NOSIGNAL);
    if (n > 0) {
      out_pos_ += static_cast<size_t>(n);
      counters_.bytes_written += static_cast<uint64_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    closed_ = true;
    return absl::UnavailableError(absl::StrCat("raw HTTP/2 to ", authority_, ": send: ",
                                               std::strerror(errno)));
  }
  if (out_pos_ == out_.size()) {
    out_.clear();
    out_pos_ = 0;
  } else if (out_pos_ > (1 << 20)) {
    out_.erase(0, out_pos_);
    out_pos_ = 0;
  }
  return absl::OkStatus();
}

absl::Status H2RawConnection::Pump(absl::Duration timeout) {
  if (closed_) {
    return absl::UnavailableError(absl::StrCat("raw HTTP/2 to ", authority_, ": closed"));
  }
  pollfd p{fd_, static_cast<short>((options_.read ? POLLIN : 0) |
                                   (queued_bytes() > 0 ? POLLOUT : 0)),
           0};
  if (p.events == 0) {  // nothing to write, and never reading
    absl::SleepFor(timeout);
    return absl::OkStatus();
  }
  const int ms = static_cast<int>(std::max<int64_t>(0, absl::ToInt64Milliseconds(timeout)));
  if (poll(&p, 1, ms) <= 0) return absl::OkStatus();
  if (p.revents & (POLLOUT | POLLERR | POLLHUP)) {
    if (absl::Status s = WriteSome(); !s.ok()) return s;
  }
  if (options_.read && (p.revents & (POLLIN | POLLERR | POLLHUP))) {
    if (absl::Status s = ReadSome(); !s.ok()) return s;
  }
  // Answers (SETTINGS ACK, PING ACK, window updates) go out at once.
  if (queued_bytes() > 0) return WriteSome();
  return absl::OkStatus();
}

bool H2RawConnection::Flush(absl::Time deadline) {
  while (queued_bytes() > 0 && !closed_) {
    const absl::Time now = absl::Now();
    if (now >= deadline) return false;
    if (!Pump(std::min(deadline - now, absl::Milliseconds(50))).ok()) return false;
  }
  return queued_bytes() == 0;
}

}  // namespace sophon
