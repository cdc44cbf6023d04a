// gRPC adapter over SampleServiceImpl, on the callback API: no thread per
// call. Every method is served as a stream over raw bytes
// (streamed_service.h): Fetch by a FetchReactor, the unary methods by a
// UnaryReactor each, which counts the call before gRPC reads its request and
// holds the request to its method's limit (request_limits.h). Requests are
// parsed here, so that a message that is not a valid request gets
// INVALID_ARGUMENT naming it (gRPC's own parser would end a stream with OK or
// answer INTERNAL without a message).
#ifndef SOPHON_SERVER_GRPC_SERVICE_H_
#define SOPHON_SERVER_GRPC_SERVICE_H_

#include "server/service_impl.h"
#include "server/streamed_service.h"

namespace sophon {

// sophon.v1.SampleService. `impl` must outlive the server it is registered
// with.
class GrpcSampleService final : public StreamedService {
 public:
  explicit GrpcSampleService(SampleServiceImpl* impl);
};

}  // namespace sophon

#endif  // SOPHON_SERVER_GRPC_SERVICE_H_
