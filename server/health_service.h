// gRPC's standard health service (grpc.health.v1.Health: Check, and Watch
// which answers a status per change), served as gRPC's default one is (""
// SERVING from the start; a name never set is unknown: NOT_FOUND to Check,
// SERVICE_UNKNOWN to Watch; after Shutdown every name NOT_SERVING, later
// changes ignored) but with its calls as UnaryReactors: counted as unary
// calls before their request is read, the request held to its limit
// (request_limits.h) and read with a deadline. gRPC's default service reads
// each request whole before any code of the server sees the call.
#ifndef SOPHON_SERVER_HEALTH_SERVICE_H_
#define SOPHON_SERVER_HEALTH_SERVICE_H_

#include <grpcpp/health_check_service_interface.h>

#include <map>
#include <memory>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/streamed_service.h"
#include "sophon/net/health_check.h"

namespace sophon {

class SampleServiceImpl;

class HealthService final : public grpc::HealthCheckServiceInterface {
 public:
  // `service` (whose unary call counts and options the calls use) must
  // outlive this object.
  explicit HealthService(SampleServiceImpl* service);
  ~HealthService() override;

  // grpc::HealthCheckServiceInterface. Thread-safe.
  void SetServingStatus(const std::string& service_name, bool serving) override;
  void SetServingStatus(bool serving) override;
  void Shutdown() override;

  // The methods, to register with the server that serves them.
  grpc::Service* methods() { return methods_.get(); }
  // SERVING, NOT_SERVING, or SERVICE_UNKNOWN for a name never set.
  ServingStatus Status(const std::string& service_name) const;

 private:
  class Watch;
  void SetLocked(const std::string& service_name, ServingStatus status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Registers `watch` for `service_name` and sends it the current status.
  void AddWatch(const std::string& service_name, Watch* watch);
  void RemoveWatch(const std::string& service_name, Watch* watch);

  std::unique_ptr<StreamedService> methods_;
  mutable absl::Mutex mu_;
  std::map<std::string, ServingStatus> statuses_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::set<Watch*>> watches_ ABSL_GUARDED_BY(mu_);
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace sophon

#endif  // SOPHON_SERVER_HEALTH_SERVICE_H_
