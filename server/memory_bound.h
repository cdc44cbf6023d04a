// The most memory a storage server can hold, from its options: the bound
// that every way a client (or a file) can make the server hold memory falls
// under (ARCHITECTURE.md lists them, and docs/server-memory.md explains the
// formula). The server logs it at start-up; tests check the server's peak
// resident memory against it.
#ifndef SOPHON_SERVER_MEMORY_BOUND_H_
#define SOPHON_SERVER_MEMORY_BOUND_H_

#include <cstdint>
#include <string>

#include "server/service_options.h"

namespace sophon {

struct ServerMemoryBound {
  int64_t base = 0;        // code, libraries, threads' stacks, the manifest (x2: as built, as held)
  int64_t samples = 0;     // the byte budget, and one sample admitted into an empty budget
  // gRPC's buffers and call state (the resource quota); -1 = unbounded. Fetch
  // requests being received are in it: a quarter of it in read slots
  // (ServiceOptions::ReadingStreams), stream_window_bytes per other stream.
  int64_t transport = 0;
  int64_t requests = 0;    // pending request messages: max_streams x max_ids_per_request x 32 B
  int64_t streams = 0;     // each open stream's own state: max_streams x kStreamStateBytes
  int64_t unary = 0;       // unary calls whose answers wait: max_unary_calls x kUnaryCallBytes
  int64_t waiting = 0;     // unary calls waiting for a slot: max_waiting_unary_calls x
                           // kWaitingCallBytes
  int64_t prep = 0;        // each prep worker's file buffer, decoder memory and pixel buffers
  int64_t cache = 0;       // the cache of raw sample bytes: cache.bytes, entries' overhead in it
  int64_t source = 0;      // the source's read buffers (a pack's group buffers)
  double allocator_overhead = 0;  // fraction on top of the terms (malloc's arenas and fragmentation)

  // The bound in bytes; -1 when the transport is unbounded.
  int64_t total() const;
  // "1234 MiB = 40 base + 1025 samples + ..." for the start-up log.
  std::string ToString() const;
};

// Bytes of a stream's own state: the reactor, its queues' blocks, and its
// registry and budget entries (gRPC's per-call state is in the transport term).
inline constexpr int64_t kStreamStateBytes = 4 << 10;
// Bytes a unary call holds outside gRPC's quota while its answer waits to be
// taken (the call's context and request, a stats answer): measured at about
// 15.6 KB per unread GetStats call.
inline constexpr int64_t kUnaryCallBytes = 16 << 10;
// Bytes the server holds for a unary call that waits for a slot, unread (the
// call's state in gRPC and the reactor): measured at about 17.2 KB per
// waiting GetStats call (25,600 calls, 439 MB).
inline constexpr int64_t kWaitingCallBytes = 18 << 10;
// Fixed memory of an idle server besides the manifest.
inline constexpr int64_t kServerBaseBytes = int64_t{64} << 20;
inline constexpr double kAllocatorOverhead = 0.25;

// REQUIRES: options validated. `manifest_bytes` is what the manifest holds
// while serving (the source's table and the encoded pages); building it
// holds up to as much again at start-up. `max_file_bytes` is the source's
// cap, `source_buffer_bytes` its SampleSource::buffer_bytes().
ServerMemoryBound ComputeServerMemoryBound(const ServiceOptions& options, int64_t manifest_bytes,
                                           int64_t max_file_bytes,
                                           int64_t source_buffer_bytes = 0);

}  // namespace sophon

#endif  // SOPHON_SERVER_MEMORY_BOUND_H_
