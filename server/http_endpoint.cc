#include "server/http_endpoint.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "spdlog/spdlog.h"

namespace sophon {
namespace {

std::string HostPort(const std::string& host, int port) {
  return host.find(':') != std::string::npos ? absl::StrCat("[", host, "]:", port)
                                             : absl::StrCat(host, ":", port);
}

std::string Errno(int error) { return std::strerror(error); }

// A socket bound to host:port and listening, non-blocking; errors name the
// address and the step that failed.
absl::StatusOr<int> Listen(const std::string& host, int port) {
  const std::string address = HostPort(host, port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = absl::StrCat(port);
  if (const int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", address, ": ", gai_strerror(rc)));
  }
  std::string why = "no address";
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      why = absl::StrCat("socket: ", Errno(errno));
      continue;
    }
    const int one = 1;
    // Restarts may bind a port whose old connections linger in TIME_WAIT; a
    // port another socket listens on is still refused.
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0) {
      why = Errno(errno);
    } else if (listen(fd, 64) != 0) {
      why = absl::StrCat("listen: ", Errno(errno));
    } else {
      break;
    }
    close(fd);
    fd = -1;
  }
  freeaddrinfo(found);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("cannot listen on ", address, ": ", why));
  return fd;
}

int BoundPort(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return -1;
  if (addr.ss_family == AF_INET) {
    return ntohs(reinterpret_cast<const sockaddr_in*>(&addr)->sin_port);
  }
  if (addr.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_port);
  }
  return -1;
}

std::string Response(absl::string_view status, absl::string_view content_type,
                     const std::string& body, bool head, absl::string_view extra_headers = "") {
  return absl::StrCat("HTTP/1.1 ", status, "\r\nContent-Type: ", content_type,
                      "\r\nContent-Length: ", body.size(), "\r\n", extra_headers,
                      "Connection: close\r\n\r\n", head ? "" : body);
}

std::string Error(absl::string_view status, absl::string_view extra_headers = "") {
  return Response(status, "text/plain; charset=utf-8", absl::StrCat(status, "\n"),
                  /*head=*/false, extra_headers);
}

// Where the request line and headers end, or npos while incomplete.
size_t HeaderEnd(const std::string& in) {
  const size_t crlf = in.find("\r\n\r\n");
  if (crlf != std::string::npos) return crlf + 4;
  const size_t lf = in.find("\n\n");
  return lf == std::string::npos ? std::string::npos : lf + 2;
}

}  // namespace

struct HttpEndpoint::Connection {
  int fd = -1;
  absl::Time deadline;
  std::string in;       // the request read so far
  std::string out;      // the response, once the request is complete
  size_t sent = 0;      // bytes of `out` written
  bool responding = false;
};

HttpEndpoint::HttpEndpoint(const HttpEndpointOptions& options, BodyFn body)
    : options_(options), body_(std::move(body)) {}

absl::StatusOr<std::unique_ptr<HttpEndpoint>> HttpEndpoint::Start(
    const HttpEndpointOptions& options, BodyFn body) {
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("HttpEndpointOptions.port must be in [0, 65535], got ", options.port));
  }
  if (options.max_connections < 1 || options.max_request_bytes < 64 ||
      options.connection_timeout <= absl::ZeroDuration() || options.path.empty() ||
      options.path[0] != '/' || !body) {
    return absl::InvalidArgumentError(
        "HttpEndpoint needs max_connections >= 1, max_request_bytes >= 64, a positive "
        "connection_timeout, a path starting with '/' and a body function");
  }
  absl::StatusOr<int> fd = Listen(options.host, options.port);
  if (!fd.ok()) return fd.status();
  std::unique_ptr<HttpEndpoint> endpoint(new HttpEndpoint(options, std::move(body)));
  endpoint->listen_fd_ = *fd;
  endpoint->port_ = BoundPort(*fd);
  endpoint->wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (endpoint->port_ <= 0 || endpoint->wake_fd_ < 0) {
    return absl::InternalError(absl::StrCat("cannot listen on ",
                                            HostPort(options.host, options.port), ": ",
                                            endpoint->port_ <= 0 ? "getsockname" : "eventfd",
                                            ": ", Errno(errno)));
  }
  endpoint->thread_ = std::thread([e = endpoint.get()] { e->Run(); });
  pthread_setname_np(endpoint->thread_.native_handle(), "sophon-http");
  return endpoint;
}

HttpEndpoint::~HttpEndpoint() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    if (write(wake_fd_, &one, sizeof(one)) != sizeof(one)) {
      spdlog::error("http endpoint {}: cannot wake its thread: {}",
                    HostPort(options_.host, port_), Errno(errno));
    }
    thread_.join();
  }
  if (wake_fd_ >= 0) close(wake_fd_);
  if (listen_fd_ >= 0) close(listen_fd_);
}

