// A client of the standard gRPC health service (grpc.health.v1.Health/Check),
// which every storage node serves: what a load balancer or an orchestrator
// asks, and what the training node can ask before it sends work.
#ifndef SOPHON_NET_HEALTH_CHECK_H_
#define SOPHON_NET_HEALTH_CHECK_H_

#include <grpcpp/channel.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace sophon {

// grpc.health.v1.HealthCheckResponse.ServingStatus.
enum class ServingStatus : int {
  kUnknown = 0,
  kServing = 1,
  kNotServing = 2,
  kServiceUnknown = 3,
};
const char* ServingStatusName(ServingStatus status);

// One Check call for `service` ("" = the server as a whole) with `timeout`.
// The call's error (UNAVAILABLE when nothing listens, NOT_FOUND for a
// service the server does not know) names the method; a reply that is not a
// HealthCheckResponse is INTERNAL.
absl::StatusOr<ServingStatus> CheckHealth(const std::shared_ptr<grpc::Channel>& channel,
                                          absl::string_view service, absl::Duration timeout);

}  // namespace sophon

#endif  // SOPHON_NET_HEALTH_CHECK_H_
