// gRPC adapter over SampleServiceImpl: a few lines per method that convert
// between gRPC and absl::Status (sophon/net/grpc_util.h).
#ifndef SOPHON_SERVER_GRPC_SERVICE_H_
#define SOPHON_SERVER_GRPC_SERVICE_H_

#include "server/service_impl.h"
#include "sophon/v1/sophon.grpc.pb.h"

namespace sophon {

class GrpcSampleService final : public v1::SampleService::Service {
 public:
  explicit GrpcSampleService(SampleServiceImpl* impl) : impl_(impl) {}

  grpc::Status GetManifest(grpc::ServerContext* context, const v1::GetManifestRequest* request,
                           v1::Manifest* response) override;
  grpc::Status GetStats(grpc::ServerContext* context, const v1::GetStatsRequest* request,
                        v1::ServerStats* response) override;
  grpc::Status Fetch(grpc::ServerContext* context,
                     grpc::ServerReaderWriter<v1::FetchResponse, v1::FetchRequest>* stream)
      override;

 private:
  SampleServiceImpl* const impl_;
};

}  // namespace sophon

#endif  // SOPHON_SERVER_GRPC_SERVICE_H_
