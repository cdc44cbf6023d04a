// What one request message of each unary method may take: a limit per method,
// from the fields of its request type, instead of the one limit gRPC applies
// to every method (ServiceOptions.max_request_bytes + kGrpcMessageSlackBytes,
// which Fetch needs). Fetch keeps ServiceOptions.max_request_bytes
// (fetch_request.h).
//
// Each limit is the request type's known fields at their largest encoding
// plus kNewFieldsBytes, room for fields a newer client may add (unknown here,
// skipped when parsed). The unary methods are served as streams so that the
// service sees each call before gRPC reads its request (unary_reactor.h says
// what that bounds, and what gRPC 1.51 does not let it bound).
#ifndef SOPHON_SERVER_REQUEST_LIMITS_H_
#define SOPHON_SERVER_REQUEST_LIMITS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "server/manifest_pages.h"

namespace sophon {

// A field whose number is below 16 (a 1-byte tag) holding a varint at its
// largest (10 bytes: a uint64, or a negative enum value).
inline constexpr int64_t kVarintFieldMaxBytes = 1 + 10;
// Room in every unary request for fields this server does not know.
inline constexpr int64_t kNewFieldsBytes = 1024;
// The longest service name a health request may name
// (grpc.health.v1.HealthCheckRequest.service; ours is
// "sophon.v1.SampleService").
inline constexpr int64_t kMaxHealthServiceNameBytes = 1024;

// The methods a client calls with one request message, served by
// UnaryReactor.
enum class UnaryMethod : int {
  kGetManifest = 0,
  kGetManifestPage,
  kGetRelativePaths,
  kGetStats,
  kHealthCheck,   // grpc.health.v1.Health/Check
  kHealthWatch,   // grpc.health.v1.Health/Watch: one request, then a status per change
};
inline constexpr int kNumUnaryMethods = 6;

struct UnaryMethodInfo {
  const char* path;   // "/sophon.v1.SampleService/GetStats", as gRPC routes it
  const char* name;   // "GetStats", as errors name it
  // The most bytes one request message may take (encoded, without gRPC's
  // 5-byte prefix).
  int64_t max_request_bytes;
};

// GetManifestRequest and GetStatsRequest have no fields; GetManifestPageRequest
// has two uint64s (fingerprint, start); GetRelativePathsRequest a uint64
// (fingerprint) and at most kMaxRelativePathsPerRequest uint64 ids (unpacked,
// their larger encoding; a request naming more is refused by its check, not
// by its size, up to what fits); HealthCheckRequest a string (service) of at
// most kMaxHealthServiceNameBytes (a 1-byte tag, a 2-byte length).
inline constexpr UnaryMethodInfo kUnaryMethods[kNumUnaryMethods] = {
    {"/sophon.v1.SampleService/GetManifest", "GetManifest", 0 + kNewFieldsBytes},
    {"/sophon.v1.SampleService/GetManifestPage", "GetManifestPage",
     2 * kVarintFieldMaxBytes + kNewFieldsBytes},
    {"/sophon.v1.SampleService/GetRelativePaths", "GetRelativePaths",
     (1 + kMaxRelativePathsPerRequest) * kVarintFieldMaxBytes + kNewFieldsBytes},
    {"/sophon.v1.SampleService/GetStats", "GetStats", 0 + kNewFieldsBytes},
    {"/grpc.health.v1.Health/Check", "grpc.health.v1.Health/Check",
     1 + 2 + kMaxHealthServiceNameBytes + kNewFieldsBytes},
    {"/grpc.health.v1.Health/Watch", "grpc.health.v1.Health/Watch",
     1 + 2 + kMaxHealthServiceNameBytes + kNewFieldsBytes},
};

inline const UnaryMethodInfo& MethodInfo(UnaryMethod method) {
  return kUnaryMethods[static_cast<int>(method)];
}

// RESOURCE_EXHAUSTED naming the method and its limit when a request message of
// `bytes` is over it ("GetStats: a request message of 65536 bytes is over the
// server's limit for GetStats requests (1024 bytes)"); OK otherwise.
absl::Status CheckUnaryRequestBytes(UnaryMethod method, int64_t bytes);

}  // namespace sophon

#endif  // SOPHON_SERVER_REQUEST_LIMITS_H_
