#include "sophon/net/bearer_token.h"

#include <grpcpp/security/auth_metadata_processor.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "sophon/base/small_file.h"
#include "spdlog/spdlog.h"

namespace sophon {
namespace {

constexpr absl::string_view kBearerPrefix = "Bearer ";
// A token file is a line, not a data file: anything larger is a wrong path.
constexpr int64_t kMaxTokenFileBytes = 64 << 10;

class BearerTokenProcessor : public grpc::AuthMetadataProcessor {
 public:
  explicit BearerTokenProcessor(std::string token) : token_(std::move(token)) {}

  // A string compare: cheap enough to run on gRPC's own thread.
  bool IsBlocking() const override { return false; }

  grpc::Status Process(const InputMetadata& auth_metadata, grpc::AuthContext* context,
                       OutputMetadata* consumed_auth_metadata, OutputMetadata*) override {
    const auto it = auth_metadata.find("authorization");
    if (it == auth_metadata.end()) {
      return Reject(context, "missing bearer token",
                    "this storage server requires a bearer token and the call carried none "
                    "(give the client the server's token: CredentialsOptions.auth_token_file)");
    }
    const absl::string_view value(it->second.data(), it->second.size());
    if (!absl::StartsWith(value, kBearerPrefix) ||
        !TokenEquals(value.substr(kBearerPrefix.size()), token_)) {
      return Reject(context, "wrong bearer token",
                    "the bearer token the call carried is not this storage server's (check the "
                    "client's token file: CredentialsOptions.auth_token_file)");
    }
    // The service never sees the token.
    consumed_auth_metadata->emplace("authorization", std::string(value));
    return grpc::Status::OK;
  }

 private:
  // Logs at most one line per second, with the number of rejections since.
  grpc::Status Reject(const grpc::AuthContext* context, absl::string_view reason,
                      const std::string& message) {
    const uint64_t rejected = ++rejected_;
    const int64_t now = absl::ToUnixSeconds(absl::Now());
    int64_t last = last_log_second_.load();
    if (now > last && last_log_second_.compare_exchange_strong(last, now)) {
      std::string peer = "no client certificate";
      if (context != nullptr && context->IsPeerAuthenticated()) {
        std::vector<grpc::string_ref> identity = context->GetPeerIdentity();
        if (!identity.empty()) {
          peer = absl::StrCat("client certificate ",
                              absl::CEscape(absl::string_view(identity[0].data(),
                                                              identity[0].size())));
        }
      }
      spdlog::warn("refused a call: {} ({}); {} calls refused for their token so far",
                   std::string(reason), peer, rejected);
    }
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, message);
  }

  const std::string token_;
  std::atomic<uint64_t> rejected_{0};
  std::atomic<int64_t> last_log_second_{0};
};

}  // namespace

absl::StatusOr<std::string> ReadBearerToken(absl::string_view option, const std::string& path) {
  absl::StatusOr<std::string> bytes =
      ReadSmallFile(option, path, kMaxTokenFileBytes, "a file holding one token");
  if (!bytes.ok()) return bytes.status();
  const std::string token(absl::StripAsciiWhitespace(*bytes));
  if (token.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(option, ": token file '", path, "' is empty (it must hold the token)"));
  }
  for (char c : token) {
    if (c <= ' ' || c > '~') {
      return absl::InvalidArgumentError(absl::StrCat(
          option, ": token file '", path,
          "' must hold one token of printable ASCII characters without spaces"));
    }
  }
  return token;
}

bool TokenEquals(absl::string_view presented, absl::string_view secret) {
  if (secret.empty()) return false;
  // Every byte of `presented` is compared with a byte of the secret (cycled),
  // so the time depends on presented.size() only.
  unsigned char diff = presented.size() == secret.size() ? 0 : 1;
  for (size_t i = 0; i < presented.size(); ++i) {
    diff |= static_cast<unsigned char>(presented[i]) ^
            static_cast<unsigned char>(secret[i % secret.size()]);
  }
  return diff == 0;
}

std::shared_ptr<grpc::AuthMetadataProcessor> MakeBearerTokenProcessor(std::string token) {
  return std::make_shared<BearerTokenProcessor>(std::move(token));
}

}  // namespace sophon
