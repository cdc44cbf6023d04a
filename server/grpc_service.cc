#include "server/grpc_service.h"

#include "sophon/net/grpc_util.h"

namespace sophon {

grpc::Status GrpcSampleService::GetManifest(grpc::ServerContext*,
                                            const v1::GetManifestRequest* request,
                                            v1::Manifest* response) {
  return ToGrpcStatus(impl_->GetManifest(*request, response));
}

grpc::Status GrpcSampleService::GetStats(grpc::ServerContext*, const v1::GetStatsRequest* request,
                                         v1::ServerStats* response) {
  return ToGrpcStatus(impl_->GetStats(*request, response));
}

namespace {

class GrpcFetchStream final : public FetchStream {
 public:
  explicit GrpcFetchStream(
      grpc::ServerReaderWriter<v1::FetchResponse, v1::FetchRequest>* stream)
      : stream_(stream) {}
  bool Read(v1::FetchRequest* request) override { return stream_->Read(request); }
  bool Write(const v1::FetchResponse& response) override { return stream_->Write(response); }

 private:
  grpc::ServerReaderWriter<v1::FetchResponse, v1::FetchRequest>* const stream_;
};

}  // namespace

grpc::Status GrpcSampleService::Fetch(
    grpc::ServerContext*, grpc::ServerReaderWriter<v1::FetchResponse, v1::FetchRequest>* stream) {
  GrpcFetchStream adapter(stream);
  return ToGrpcStatus(impl_->Fetch(&adapter));
}

}  // namespace sophon
