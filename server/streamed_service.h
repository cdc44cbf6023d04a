// A gRPC service whose methods are all streams at gRPC's level, served by
// callback reactors over raw bytes, whatever they are in the proto. gRPC
// reads a unary (or server-streaming) method's request message before it
// hands the call to the service (its payload handling
// GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER), all of the message, however
// large its 5-byte prefix announces it; a stream's call reaches the service
// at its headers with nothing read (GRPC_SRM_PAYLOAD_NONE), and gRPC receives
// no more than the stream's initial window until the service asks to read.
// A unary method served as a stream is the same on the wire: one request
// message and a half-close, one response message and the status.
#ifndef SOPHON_SERVER_STREAMED_SERVICE_H_
#define SOPHON_SERVER_STREAMED_SERVICE_H_

#include <grpcpp/impl/codegen/rpc_service_method.h>
#include <grpcpp/impl/codegen/server_callback_handlers.h>
#include <grpcpp/impl/service_type.h>
#include <grpcpp/support/byte_buffer.h>

#include <functional>
#include <utility>

#include "server/unary_call_handler.h"

namespace sophon {

class StreamedService : public grpc::Service {
 public:
  using Reactor = grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>;
  using MakeReactor = std::function<Reactor*(grpc::CallbackServerContext*)>;

 protected:
  // Serves `path` ("/package.Service/Method", a string that outlives the
  // service) with the reactors `make` returns, one per call.
  void AddStreamMethod(const char* path, MakeReactor make) {
    AddMethod(new grpc::internal::RpcServiceMethod(
        path, grpc::internal::RpcMethod::BIDI_STREAMING, nullptr));
    MarkMethodRawCallback(
        methods_++,
        new grpc::internal::CallbackBidiHandler<grpc::ByteBuffer, grpc::ByteBuffer>(
            std::move(make)));
  }
  // The same for a unary method, whose reactors (UnaryReactor) end their
  // calls inline (unary_call_handler.h).
  void AddUnaryMethod(const char* path, MakeReactor make) {
    AddMethod(new grpc::internal::RpcServiceMethod(
        path, grpc::internal::RpcMethod::BIDI_STREAMING, nullptr));
    MarkMethodRawCallback(methods_++, new UnaryCallHandler(std::move(make)));
  }

 private:
  int methods_ = 0;
};

}  // namespace sophon

#endif  // SOPHON_SERVER_STREAMED_SERVICE_H_
