#include "server/memory_bound.h"

#include "absl/strings/str_format.h"

namespace sophon {

int64_t ServerMemoryBound::total() const {
  if (transport < 0) return -1;
  const int64_t terms =
      samples + transport + requests + streams + unary + waiting + prep + cache + source;
  return base + static_cast<int64_t>(static_cast<double>(terms) * (1 + allocator_overhead));
}

std::string ServerMemoryBound::ToString() const {
  const auto mib = [](int64_t b) { return static_cast<double>(b) / (1 << 20); };
  const std::string transport_text =
      transport < 0 ? std::string("unbounded transport (no quota)")
                    : absl::StrFormat("%.0f transport", mib(transport));
  const std::string head = total() < 0 ? std::string("unbounded")
                                       : absl::StrFormat("%.0f MiB", mib(total()));
  return absl::StrFormat(
      "%s = %.0f base + (%.0f samples + %s + %.0f pending requests + %.0f streams + %.0f unary "
      "answers + %.0f waiting unary calls + %.0f prep workers%s%s) x %.2f allocator overhead",
      head, mib(base), mib(samples), transport_text, mib(requests), mib(streams), mib(unary),
      mib(waiting), mib(prep),
      cache > 0 ? absl::StrFormat(" + %.0f sample cache", mib(cache)) : std::string(),
      source > 0 ? absl::StrFormat(" + %.0f pack group buffers", mib(source)) : std::string(),
      1 + allocator_overhead);
}

ServerMemoryBound ComputeServerMemoryBound(const ServiceOptions& options, int64_t manifest_bytes,
                                           int64_t max_file_bytes, int64_t source_buffer_bytes) {
  ServerMemoryBound b;
  b.base = kServerBaseBytes + 2 * manifest_bytes;
  b.samples = options.inflight_budget_bytes + options.max_stream_inflight_bytes;
  b.transport = options.transport_memory_bytes > 0 ? options.transport_memory_bytes : -1;
  b.requests = int64_t{options.max_streams} * options.max_ids_per_request * 32;
  b.streams = int64_t{options.max_streams} * kStreamStateBytes;
  b.unary = int64_t{options.max_unary_calls} * kUnaryCallBytes;
  b.waiting = int64_t{options.max_waiting_unary_calls} * kWaitingCallBytes;
  // A worker holds one file, libjpeg's memory, the decoded region (at most
  // twice the crop side after DCT scaling), the crop and its tensor.
  const int64_t crop = options.max_crop_size;
  const int64_t pixels = (2 * crop) * (2 * crop) * 3 + crop * crop * 3 + crop * crop * 12;
  b.prep = int64_t{options.prep_workers} *
           (max_file_bytes + options.limits.max_memory_bytes + pixels);
  // Every cached entry is charged its bytes and kCacheEntryOverheadBytes.
  b.cache = options.cache.bytes;
  b.source = source_buffer_bytes;
  b.allocator_overhead = kAllocatorOverhead;
  return b;
}

}  // namespace sophon
