#include "sophon/net/health_check.h"

#include <grpcpp/client_context.h>
#include <grpcpp/impl/codegen/client_unary_call.h>
#include <grpcpp/impl/codegen/rpc_method.h>
#include <grpcpp/support/byte_buffer.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sophon/net/grpc_util.h"

namespace sophon {
namespace {

constexpr char kCheckMethod[] = "/grpc.health.v1.Health/Check";

// The two messages have one field each, so they are written and read here
// rather than generated: HealthCheckRequest { string service = 1; } and
// HealthCheckResponse { ServingStatus status = 1; }.
std::string EncodeRequest(absl::string_view service) {
  std::string out;
  if (service.empty()) return out;  // proto3: a default field is not written
  out.push_back(0x0a);              // field 1, length-delimited
  for (uint64_t n = service.size(); ; n >>= 7) {
    if (n < 0x80) {
      out.push_back(static_cast<char>(n));
      break;
    }
    out.push_back(static_cast<char>((n & 0x7f) | 0x80));
  }
  out.append(service.data(), service.size());
  return out;
}

// Reads field 1 (a varint) of a HealthCheckResponse; other fields of the
// known wire types are skipped. False if the bytes are not such a message.
bool DecodeStatus(const std::string& bytes, uint64_t* status) {
  *status = 0;
  size_t i = 0;
  const auto varint = [&](uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64 && i < bytes.size(); shift += 7) {
      const uint8_t b = static_cast<uint8_t>(bytes[i++]);
      *v |= uint64_t{b & 0x7fu} << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  };
  while (i < bytes.size()) {
    uint64_t key = 0;
    if (!varint(&key)) return false;
    const uint64_t field = key >> 3, type = key & 7;
    uint64_t v = 0;
    if (type == 0) {
      if (!varint(&v)) return false;
      if (field == 1) *status = v;
    } else if (type == 2) {
      if (!varint(&v) || v > bytes.size() - i) return false;
      i += v;
    } else if (type == 1 || type == 5) {
      const size_t n = type == 1 ? 8 : 4;
      if (n > bytes.size() - i) return false;
      i += n;
    } else {
      return false;
    }
  }
  return true;
}

}  // namespace

const char* ServingStatusName(ServingStatus status) {
  switch (status) {
    case ServingStatus::kUnknown: return "UNKNOWN";
    case ServingStatus::kServing: return "SERVING";
    case ServingStatus::kNotServing: return "NOT_SERVING";
    case ServingStatus::kServiceUnknown: return "SERVICE_UNKNOWN";
  }
  return "UNKNOWN";
}

absl::StatusOr<ServingStatus> CheckHealth(const std::shared_ptr<grpc::Channel>& channel,
                                          absl::string_view service, absl::Duration timeout) {
  const std::string request_bytes = EncodeRequest(service);
  grpc::Slice slice(request_bytes);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  const grpc::internal::RpcMethod method(kCheckMethod, grpc::internal::RpcMethod::NORMAL_RPC);
  const grpc::Status status = grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
      channel.get(), method, &context, request, &response);
  const std::string what = absl::StrCat("grpc.health.v1.Health/Check of '", service, "'");
  if (!status.ok()) return WrapError(what, status);
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (response.Dump(&slices).ok()) {
    for (const grpc::Slice& s : slices) {
      bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
  }
  uint64_t value = 0;
  if (!DecodeStatus(bytes, &value) || value > 3) {
    return absl::InternalError(
        absl::StrCat(what, ": the reply (", bytes.size(), " bytes) is not a HealthCheckResponse"));
  }
  return static_cast<ServingStatus>(value);
}

}  // namespace sophon
