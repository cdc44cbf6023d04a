// Test helper: GET /metrics from a Prometheus endpoint on 127.0.0.1 over a
// plain POSIX socket (HTTP/1.0, so the server closes after the response).
#ifndef SOPHON_TESTS_SERVER_SCRAPE_H_
#define SOPHON_TESTS_SERVER_SCRAPE_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace sophon::testing {

// A TCP connection to 127.0.0.1:port; -1 if it cannot be made.
inline int ConnectLoopback(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// The whole HTTP response to GET PATH.
inline absl::StatusOr<std::string> HttpGet(int port, const std::string& path) {
  const int fd = ConnectLoopback(port);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("cannot connect to 127.0.0.1:", port));
  const std::string request = absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
  if (write(fd, request.data(), request.size()) != static_cast<ssize_t>(request.size())) {
    close(fd);
    return absl::InternalError("write");
  }
  std::string response;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) response.append(buf, n);
  close(fd);
  return response;
}

// The body of GET /metrics, or an error carrying the response if not 200.
inline absl::StatusOr<std::string> ScrapeMetrics(int port) {
  absl::StatusOr<std::string> response = HttpGet(port, "/metrics");
  if (!response.ok()) return response.status();
  const size_t body = response->find("\r\n\r\n");
  if (!absl::StartsWith(*response, "HTTP/1.1 200") || body == std::string::npos) {
    return absl::InternalError(absl::StrCat("not a 200 response: ", *response));
  }
  return response->substr(body + 4);
}

// The value of the series SERIES ("name" or "name{labels}") in an exposition,
// or an error when it is absent or not a number.
inline absl::StatusOr<double> SeriesValue(const std::string& body, const std::string& series) {
  const std::string key = absl::StrCat("\n", series, " ");
  size_t at = body.find(key);
  if (absl::StartsWith(body, series + " ")) at = 0;
  else if (at == std::string::npos) return absl::NotFoundError(absl::StrCat("no series ", series));
  else at += 1;
  at += series.size() + 1;
  const size_t end = body.find('\n', at);
  double value = 0;
  if (!absl::SimpleAtod(body.substr(at, end - at), &value)) {
    return absl::DataLossError(absl::StrCat("bad value for ", series));
  }
  return value;
}

}  // namespace sophon::testing

#endif  // SOPHON_TESTS_SERVER_SCRAPE_H_
