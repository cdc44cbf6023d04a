#include "server/http_endpoint.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/scrape.h"

namespace sophon {
namespace {

using ::sophon::testing::ConnectLoopback;
using ::sophon::testing::HttpGet;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::StartsWith;

std::unique_ptr<HttpEndpoint> StartEndpoint(HttpEndpointOptions options = {},
                                            HttpEndpoint::BodyFn body = [] {
                                              return std::string("doc 1\n");
                                            }) {
  absl::StatusOr<std::unique_ptr<HttpEndpoint>> endpoint =
      HttpEndpoint::Start(options, std::move(body));
  EXPECT_TRUE(endpoint.ok()) << endpoint.status();
  return endpoint.ok() ? *std::move(endpoint) : nullptr;
}

// Sends `request` raw and reads until the server closes.
std::string Exchange(int port, const std::string& request) {
  const int fd = ConnectLoopback(port);
  if (fd < 0) return "<no connection>";
  send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string response;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) response.append(buf, n);
  close(fd);
  return response;
}

TEST(HttpEndpointTest, ServesTheDocumentWithLengthAndTypeAndCloses) {
  std::atomic<int> calls{0};
  std::unique_ptr<HttpEndpoint> endpoint = StartEndpoint({}, [&] {
    return absl::StrCat("doc ", ++calls, "\n");
  });
  ASSERT_NE(endpoint, nullptr);
  ASSERT_GT(endpoint->port(), 0);
  absl::StatusOr<std::string> first = HttpGet(endpoint->port(), "/metrics");
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_THAT(*first, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(*first, HasSubstr("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"));
  EXPECT_THAT(*first, HasSubstr("Content-Length: 6\r\n"));
  EXPECT_THAT(*first, HasSubstr("Connection: close\r\n"));
  EXPECT_THAT(*first, EndsWith("\r\n\r\ndoc 1\n"));
  // A fresh body per request; HTTP/1.1 and a query string are fine too.
  EXPECT_THAT(Exchange(endpoint->port(),
                       "GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\nAccept: */*\r\n\r\n"),
              EndsWith("\r\n\r\ndoc 2\n"));
  // Bare LF line ends, as some scripts send.
  EXPECT_THAT(Exchange(endpoint->port(), "GET /metrics HTTP/1.0\n\n"), EndsWith("doc 3\n"));
}

TEST(HttpEndpointTest, HeadHasTheHeadersOnly) {
  std::unique_ptr<HttpEndpoint> endpoint = StartEndpoint();
  ASSERT_NE(endpoint, nullptr);
  const std::string response = Exchange(endpoint->port(), "HEAD /metrics HTTP/1.0\r\n\r\n");
  EXPECT_THAT(response, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(response, HasSubstr("Content-Length: 6\r\n"));
  EXPECT_THAT(response, EndsWith("\r\n\r\n"));
}

TEST(HttpEndpointTest, OtherPathsMethodsAndMalformedRequestsAreRefused) {
  std::atomic<int> calls{0};
  std::unique_ptr<HttpEndpoint> endpoint = StartEndpoint({}, [&] {
    ++calls;
    return std::string("doc\n");
  });
  ASSERT_NE(endpoint, nullptr);
  const int port = endpoint->port();
  EXPECT_THAT(Exchange(port, "GET / HTTP/1.0\r\n\r\n"), StartsWith("HTTP/1.1 404 Not Found"));
  EXPECT_THAT(Exchange(port, "GET /metricsx HTTP/1.0\r\n\r\n"), StartsWith("HTTP/1.1 404"));
  const std::string post = Exchange(port, "POST /metrics HTTP/1.0\r\n\r\n");
  EXPECT_THAT(post, StartsWith("HTTP/1.1 405 Method Not Allowed"));
  EXPECT_THAT(post, HasSubstr("Allow: GET, HEAD\r\n"));
  EXPECT_THAT(Exchange(port, "GET /metrics\r\n\r\n"), StartsWith("HTTP/1.1 400 Bad Request"));
  EXPECT_THAT(Exchange(port, "hello there\r\n\r\n"), StartsWith("HTTP/1.1 400"));
  EXPECT_THAT(Exchange(port, "GET /metrics HTTP/2.0\r\n\r\n"), StartsWith("HTTP/1.1 400"));
  EXPECT_EQ(calls.load(), 0);  // no body made for a refusal
}

TEST(HttpEndpointTest, AnOversizedRequestIsAnswered431) {
  HttpEndpointOptions options;
  options.max_request_bytes = 256;
  std::unique_ptr<HttpEndpoint> endpoint = StartEndpoint(options);
  ASSERT_NE(endpoint, nullptr);
  const std::string big =
      absl::StrCat("GET /metrics HTTP/1.0\r\nX-Fill: ", std::string(1000, 'a'), "\r\n\r\n");
  EXPECT_THAT(Exchange(endpoint->port(), big),
              StartsWith("HTTP/1.1 431 Request Header Fields Too Large"));
  // Headers that end within the bound are served.
  const std::string fits =
      absl::StrCat("GET /metrics HTTP/1.0\r\nX-Fill: ", std::string(100, 'a'), "\r\n\r\n");
  EXPECT_THAT(Exchange(endpoint->port(), fits), StartsWith("HTTP/1.1 200"));
}

TEST(HttpEndpointTest, SilentConnectionsDelayNoScrapeAndAreClosedAtTheTimeout) {
  HttpEndpointOptions options;
  options.connection_timeout = absl::Milliseconds(500);
  std::unique_ptr<HttpEndpoint> endpoint = StartEndpoint(options);
  ASSERT_NE(endpoint, nullptr);
  // Connections that send nothing, and one that sends half a request.
  std::vector<int> silent;
  for (int i = 0; i < 8; ++i) silent.push_back(ConnectLoopback(endpoint->port()));
  const std::string half = "GET /metrics HTTP/1.0\r\n";
  send(silent[0], half.data(), half.size(), MSG_NOSIGNAL);
  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> scrape = HttpGet(endpoint->port(), "/metrics");
  ASSERT_TRUE(scrape.ok()) << scrape.status();
  EXPECT_THAT(*scrape, StartsWith("HTTP/1.1 200"));
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(400));
  // The server closes each silent connection after the timeout: read sees EOF.
  for (int fd : silent) {
    ASSERT_GE(fd, 0);
    char c;
    const absl::Time t0 = absl::Now();
    EXPECT_EQ(read(fd, &c, 1), 0);
    EXPECT_LT(absl::Now() - t0, absl::Seconds(2));
    close(fd);
  }
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(450));
}

TEST(HttpEndpointTest, ConnectionsBeyondTheCapWaitTheirTurn) {
  HttpEndpointOptions options;
  options.max_connections = 2;
  options.connection_timeout = absl::Milliseconds(300);
  std::unique_ptr<HttpEndpoint> endpoint = StartEndpoint(options);
  ASSERT_NE(endpoint, nullptr);
  const int a = ConnectLoopback(endpoint->port());
  const int b = ConnectLoopback(endpoint->port());
  absl::SleepFor(absl::Milliseconds(50));  // both accepted: the cap is reached
  // A third client is served once a silent one times out.
  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> scrape = HttpGet(endpoint->port(), "/metrics");
  ASSERT_TRUE(scrape.ok()) << scrape.status();
  EXPECT_THAT(*scrape, StartsWith("HTTP/1.1 200"));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(200));
  close(a);
  close(b);
}

