// A minimal HTTP/1.x server for one read-only document (the Prometheus
// exposition of metrics_exporter): GET or HEAD of one path, every response
// "Connection: close". One thread of its own runs a poll loop over the
// listening socket and every connection, so a client that connects and sends
// nothing delays no other client, and the thread's stack is the process's
// default (libraries that create threads with a fixed small stack fail in a
// process whose static TLS is large, as with LibTorch and OpenBLAS linked in).
#ifndef SOPHON_SERVER_HTTP_ENDPOINT_H_
#define SOPHON_SERVER_HTTP_ENDPOINT_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace sophon {

struct HttpEndpointOptions {
  std::string host = "127.0.0.1";  // one address (or a name resolving to it) to listen on
  int port = 0;                    // 0 picks a free port
  std::string path = "/metrics";   // the document's path; a query string is ignored
  std::string content_type = "text/plain; version=0.0.4; charset=utf-8";
  // A connection lives at most this long from accept to its response sent:
  // reading the request, making the body, writing it.
  absl::Duration connection_timeout = absl::Seconds(2);
  int max_connections = 64;        // open at once; more wait in the listen queue
  int max_request_bytes = 8192;    // request line and headers; more is answered 431
};

class HttpEndpoint {
 public:
  // The document, made afresh for each GET; called on the endpoint's thread.
  using BodyFn = std::function<std::string()>;

  // Binds options.host:options.port, listens and starts the thread.
  // Unavailable naming the address and why (a name that does not resolve, a
  // port in use); InvalidArgument for options out of range.
  static absl::StatusOr<std::unique_ptr<HttpEndpoint>> Start(const HttpEndpointOptions& options,
                                                             BodyFn body);
  // Stops the thread, joins it and closes every connection and the socket.
  ~HttpEndpoint();

  int port() const { return port_; }  // the bound port (the chosen one for port 0)

 private:
  struct Connection;
  HttpEndpoint(const HttpEndpointOptions& options, BodyFn body);

  void Run();
  // The whole response (status line, headers, body) to a complete request.
  std::string Respond(const std::string& request) const;

  // Constant after Start.
  const HttpEndpointOptions options_;
  const BodyFn body_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;  // an eventfd: written once by the destructor to stop Run
  int port_ = 0;
  std::thread thread_;
};

}  // namespace sophon

#endif  // SOPHON_SERVER_HTTP_ENDPOINT_H_
