#include "server/health_service.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/request_limits.h"
#include "server/service_impl.h"
#include "server/unary_reactor.h"

namespace sophon {
namespace {

using google::protobuf::internal::WireFormatLite;

// HealthCheckRequest { string service = 1; }: field 1, other fields skipped.
// False if the bytes are not such a message.
bool ParseServiceName(const std::string& bytes, std::string* service) {
  service->clear();
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                                            static_cast<int>(bytes.size()));
  while (const uint32_t tag = in.ReadTag()) {
    if (WireFormatLite::GetTagFieldNumber(tag) == 1 &&
        WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      if (!WireFormatLite::ReadString(&in, service)) return false;
    } else if (!WireFormatLite::SkipField(&in, tag)) {
      return false;
    }
  }
  return in.ConsumedEntireMessage();
}

// HealthCheckResponse { ServingStatus status = 1; } (every status but
// UNKNOWN, which is never sent, is written).
grpc::ByteBuffer EncodeStatus(ServingStatus status) {
  const char bytes[2] = {0x08, static_cast<char>(status)};
  grpc::Slice slice(bytes, sizeof(bytes));
  return grpc::ByteBuffer(&slice, 1);
}

absl::Status InvalidRequest(UnaryMethod method, const std::string& request) {
  return absl::InvalidArgumentError(absl::StrCat(MethodInfo(method).name, ": a request of ",
                                                 request.size(),
                                                 " bytes is not a valid HealthCheckRequest"));
}

}  // namespace

// A Watch call: the status of its service now, then each change, until the
// client cancels (or the server stops). Counted as a unary call for its life.
class HealthService::Watch final : public UnaryReactor {
 public:
  Watch(HealthService* health, SampleServiceImpl* service, grpc::CallbackServerContext* context)
      : UnaryReactor(service, context, UnaryMethod::kHealthWatch), health_(health) {
    Start();
  }

  void Update(ServingStatus status) { Send(EncodeStatus(status)); }

 private:
  void OnRequest(std::string request) override {
    std::string name;
    if (!ParseServiceName(request, &name)) {
      const absl::Status status = InvalidRequest(UnaryMethod::kHealthWatch, request);
      service()->RecordRejection(Limit::kInvalidRequest, peer(), status);
      End(status);
      return;
    }
    service_name_ = name;
    health_->AddWatch(name, this);
    watching_ = true;
  }
  void OnCallDone() override {
    if (watching_) health_->RemoveWatch(service_name_, this);
  }

  HealthService* const health_;
  // Set by OnRequest, read by OnCallDone, which gRPC runs after it.
  std::string service_name_;
  bool watching_ = false;
};

HealthService::HealthService(SampleServiceImpl* service) {
  class Methods final : public StreamedService {
   public:
    Methods(HealthService* health, SampleServiceImpl* service) {
      AddUnaryMethod(MethodInfo(UnaryMethod::kHealthCheck).path,
                     [health, service](grpc::CallbackServerContext* context) -> Reactor* {
                       return UnaryReactor::Unary(
                           service, context, UnaryMethod::kHealthCheck,
                           [health, service](const std::string& peer, const std::string& request,
                                             grpc::ByteBuffer* response) {
                             std::string name;
                             if (!ParseServiceName(request, &name)) {
                               const absl::Status status =
                                   InvalidRequest(UnaryMethod::kHealthCheck, request);
                               service->RecordRejection(Limit::kInvalidRequest, peer, status);
                               return status;
                             }
                             const ServingStatus status = health->Status(name);
                             if (status == ServingStatus::kServiceUnknown) {
                               return absl::NotFoundError("service name unknown");
                             }
                             *response = EncodeStatus(status);
                             return absl::OkStatus();
                           });
                     });
      AddUnaryMethod(MethodInfo(UnaryMethod::kHealthWatch).path,
                     [health, service](grpc::CallbackServerContext* context) -> Reactor* {
                       return new Watch(health, service, context);
                     });
    }
  };
  methods_ = std::make_unique<Methods>(this, service);
  absl::MutexLock lock(&mu_);
  statuses_[""] = ServingStatus::kServing;
}

HealthService::~HealthService() = default;

void HealthService::SetLocked(const std::string& service_name, ServingStatus status) {
  ServingStatus& current = statuses_[service_name];
  if (current == status) return;
  current = status;
  auto it = watches_.find(service_name);
  if (it == watches_.end()) return;
  for (Watch* watch : it->second) watch->Update(status);  // never calls back inline
}

void HealthService::SetServingStatus(const std::string& service_name, bool serving) {
  absl::MutexLock lock(&mu_);
  // After Shutdown a name is still registered, NOT_SERVING (as gRPC's own).
  SetLocked(service_name,
            serving && !shutdown_ ? ServingStatus::kServing : ServingStatus::kNotServing);
}

void HealthService::SetServingStatus(bool serving) {
  absl::MutexLock lock(&mu_);
  if (shutdown_) return;
  for (auto& [name, status] : statuses_) {
    SetLocked(name, serving ? ServingStatus::kServing : ServingStatus::kNotServing);
  }
}

void HealthService::Shutdown() {
  absl::MutexLock lock(&mu_);
  if (shutdown_) return;
  shutdown_ = true;
  for (auto& [name, status] : statuses_) SetLocked(name, ServingStatus::kNotServing);
}

ServingStatus HealthService::Status(const std::string& service_name) const {
  absl::MutexLock lock(&mu_);
  auto it = statuses_.find(service_name);
  return it == statuses_.end() ? ServingStatus::kServiceUnknown : it->second;
}

void HealthService::AddWatch(const std::string& service_name, Watch* watch) {
  absl::MutexLock lock(&mu_);
  watches_[service_name].insert(watch);
  auto it = statuses_.find(service_name);
  watch->Update(it == statuses_.end() ? ServingStatus::kServiceUnknown : it->second);
}

void HealthService::RemoveWatch(const std::string& service_name, Watch* watch) {
  absl::MutexLock lock(&mu_);
  auto it = watches_.find(service_name);
  if (it == watches_.end()) return;
  it->second.erase(watch);
  if (it->second.empty()) watches_.erase(it);
}

}  // namespace sophon
