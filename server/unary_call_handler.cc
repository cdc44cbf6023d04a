#include "server/unary_call_handler.h"

#include <grpcpp/server_context.h>

#include <atomic>
#include <utility>

namespace grpc {
namespace internal {

// gRPC 1.51.1's CallbackBidiHandler::ServerCallbackReaderWriterImpl, but for
// the inline flag of MaybeDone where the finish, the call's completion op or
// the start is the last to complete (gRPC passes false there, for every bidi
// reactor: OnDone on the executor).
class CallbackBidiHandler<sophon::UnaryCall, grpc::ByteBuffer>::Stream final
    : public ServerCallbackReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  Stream(grpc::CallbackServerContext* ctx, grpc::internal::Call* call,
         std::function<void()> call_requester)
      : ctx_(ctx), call_(*call), call_requester_(std::move(call_requester)) {}

  void Finish(grpc::Status s) override {
    finish_tag_.Set(
        call_.call(), [this](bool) { this->MaybeDone(/*inline_ondone=*/true); }, &finish_ops_,
        /*can_inline=*/true);
    finish_ops_.set_core_cq_tag(&finish_tag_);
    if (!ctx_->sent_initial_metadata_) {
      finish_ops_.SendInitialMetadata(&ctx_->initial_metadata_, ctx_->initial_metadata_flags());
      if (ctx_->compression_level_set()) {
        finish_ops_.set_compression_level(ctx_->compression_level());
      }
      ctx_->sent_initial_metadata_ = true;
    }
    finish_ops_.ServerSendStatus(&ctx_->trailing_metadata_, s);
    call_.PerformOps(&finish_ops_);
  }

  void SendInitialMetadata() override {
    GPR_CODEGEN_ASSERT(!ctx_->sent_initial_metadata_);
    this->Ref();
    meta_tag_.Set(
        call_.call(),
        [this](bool ok) {
          reactor_.load(std::memory_order_relaxed)->OnSendInitialMetadataDone(ok);
          this->MaybeDone(/*inline_ondone=*/true);
        },
        &meta_ops_, /*can_inline=*/false);
    meta_ops_.SendInitialMetadata(&ctx_->initial_metadata_, ctx_->initial_metadata_flags());
    if (ctx_->compression_level_set()) {
      meta_ops_.set_compression_level(ctx_->compression_level());
    }
    ctx_->sent_initial_metadata_ = true;
    meta_ops_.set_core_cq_tag(&meta_tag_);
    call_.PerformOps(&meta_ops_);
  }

  void Write(const grpc::ByteBuffer* resp, grpc::WriteOptions options) override {
    this->Ref();
    if (options.is_last_message()) options.set_buffer_hint();
    if (!ctx_->sent_initial_metadata_) {
      write_ops_.SendInitialMetadata(&ctx_->initial_metadata_, ctx_->initial_metadata_flags());
      if (ctx_->compression_level_set()) {
        write_ops_.set_compression_level(ctx_->compression_level());
      }
      ctx_->sent_initial_metadata_ = true;
    }
    GPR_CODEGEN_ASSERT(write_ops_.SendMessagePtr(resp, options).ok());
    call_.PerformOps(&write_ops_);
  }

  void WriteAndFinish(const grpc::ByteBuffer* resp, grpc::WriteOptions options,
                      grpc::Status s) override {
    GPR_CODEGEN_ASSERT(finish_ops_.SendMessagePtr(resp, options).ok());
    Finish(std::move(s));
  }

  void Read(grpc::ByteBuffer* req) override {
    this->Ref();
    read_ops_.RecvMessage(req);
    call_.PerformOps(&read_ops_);
  }

  void SetupReactor(Reactor* reactor) {
    reactor_.store(reactor, std::memory_order_relaxed);
    write_tag_.Set(
        call_.call(),
        [this, reactor](bool ok) {
          reactor->OnWriteDone(ok);
          this->MaybeDone(/*inline_ondone=*/true);
        },
        &write_ops_, /*can_inline=*/false);
    write_ops_.set_core_cq_tag(&write_tag_);
    read_tag_.Set(
        call_.call(),
        [this, reactor](bool ok) {
          if (GPR_UNLIKELY(!ok)) ctx_->MaybeMarkCancelledOnRead();
          reactor->OnReadDone(ok);
          this->MaybeDone(/*inline_ondone=*/true);
        },
        &read_ops_, /*can_inline=*/false);
    read_ops_.set_core_cq_tag(&read_tag_);
    this->BindReactor(reactor);
    this->MaybeCallOnCancel(reactor);
    this->MaybeDone(/*inline_ondone=*/true);
  }

 private:
  void CallOnDone() override {
    reactor_.load(std::memory_order_relaxed)->OnDone();
    grpc_call* call = call_.call();
    auto call_requester = std::move(call_requester_);
    if (ctx_->context_allocator() != nullptr) ctx_->context_allocator()->Release(ctx_);
    this->~Stream();  // in the call's arena: destroyed, not deleted
    grpc::g_core_codegen_interface->grpc_call_unref(call);
    call_requester();
  }

  ServerReactor* reactor() override { return reactor_.load(std::memory_order_relaxed); }

  grpc::internal::CallOpSet<grpc::internal::CallOpSendInitialMetadata> meta_ops_;
  grpc::internal::CallbackWithSuccessTag meta_tag_;
  grpc::internal::CallOpSet<grpc::internal::CallOpSendInitialMetadata,
                            grpc::internal::CallOpSendMessage,
                            grpc::internal::CallOpServerSendStatus>
      finish_ops_;
  grpc::internal::CallbackWithSuccessTag finish_tag_;
  grpc::internal::CallOpSet<grpc::internal::CallOpSendInitialMetadata,
                            grpc::internal::CallOpSendMessage>
      write_ops_;
  grpc::internal::CallbackWithSuccessTag write_tag_;
  grpc::internal::CallOpSet<grpc::internal::CallOpRecvMessage<grpc::ByteBuffer>> read_ops_;
  grpc::internal::CallbackWithSuccessTag read_tag_;

  grpc::CallbackServerContext* const ctx_;
  grpc::internal::Call call_;
  std::function<void()> call_requester_;
  std::atomic<Reactor*> reactor_{nullptr};
};

void CallbackBidiHandler<sophon::UnaryCall, grpc::ByteBuffer>::RunHandler(
    const HandlerParameter& param) {
  grpc::g_core_codegen_interface->grpc_call_ref(param.call->call());
  auto* context = static_cast<grpc::CallbackServerContext*>(param.server_context);
  auto* stream = new (grpc::g_core_codegen_interface->grpc_call_arena_alloc(
      param.call->call(), sizeof(Stream))) Stream(context, param.call, param.call_requester);
  param.server_context->BeginCompletionOp(
      param.call, [stream](bool) { stream->MaybeDone(/*inline_ondone=*/true); }, stream);

  Reactor* reactor = nullptr;
  if (param.status.ok()) {
    reactor = grpc::internal::CatchingReactorGetter<Reactor>(make_, context);
  }
  if (reactor == nullptr) {
    using Unimplemented = UnimplementedBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>;
    reactor = new (grpc::g_core_codegen_interface->grpc_call_arena_alloc(param.call->call(),
                                                                         sizeof(Unimplemented)))
        Unimplemented(grpc::Status(grpc::StatusCode::UNIMPLEMENTED, ""));
  }
  stream->SetupReactor(reactor);
}

}  // namespace internal
}  // namespace grpc