std::string HttpEndpoint::Respond(const std::string& request) const {
  const absl::string_view line =
      absl::string_view(request).substr(0, request.find_first_of("\r\n"));
  const std::vector<absl::string_view> parts = absl::StrSplit(line, ' ');
  if (parts.size() != 3 || !absl::StartsWith(parts[2], "HTTP/1.")) {
    return Error("400 Bad Request");
  }
  const absl::string_view method = parts[0];
  if (method != "GET" && method != "HEAD") {
    return Error("405 Method Not Allowed", "Allow: GET, HEAD\r\n");
  }
  const absl::string_view target = parts[1].substr(0, parts[1].find('?'));
  if (target != options_.path) return Error("404 Not Found");
  std::string body;
  try {
    body = body_();
  } catch (const std::exception& e) {
    spdlog::error("http endpoint {}: {} failed: {}", HostPort(options_.host, port_),
                  options_.path, e.what());
    return Error("500 Internal Server Error");
  }
  return Response("200 OK", options_.content_type, body, method == "HEAD");
}

void HttpEndpoint::Run() {
  std::vector<Connection> connections;
  std::vector<pollfd> polled;
  char buffer[4096];
  // After accept fails for want of resources (EMFILE and the like), the
  // listening socket rests a while instead of waking the loop at once.
  absl::Time accept_resumes = absl::InfinitePast();
  for (;;) {
    // [0] the wake eventfd, [1] the listening socket (only while there is
    // room for a connection), then one entry per connection in order.
    polled.clear();
    polled.push_back({wake_fd_, POLLIN, 0});
    const bool room = static_cast<int>(connections.size()) < options_.max_connections;
    const bool resting = absl::Now() < accept_resumes;
    polled.push_back({room && !resting ? listen_fd_ : -1, POLLIN, 0});
    absl::Time first_deadline = resting ? accept_resumes : absl::InfiniteFuture();
    for (const Connection& c : connections) {
      polled.push_back({c.fd, static_cast<short>(c.responding ? POLLOUT : POLLIN), 0});
      first_deadline = std::min(first_deadline, c.deadline);
    }
    int timeout_ms = -1;
    if (first_deadline != absl::InfiniteFuture()) {
      timeout_ms = static_cast<int>(std::clamp<int64_t>(
          absl::ToInt64Milliseconds(first_deadline - absl::Now()) + 1, 0, 60'000));
    }
    if (poll(polled.data(), polled.size(), timeout_ms) < 0) {
      if (errno == EINTR) continue;
      spdlog::error("http endpoint {}: poll: {}", HostPort(options_.host, port_), Errno(errno));
      break;
    }
    if (polled[0].revents != 0) break;  // the destructor asks to stop

    // Connections first (their indices match `polled`), then new ones.
    const absl::Time now = absl::Now();
    std::vector<Connection> kept;
    kept.reserve(connections.size());
    for (size_t i = 0; i < connections.size(); ++i) {
      Connection& c = connections[i];
      const short events = polled[i + 2].revents;
      bool done = false;
      if (!c.responding && events != 0) {
        const ssize_t n = recv(c.fd, buffer, sizeof(buffer), 0);
        if (n > 0) {
          c.in.append(buffer, static_cast<size_t>(n));
          const size_t end = HeaderEnd(c.in);
          if (end != std::string::npos && end <= static_cast<size_t>(options_.max_request_bytes)) {
            c.out = Respond(c.in.substr(0, end));
            c.responding = true;
          } else if (c.in.size() > static_cast<size_t>(options_.max_request_bytes)) {
            c.out = Error("431 Request Header Fields Too Large");
            c.responding = true;
          }
        } else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
          done = true;  // closed before a whole request, or reset
        }
      }
      // A response is tried at once: a small one fits the socket's buffer.
      if (c.responding && !done) {
        const ssize_t n = send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
        if (n > 0) c.sent += static_cast<size_t>(n);
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) done = true;
        if (c.sent == c.out.size()) {
          // Bytes the client sent after its headers, left unread, would make
          // close() reset the connection and could lose the response.
          shutdown(c.fd, SHUT_WR);
          for (int k = 0; k < 16 && recv(c.fd, buffer, sizeof(buffer), MSG_DONTWAIT) > 0; ++k) {
          }
          done = true;
        }
      }
      if (!done && now >= c.deadline) done = true;  // too slow to send or to read
      if (done) {
        close(c.fd);
      } else {
        kept.push_back(std::move(c));
      }
    }
    connections = std::move(kept);

    if (polled[1].revents != 0) {
      while (static_cast<int>(connections.size()) < options_.max_connections) {
        const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
          if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR &&
              errno != ECONNABORTED) {
            spdlog::warn("http endpoint {}: accept: {}; trying again in 100 ms",
                         HostPort(options_.host, port_), Errno(errno));
            accept_resumes = absl::Now() + absl::Milliseconds(100);
          }
          break;
        }
        Connection c;
        c.fd = fd;
        c.deadline = absl::Now() + options_.connection_timeout;
        connections.push_back(std::move(c));
      }
    }
  }
  for (const Connection& c : connections) close(c.fd);
}

}  // namespace sophon
