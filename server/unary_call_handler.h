// The gRPC method handler of a unary method served as a stream
// (streamed_service.h, unary_reactor.h): gRPC 1.51's callback bidi handler
// (grpcpp/impl/codegen/server_callback_handlers.h, CallbackBidiHandler) with
// one change: the reactor's OnDone, and the end of the call with it (its
// arena, its transport stream, its server context), runs on the thread that
// completed the call's last operation, as gRPC does for its own unary
// reactors, instead of being queued to gRPC's executor.
//
// Why: gRPC's bidi handler hands every OnDone to grpc_core::Executor (4
// threads on 2 cores here) whatever the reactor says. Unary calls come by the
// thousand per second when a client floods them, nearly all refused at once
// by the call caps; queued OnDones fell behind the calls gRPC accepted
// (100-250 ms behind, up to 26,000 ended calls still held, about 20 KiB each,
// in a 250,000-call flood on 2 cores) and the server's RSS peaked at 0.6-1.2
// GiB where gRPC's unary handling, whose refusals end inline, peaked at
// 230-430 MiB.
//
// REQUIRES of the reactors it serves (UnaryReactor): OnDone is short and
// never blocks (it may run on a gRPC polling thread), and no lock OnDone
// takes is held while the reactor calls Finish (the finish's completion may
// end the call inside Finish). OnCancel still runs on gRPC's executor.
//
// It is a specialization of gRPC's own CallbackBidiHandler template because
// the server context's call set-up (BeginCompletionOp and the initial
// metadata it keeps) is open only to gRPC's handler templates; `UnaryCall`
// only picks the specialization. Written against gRPC 1.51.1 (Debian 12 and
// 13); a gRPC upgrade re-checks it against server_callback_handlers.h.
#ifndef SOPHON_SERVER_UNARY_CALL_HANDLER_H_
#define SOPHON_SERVER_UNARY_CALL_HANDLER_H_

#include <grpcpp/impl/codegen/server_callback_handlers.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/server_callback.h>

#include <functional>

namespace sophon {
// Selects the handler below; never defined.
struct UnaryCall;
}  // namespace sophon

namespace grpc {
namespace internal {

template <>
class CallbackBidiHandler<sophon::UnaryCall, grpc::ByteBuffer> : public MethodHandler {
 public:
  using Reactor = ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>;
  using MakeReactor = std::function<Reactor*(grpc::CallbackServerContext*)>;

  explicit CallbackBidiHandler(MakeReactor make) : make_(std::move(make)) {}
  void RunHandler(const HandlerParameter& param) final;

 private:
  class Stream;

  const MakeReactor make_;
};

}  // namespace internal
}  // namespace grpc

namespace sophon {
using UnaryCallHandler = grpc::internal::CallbackBidiHandler<UnaryCall, grpc::ByteBuffer>;
}  // namespace sophon

#endif  // SOPHON_SERVER_UNARY_CALL_HANDLER_H_
