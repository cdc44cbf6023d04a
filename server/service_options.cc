#include "server/service_options.h"

#include <algorithm>
#include <tuple>

#include "absl/strings/string_view.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "sophon/net/refusal.h"

namespace sophon {
namespace {

// The least max_request_bytes Validate accepts. Clients take a request
// message over what every server's gRPC accepts as one gRPC itself may refuse
// (sophon/net/refusal.h).
constexpr int64_t kMinMaxRequestBytes = 64;
static_assert(kMinServerMessageLimitBytes == kMinMaxRequestBytes + kGrpcMessageSlackBytes);

absl::Status AtLeast(absl::string_view field, int64_t value, int64_t min) {
  if (value >= min) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("ServiceOptions.", field, " must be at least ", min, ", got ", value));
}

}  // namespace

int64_t ServiceOptions::PeerInflightBytes() const {
  if (max_peer_inflight_bytes > 0) return max_peer_inflight_bytes;
  return std::max(max_stream_inflight_bytes, inflight_budget_bytes / 2);
}

int ServiceOptions::ReadingStreams() const {
  if (transport_memory_bytes <= 0) return max_streams;
  const int64_t slots = transport_memory_bytes / kReadSlotQuotaShare /
                        (max_request_bytes + kGrpcMessageSlackBytes);
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(max_streams, slots)));
}

int ServiceOptions::ReadingStreamsPerPeer() const {
  return std::min(max_reading_streams_per_peer, ReadingStreams());
}

absl::Duration ServiceOptions::FirstRequestTimeout() const {
  return std::min(absl::Seconds(1), read_stall_timeout);
}

absl::Status ServiceOptions::Validate() const {
  if (prep_workers < 1 || prep_workers > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("ServiceOptions.prep_workers must be in [1, 1024], got ", prep_workers));
  }
  if (!(cpu_limit >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ServiceOptions.cpu_limit must be >= 0 (0 = detect), got ", cpu_limit));
  }
  for (const auto& [field, value, min] : {
           std::tuple<absl::string_view, int64_t, int64_t>{"max_inflight_per_stream",
                                                          max_inflight_per_stream, 1},
           {"max_stream_inflight_bytes", max_stream_inflight_bytes, 1 << 10},
           {"inflight_budget_bytes", inflight_budget_bytes, 1 << 10},
           {"max_peer_inflight_bytes", max_peer_inflight_bytes, 0},
           {"transport_memory_bytes", transport_memory_bytes, 0},
           {"max_calls_per_connection", max_calls_per_connection, 1},
           {"max_unary_calls_per_peer", max_unary_calls_per_peer, 1},
           {"max_unary_calls", max_unary_calls, 1},
           {"max_waiting_unary_calls", max_waiting_unary_calls, 0},
           {"stream_window_bytes", stream_window_bytes, 1 << 10},
           {"max_streams", max_streams, 1},
           {"max_streams_per_peer", max_streams_per_peer, 1},
           {"max_reading_streams_per_peer", max_reading_streams_per_peer, 1},
           {"max_ids_per_request", max_ids_per_request, 1},
           {"max_request_bytes", max_request_bytes, kMinMaxRequestBytes},
           {"max_crop_size", max_crop_size, 1},
           {"max_samples_per_message", max_samples_per_message, 1},
           {"max_message_bytes", max_message_bytes, 1},
           {"manifest_page_bytes", manifest_page_bytes, 64},
           {"limits.max_pixels", limits.max_pixels, 1},
       }) {
    if (absl::Status s = AtLeast(field, value, min); !s.ok()) return s;
  }
  if (max_stream_inflight_bytes > inflight_budget_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ServiceOptions.max_stream_inflight_bytes (", max_stream_inflight_bytes,
        ") must not exceed ServiceOptions.inflight_budget_bytes (", inflight_budget_bytes, ")"));
  }
  if (max_peer_inflight_bytes > 0 && (max_stream_inflight_bytes > max_peer_inflight_bytes ||
                                      max_peer_inflight_bytes > inflight_budget_bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ServiceOptions.max_peer_inflight_bytes (", max_peer_inflight_bytes,
        ") must lie between ServiceOptions.max_stream_inflight_bytes (", max_stream_inflight_bytes,
        ") and ServiceOptions.inflight_budget_bytes (", inflight_budget_bytes, ")"));
  }
  if (transport_memory_bytes > 0 && transport_memory_bytes < (int64_t{16} << 20)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ServiceOptions.transport_memory_bytes must be 0 (no quota) or at least 16 MiB, got ",
        transport_memory_bytes));
  }
  if (transport_memory_bytes > 0 &&
      transport_memory_bytes / kReadSlotQuotaShare < max_request_bytes + kGrpcMessageSlackBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ServiceOptions.transport_memory_bytes (", transport_memory_bytes,
        ") must be at least ", kReadSlotQuotaShare,
        " times ServiceOptions.max_request_bytes + 4 KiB (", max_request_bytes,
        " + 4096): a quarter of it bounds the request messages being received"));
  }
  if (unary_wait_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ServiceOptions.unary_wait_timeout must be positive, got ",
        absl::FormatDuration(unary_wait_timeout)));
  }
  if (read_stall_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ServiceOptions.read_stall_timeout must be positive, got ",
        absl::FormatDuration(read_stall_timeout)));
  }
  if (write_stall_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ServiceOptions.write_stall_timeout must be positive, got ",
        absl::FormatDuration(write_stall_timeout)));
  }
  if (max_request_bytes > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ServiceOptions.max_request_bytes must be at most 1 GiB, got ", max_request_bytes));
  }
  if (manifest_page_bytes > (int64_t{64} << 20)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ServiceOptions.manifest_page_bytes must be at most 64 MiB, got ", manifest_page_bytes));
  }
  if (max_crop_size > 16384) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ServiceOptions.max_crop_size must be at most 16384, got ", max_crop_size));
  }
  if (max_unary_calls_per_peer > max_unary_calls) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ServiceOptions.max_unary_calls_per_peer (", max_unary_calls_per_peer,
        ") must not exceed ServiceOptions.max_unary_calls (", max_unary_calls, ")"));
  }
  if (stream_window_bytes > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ServiceOptions.stream_window_bytes must be at most 1 GiB, got ", stream_window_bytes));
  }
  if (unread_connection_timeout < absl::Seconds(1) ||
      unread_connection_timeout > absl::Hours(24)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ServiceOptions.unread_connection_timeout must be in [1s, 24h], got ",
        absl::FormatDuration(unread_connection_timeout)));
  }
  if (idle_stream_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ServiceOptions.idle_stream_timeout must be positive, got ",
        absl::FormatDuration(idle_stream_timeout)));
  }
  if (absl::Status s = cache.Validate(); !s.ok()) return s;
  if (absl::Status s = memory_release.Validate(); !s.ok()) {
    return absl::Status(s.code(), absl::StrReplaceAll(s.message(), {{"MemoryReleaseOptions.",
                                                                     "ServiceOptions.memory_release."}}));
  }
  return absl::OkStatus();
}

}  // namespace sophon
