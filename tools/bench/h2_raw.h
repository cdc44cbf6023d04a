// A minimal HTTP/2 client over a plain TCP socket, below gRPC's message
// layer, for sophon-bench-load's attacks: it can announce a gRPC message and
// send only part of it, open streams that send nothing, or never grant the
// server a receive window. It speaks just enough HTTP/2 (RFC 9113) for that:
// the connection preface, SETTINGS and their ACKs, PING ACKs, WINDOW_UPDATE
// both ways, HEADERS as HPACK literals without indexing (no Huffman),
// DATA within the server's flow-control windows, RST_STREAM and GOAWAY. It
// never decodes the server's header blocks: it only notes that a stream got
// headers and whether they ended it.
//
// Not thread-safe: one thread drives a connection. Loopback only (the
// attacks run against a local server).
#ifndef SOPHON_TOOLS_BENCH_H2_RAW_H_
#define SOPHON_TOOLS_BENCH_H2_RAW_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace sophon {

struct H2RawOptions {
  std::string host = "127.0.0.1";  // the server (IPv4 loopback)
  int port = 0;
  // Local address to bind before connecting ("127.0.0.2": another client
  // address on loopback); empty = the kernel picks (127.0.0.1).
  std::string source_address;
  // Our SETTINGS_INITIAL_WINDOW_SIZE: what the server may send on a stream
  // before we grant more (0: no DATA at all).
  uint32_t receive_window = 65535;
  // The connection's receive window, granted once at the start (HTTP/2's
  // default 65535 unless larger): with a large one and `read` false, the
  // server's bytes fill the socket buffers and its writes stall.
  uint32_t connection_window = 65535;
  // Grant the server again what it sent (a reading client); false: the
  // windows stay as they were opened (a client that never reads).
  bool replenish = false;
  // Read the socket at all; false: what the server sends piles up in the
  // kernel's buffers and then in the server (its SETTINGS and window updates
  // are never seen, so only the initial windows are used).
  bool read = true;
  absl::Duration connect_timeout = absl::Seconds(5);
};

class H2RawConnection {
 public:
  // HTTP/2 error codes the attacks meet.
  static constexpr uint32_t kCancel = 0x8;
  static constexpr uint32_t kRefusedStream = 0x7;

  // Connects and queues the preface and our SETTINGS (sent by the next Pump
  // or Flush). Errors name the address.
  static absl::StatusOr<std::unique_ptr<H2RawConnection>> Connect(const H2RawOptions& options);
  ~H2RawConnection();
  H2RawConnection(const H2RawConnection&) = delete;
  H2RawConnection& operator=(const H2RawConnection&) = delete;

  // Queues HEADERS of a gRPC call to `path` ("/pkg.Service/Method");
  // returns the new stream's id. `end_stream`: the request side ends here.
  uint32_t StartCall(absl::string_view path, bool end_stream);
  // Queues as much of `data` as the stream's and the connection's send
  // windows allow, in frames of at most the server's frame size; returns the
  // bytes queued. `end_stream` goes on the last frame if all of `data` fit.
  size_t SendData(uint32_t stream, absl::string_view data, bool end_stream);
  void ResetStream(uint32_t stream, uint32_t error_code = kCancel);

  // One round of I/O: waits up to `timeout` for the socket, then writes what
  // it can of the queue and reads (and answers) what the server sent.
  // An error once the connection is gone (closed() is then true).
  absl::Status Pump(absl::Duration timeout);
  // Pumps until the queue is written or `deadline`; false at the deadline.
  bool Flush(absl::Time deadline);

  // The 5-byte gRPC prefix of an uncompressed message of `length` bytes.
  static std::string GrpcPrefix(uint32_t length);

  // Streams started and not yet ended or reset by either side.
  bool IsOpen(uint32_t stream) const { return streams_.count(stream) > 0; }
  size_t open_streams() const { return streams_.size(); }
  int64_t stream_send_window(uint32_t stream) const;
  int64_t connection_send_window() const { return conn_send_window_; }
  size_t queued_bytes() const { return out_.size() - out_pos_; }
  bool closed() const { return closed_; }
  bool goaway() const { return goaway_; }
  uint32_t goaway_code() const { return goaway_code_; }
  uint32_t peer_max_concurrent_streams() const { return peer_max_streams_; }
  bool got_peer_settings() const { return got_settings_; }

  struct Counters {
    uint64_t streams_started = 0;
    uint64_t streams_ended_by_peer = 0;  // HEADERS or DATA with END_STREAM
    uint64_t streams_reset_by_peer = 0;  // RST_STREAM from the server
    uint64_t streams_with_headers = 0;   // the server answered with headers
    uint64_t data_bytes_sent = 0;        // DATA payload we queued
    uint64_t data_bytes_received = 0;    // DATA payload the server sent
    uint64_t bytes_written = 0;          // on the socket
    uint64_t bytes_read = 0;
    std::map<uint32_t, uint64_t> resets_by_code;  // RST_STREAM from the server
  };
  const Counters& counters() const { return counters_; }

 private:
  struct Stream {
    int64_t send_window = 0;
    bool ended_by_peer = false;
  };

  explicit H2RawConnection(const H2RawOptions& options, int fd);
  void QueueFrame(uint8_t type, uint8_t flags, uint32_t stream, absl::string_view payload);
  void HandleFrame(uint8_t type, uint8_t flags, uint32_t stream, absl::string_view payload);
  void EndStream(uint32_t stream);
  absl::Status ReadSome();
  absl::Status WriteSome();

  const H2RawOptions options_;
  const std::string authority_;
  int fd_ = -1;
  bool closed_ = false;
  std::string out_;
  size_t out_pos_ = 0;
  std::string in_;
  uint32_t next_stream_ = 1;
  std::unordered_map<uint32_t, Stream> streams_;
  int64_t conn_send_window_ = 65535;
  int64_t peer_initial_window_ = 65535;
  uint32_t peer_max_frame_ = 16384;
  uint32_t peer_max_streams_ = UINT32_MAX;
  bool got_settings_ = false;
  bool goaway_ = false;
  uint32_t goaway_code_ = 0;
  Counters counters_;
};

}  // namespace sophon

#endif  // SOPHON_TOOLS_BENCH_H2_RAW_H_
