#include "server/grpc_service.h"

#include <grpcpp/impl/codegen/proto_utils.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "server/fetch_reactor.h"
#include "server/request_limits.h"
#include "server/unary_reactor.h"

namespace sophon {
namespace {

// Parses a request of type T (already within its method's limit);
// INVALID_ARGUMENT naming the method and the type if the bytes are not one.
template <typename T>
absl::Status ParseRequest(const std::string& bytes, UnaryMethod method, T* out) {
  if (!out->ParseFromString(bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(MethodInfo(method).name, ": a request of ",
                                                   bytes.size(), " bytes is not a valid ",
                                                   out->GetTypeName()));
  }
  return absl::OkStatus();
}

// `bytes` (which outlive every call: the service's encoded manifest) as the
// response, without a copy.
void SetStaticResponse(absl::string_view bytes, grpc::ByteBuffer* response) {
  grpc::Slice slice(bytes.data(), bytes.size(), grpc::Slice::STATIC_SLICE);
  *response = grpc::ByteBuffer(&slice, 1);
}

template <typename T>
absl::Status Serialize(const T& message, const char* what, grpc::ByteBuffer* response) {
  bool own = false;
  if (!grpc::SerializationTraits<T>::Serialize(message, response, &own).ok()) {
    return absl::InternalError(absl::StrCat("the ", what, " could not be encoded"));
  }
  return absl::OkStatus();
}

absl::Status GetManifest(SampleServiceImpl* impl, const std::string& peer,
                         const std::string& request, grpc::ByteBuffer* response) {
  v1::GetManifestRequest parsed;
  absl::Status status = ParseRequest(request, UnaryMethod::kGetManifest, &parsed);
  if (status.ok()) {
    SetStaticResponse(impl->manifest_pages().header(), response);
  } else {
    impl->RecordRejection(Limit::kInvalidRequest, peer, status);
  }
  return status;
}

absl::Status GetManifestPage(SampleServiceImpl* impl, const std::string& peer,
                             const std::string& request, grpc::ByteBuffer* response) {
  v1::GetManifestPageRequest parsed;
  absl::Status status = ParseRequest(request, UnaryMethod::kGetManifestPage, &parsed);
  if (!status.ok()) {
    impl->RecordRejection(Limit::kInvalidRequest, peer, status);
    return status;
  }
  absl::StatusOr<absl::string_view> page = impl->manifest_pages().Page(parsed);
  if (page.ok()) {
    SetStaticResponse(*page, response);
  } else if (absl::IsOutOfRange(page.status())) {
    // Another fingerprint is a restart the client will see; a start outside
    // the manifest is a client that does not follow the contract.
    impl->RecordRejection(Limit::kInvalidRequest, peer, page.status());
  }
  return page.status();
}

absl::Status GetRelativePaths(SampleServiceImpl* impl, const std::string& peer,
                              const std::string& request, grpc::ByteBuffer* response) {
  v1::GetRelativePathsRequest parsed;
  absl::Status status = ParseRequest(request, UnaryMethod::kGetRelativePaths, &parsed);
  if (status.ok()) {
    v1::RelativePaths paths;
    status = RelativePathsOf(impl->source(), parsed, &paths);
    if (status.ok()) status = Serialize(paths, "relative paths", response);
  }
  if (!status.ok() && !absl::IsFailedPrecondition(status)) {
    impl->RecordRejection(Limit::kInvalidRequest, peer, status);
  }
  return status;
}

absl::Status GetStats(SampleServiceImpl* impl, const std::string& peer,
                      const std::string& request, grpc::ByteBuffer* response) {
  v1::GetStatsRequest parsed;
  absl::Status status = ParseRequest(request, UnaryMethod::kGetStats, &parsed);
  if (!status.ok()) {
    impl->RecordRejection(Limit::kInvalidRequest, peer, status);
    return status;
  }
  v1::ServerStats stats;
  status = impl->GetStats(parsed, &stats);
  if (status.ok()) status = Serialize(stats, "server stats", response);
  return status;
}

}  // namespace

GrpcSampleService::GrpcSampleService(SampleServiceImpl* impl) {
  AddStreamMethod("/sophon.v1.SampleService/Fetch",
                  [impl](grpc::CallbackServerContext* context) -> Reactor* {
                    return new FetchReactor(impl, context);
                  });
  using AnswerFn = absl::Status (*)(SampleServiceImpl*, const std::string&, const std::string&,
                                    grpc::ByteBuffer*);
  for (const auto& [method, answer] : {
           std::pair<UnaryMethod, AnswerFn>{UnaryMethod::kGetManifest, &GetManifest},
           {UnaryMethod::kGetManifestPage, &GetManifestPage},
           {UnaryMethod::kGetRelativePaths, &GetRelativePaths},
           {UnaryMethod::kGetStats, &GetStats},
       }) {
    AddUnaryMethod(
        MethodInfo(method).path,
        [impl, method = method, answer = answer](grpc::CallbackServerContext* context) -> Reactor* {
          return UnaryReactor::Unary(
              impl, context, method,
              [impl, answer](const std::string& peer, const std::string& request,
                             grpc::ByteBuffer* response) {
                return answer(impl, peer, request, response);
              });
        });
  }
}

}  // namespace sophon