TEST(HttpEndpointTest, ALargeBodyIsSentWhole) {
  const std::string doc(4 << 20, 'x');  // more than a socket's buffer
  std::unique_ptr<HttpEndpoint> endpoint = StartEndpoint({}, [&] { return doc; });
  ASSERT_NE(endpoint, nullptr);
  absl::StatusOr<std::string> response = HttpGet(endpoint->port(), "/metrics");
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_THAT(*response, HasSubstr(absl::StrCat("Content-Length: ", doc.size(), "\r\n")));
  EXPECT_EQ(response->substr(response->find("\r\n\r\n") + 4), doc);
}

TEST(HttpEndpointTest, ErrorsNameTheAddress) {
  HttpEndpointOptions options;
  options.host = "127.0.0.1";
  std::unique_ptr<HttpEndpoint> first = StartEndpoint(options);
  ASSERT_NE(first, nullptr);
  options.port = first->port();
  absl::StatusOr<std::unique_ptr<HttpEndpoint>> second =
      HttpEndpoint::Start(options, [] { return std::string(); });
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(),
              HasSubstr(absl::StrCat("cannot listen on 127.0.0.1:", first->port(),
                                     ": Address already in use")));
  options.port = 70000;
  EXPECT_EQ(HttpEndpoint::Start(options, [] { return std::string(); }).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.port = 0;
  options.host = "::1";
  absl::StatusOr<std::unique_ptr<HttpEndpoint>> v6 =
      HttpEndpoint::Start(options, [] { return std::string(); });
  if (!v6.ok()) {
    EXPECT_THAT(v6.status().message(), HasSubstr("cannot listen on [::1]:0"));
  }
}

// The endpoint's thread has the process's default stack, not a fixed small
// one: a thread that needs more than 100 KiB of stack runs (civetweb's fixed
// 100 KiB stacks could not even be created in a program whose static TLS is
// larger, such as sophon-server with LibTorch linked in).
TEST(HttpEndpointTest, TheThreadHasTheDefaultStackSize) {
  size_t stack = 0;
  std::unique_ptr<HttpEndpoint> endpoint = StartEndpoint({}, [&] {
    pthread_attr_t attr;
    pthread_getattr_np(pthread_self(), &attr);
    pthread_attr_getstacksize(&attr, &stack);
    pthread_attr_destroy(&attr);
    return std::string("ok\n");
  });
  ASSERT_NE(endpoint, nullptr);
  ASSERT_TRUE(HttpGet(endpoint->port(), "/metrics").ok());
  pthread_attr_t defaults;
  ASSERT_EQ(pthread_getattr_default_np(&defaults), 0);
  size_t default_stack = 0;
  pthread_attr_getstacksize(&defaults, &default_stack);
  pthread_attr_destroy(&defaults);
  EXPECT_GE(stack, default_stack);
  EXPECT_GT(stack, size_t{100} << 10);
}

TEST(HttpEndpointTest, DestructionClosesOpenConnections) {
  std::unique_ptr<HttpEndpoint> endpoint = StartEndpoint();
  ASSERT_NE(endpoint, nullptr);
  const int port = endpoint->port();
  const int fd = ConnectLoopback(port);
  ASSERT_GE(fd, 0);
  absl::SleepFor(absl::Milliseconds(50));
  endpoint.reset();
  char c;
  EXPECT_LE(read(fd, &c, 1), 0);
  close(fd);
  EXPECT_LT(ConnectLoopback(port), 0);  // no longer listening
}

}  // namespace
}  // namespace sophon
