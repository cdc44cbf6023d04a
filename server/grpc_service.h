// gRPC adapter over SampleServiceImpl, on the callback API: no thread per
// call. Requests arrive as raw bytes and are parsed here, so that a message
// that is not a valid request gets INVALID_ARGUMENT naming it (gRPC's own
// parser would end a stream with OK or answer INTERNAL without a message).
#ifndef SOPHON_SERVER_GRPC_SERVICE_H_
#define SOPHON_SERVER_GRPC_SERVICE_H_

#include <functional>

#include "absl/status/status.h"
#include "server/service_impl.h"
#include "sophon/v1/sophon.grpc.pb.h"

namespace sophon {

class GrpcSampleService final
    : public v1::SampleService::WithRawCallbackMethod_GetManifest<
          v1::SampleService::WithRawCallbackMethod_Fetch<
              v1::SampleService::WithRawCallbackMethod_GetStats<
                  v1::SampleService::WithRawCallbackMethod_GetManifestPage<
                      v1::SampleService::WithRawCallbackMethod_GetRelativePaths<
                          v1::SampleService::Service>>>>> {
 public:
  explicit GrpcSampleService(SampleServiceImpl* impl) : impl_(impl) {}

  grpc::ServerUnaryReactor* GetManifest(grpc::CallbackServerContext* context,
                                        const grpc::ByteBuffer* request,
                                        grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetManifestPage(grpc::CallbackServerContext* context,
                                            const grpc::ByteBuffer* request,
                                            grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetRelativePaths(grpc::CallbackServerContext* context,
                                             const grpc::ByteBuffer* request,
                                             grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetStats(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Fetch(
      grpc::CallbackServerContext* context) override;

 private:
  // Runs `answer` (fills the response, returns the status) for a unary call
  // counted against ServiceOptions.max_unary_calls_per_peer and
  // max_unary_calls until its answer is taken; over either, the call is
  // refused at once without running it.
  grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* context,
                                   const std::function<absl::Status()>& answer);

  SampleServiceImpl* const impl_;
};

}  // namespace sophon

#endif  // SOPHON_SERVER_GRPC_SERVICE_H_
