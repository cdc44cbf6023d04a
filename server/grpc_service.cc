#include "server/grpc_service.h"

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <grpcpp/impl/codegen/proto_utils.h>

#include "absl/strings/str_cat.h"
#include "server/fetch_reactor.h"
#include "server/stream_registry.h"
#include "sophon/net/grpc_util.h"
#include "sophon/net/refusal.h"

namespace sophon {
namespace {

// Parses a unary request of type T; INVALID_ARGUMENT naming the method and
// the type if the bytes are not one.
template <typename T>
absl::Status ParseUnary(const grpc::ByteBuffer& buffer, const char* method, T* out) {
  if (buffer.Length() > 64 * 1024) {
    return absl::InvalidArgumentError(absl::StrCat(method, ": a request of ", buffer.Length(),
                                                   " bytes is too large for ", out->GetTypeName(),
                                                   " (at most 65536 bytes)"));
  }
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (buffer.Dump(&slices).ok()) {
    for (const grpc::Slice& s : slices) {
      bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
  }
  if (!out->ParseFromString(bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(method, ": a request of ", bytes.size(),
                                                   " bytes is not a valid ", out->GetTypeName()));
  }
  return absl::OkStatus();
}

// A unary call counted in UnaryCalls until gRPC is done with it: its answer
// has been taken, or the call ended.
class CountedUnaryReactor final : public grpc::ServerUnaryReactor {
 public:
  CountedUnaryReactor(UnaryCalls* calls, std::string peer)
      : calls_(calls), peer_(std::move(peer)) {}
  void OnDone() override {
    calls_->Release(peer_);
    delete this;
  }

 private:
  UnaryCalls* const calls_;
  const std::string peer_;
};

grpc::ServerUnaryReactor* FinishUnary(grpc::CallbackServerContext* context,
                                      const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

}  // namespace

// Counts the call against its address's and the server's unary limits; a
// call over either is answered RESOURCE_EXHAUSTED at once, without running
// `answer` (which fills the response and returns the status).
grpc::ServerUnaryReactor* GrpcSampleService::Answer(grpc::CallbackServerContext* context,
                                                    const std::function<absl::Status()>& answer) {
  std::string peer = PeerAddress(context->peer());
  Limit limit = Limit::kMaxUnaryCalls;
  const absl::Status admitted = impl_->unary_calls().Admit(peer, &limit);
  if (!admitted.ok()) {
    impl_->RecordRejection(limit, context->peer(), admitted);
    context->AddTrailingMetadata(kRefusalMetadataKey, RefusalName(limit));
    return FinishUnary(context, admitted);
  }
  auto* reactor = new CountedUnaryReactor(&impl_->unary_calls(), std::move(peer));
  reactor->Finish(ToGrpcStatus(answer()));
  return reactor;
}

namespace {

// `bytes` (which outlive every call: the service's encoded manifest) as the
// response, without a copy.
void SetStaticResponse(absl::string_view bytes, grpc::ByteBuffer* response) {
  grpc::Slice slice(bytes.data(), bytes.size(), grpc::Slice::STATIC_SLICE);
  *response = grpc::ByteBuffer(&slice, 1);
}

}  // namespace

grpc::ServerUnaryReactor* GrpcSampleService::GetManifest(grpc::CallbackServerContext* context,
                                                         const grpc::ByteBuffer* request,
                                                         grpc::ByteBuffer* response) {
  return Answer(context, [&]() -> absl::Status {
    v1::GetManifestRequest parsed;
    absl::Status status = ParseUnary(*request, "GetManifest", &parsed);
    if (status.ok()) {
      SetStaticResponse(impl_->manifest_pages().header(), response);
    } else {
      impl_->RecordRejection(Limit::kInvalidRequest, context->peer(), status);
    }
    return status;
  });
}

grpc::ServerUnaryReactor* GrpcSampleService::GetManifestPage(grpc::CallbackServerContext* context,
                                                             const grpc::ByteBuffer* request,
                                                             grpc::ByteBuffer* response) {
  return Answer(context, [&]() -> absl::Status {
    v1::GetManifestPageRequest parsed;
    absl::Status status = ParseUnary(*request, "GetManifestPage", &parsed);
    if (!status.ok()) {
      impl_->RecordRejection(Limit::kInvalidRequest, context->peer(), status);
      return status;
    }
    absl::StatusOr<absl::string_view> page = impl_->manifest_pages().Page(parsed);
    if (page.ok()) {
      SetStaticResponse(*page, response);
    } else if (absl::IsOutOfRange(page.status())) {
      // Another fingerprint is a restart the client will see; a start outside
      // the manifest is a client that does not follow the contract.
      impl_->RecordRejection(Limit::kInvalidRequest, context->peer(), page.status());
    }
    return page.status();
  });
}

grpc::ServerUnaryReactor* GrpcSampleService::GetRelativePaths(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Answer(context, [&]() -> absl::Status {
    v1::GetRelativePathsRequest parsed;
    absl::Status status = ParseUnary(*request, "GetRelativePaths", &parsed);
    if (status.ok()) {
      v1::RelativePaths paths;
      status = RelativePathsOf(impl_->source(), parsed, &paths);
      bool own = false;
      if (status.ok() &&
          !grpc::SerializationTraits<v1::RelativePaths>::Serialize(paths, response, &own).ok()) {
        status = absl::InternalError("the relative paths could not be encoded");
      }
    }
    if (!status.ok() && !absl::IsFailedPrecondition(status)) {
      impl_->RecordRejection(Limit::kInvalidRequest, context->peer(), status);
    }
    return status;
  });
}

grpc::ServerUnaryReactor* GrpcSampleService::GetStats(grpc::CallbackServerContext* context,
                                                      const grpc::ByteBuffer* request,
                                                      grpc::ByteBuffer* response) {
  return Answer(context, [&]() -> absl::Status {
    v1::GetStatsRequest parsed;
    absl::Status status = ParseUnary(*request, "GetStats", &parsed);
    if (status.ok()) {
      v1::ServerStats stats;
      status = impl_->GetStats(parsed, &stats);
      bool own = false;
      if (status.ok() &&
          !grpc::SerializationTraits<v1::ServerStats>::Serialize(stats, response, &own).ok()) {
        status = absl::InternalError("the server stats could not be encoded");
      }
    } else {
      impl_->RecordRejection(Limit::kInvalidRequest, context->peer(), status);
    }
    return status;
  });
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* GrpcSampleService::Fetch(
    grpc::CallbackServerContext* context) {
  return new FetchReactor(impl_, context);
}

}  // namespace sophon
