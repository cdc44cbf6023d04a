#include "sophon/net/tls_credentials.h"

#include <grpcpp/security/credentials.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "sophon/base/small_file.h"
#include "sophon/net/bearer_token.h"

namespace sophon {
namespace {

// PEM files hold a few certificates: anything larger is a wrong path.
constexpr int64_t kMaxPemFileBytes = 1 << 20;

// OpenSSL's last error as text (and the error queue cleared).
std::string OpenSslError() {
  const unsigned long code = ERR_peek_last_error();  // NOLINT(runtime/int): OpenSSL's type
  ERR_clear_error();
  if (code == 0) return "not valid PEM";
  char text[256];
  ERR_error_string_n(code, text, sizeof(text));
  return text;
}

// The first certificate of `pem` (a chain or a CA bundle), parsed by OpenSSL.
absl::StatusOr<std::unique_ptr<X509, decltype(&X509_free)>> ParseCertificate(
    absl::string_view option, const std::string& path, const std::string& pem) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_mem_buf(pem.data(), pem.size()),
                                               BIO_free);
  std::unique_ptr<X509, decltype(&X509_free)> cert(
      bio ? PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr) : nullptr, X509_free);
  if (cert == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(option, ": '", path,
                                                   "' holds no certificate that OpenSSL can "
                                                   "read: ", OpenSslError()));
  }
  return cert;
}

// The key in `key_pem` parses and belongs to the first certificate of `cert_pem`.
absl::Status CheckKeyPair(const CredentialsOptions& options, const std::string& cert_pem,
                          const std::string& key_pem) {
  absl::StatusOr<std::unique_ptr<X509, decltype(&X509_free)>> cert =
      ParseCertificate("CredentialsOptions.tls_cert", options.tls_cert, cert_pem);
  if (!cert.ok()) return cert.status();
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_mem_buf(key_pem.data(), key_pem.size()),
                                               BIO_free);
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(
      bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr) : nullptr,
      EVP_PKEY_free);
  if (key == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CredentialsOptions.tls_key: '", options.tls_key,
        "' holds no private key that OpenSSL can read (an encrypted key is not supported): ",
        OpenSslError()));
  }
  if (X509_check_private_key(cert->get(), key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat(
        "CredentialsOptions.tls_key: the key in '", options.tls_key,
        "' is not the private key of the certificate in '", options.tls_cert, "'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadOptional(absl::string_view option, const std::string& path,
                                         absl::string_view pem_type) {
  if (path.empty()) return std::string();
  return ReadPemFile(option, path, pem_type);
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const CredentialsOptions& options) {
  if (absl::Status s = options.Validate(CredentialsSide::kServer); !s.ok()) return s;
  absl::StatusOr<std::string> cert =
      ReadPemFile("CredentialsOptions.tls_cert", options.tls_cert, "CERTIFICATE");
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key =
      ReadPemFile("CredentialsOptions.tls_key", options.tls_key, "PRIVATE KEY");
  if (!key.ok()) return key.status();
  if (absl::Status s = CheckKeyPair(options, *cert, *key); !s.ok()) return s;
  absl::StatusOr<std::string> client_ca =
      ReadOptional("CredentialsOptions.tls_client_ca", options.tls_client_ca, "CERTIFICATE");
  if (!client_ca.ok()) return client_ca.status();
  if (!client_ca->empty()) {
    absl::Status s = ParseCertificate("CredentialsOptions.tls_client_ca", options.tls_client_ca,
                                      *client_ca)
                         .status();
    if (!s.ok()) return s;
  }
  std::string token;
  if (!options.auth_token_file.empty()) {
    absl::StatusOr<std::string> read =
        ReadBearerToken("CredentialsOptions.auth_token_file", options.auth_token_file);
    if (!read.ok()) return read.status();
    token = *std::move(read);
  }

  grpc::SslServerCredentialsOptions ssl(
      client_ca->empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                         : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  ssl.pem_root_certs = *client_ca;
  ssl.pem_key_cert_pairs.push_back({*std::move(key), *std::move(cert)});
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::SslServerCredentials(ssl);
  if (credentials == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CredentialsOptions.tls_cert: gRPC refused the certificate '", options.tls_cert,
        "' and key '", options.tls_key, "'"));
  }
  // Only on secure credentials: gRPC aborts if a processor is set on insecure ones.
  if (!token.empty()) credentials->SetAuthMetadataProcessor(MakeBearerTokenProcessor(token));
  return credentials;
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const CredentialsOptions& options) {
  if (absl::Status s = options.Validate(CredentialsSide::kChannel); !s.ok()) return s;
  grpc::SslCredentialsOptions ssl;
  absl::StatusOr<std::string> ca =
      ReadOptional("CredentialsOptions.tls_ca", options.tls_ca, "CERTIFICATE");
  if (!ca.ok()) return ca.status();
  if (!ca->empty()) {
    absl::Status s = ParseCertificate("CredentialsOptions.tls_ca", options.tls_ca, *ca).status();
    if (!s.ok()) return s;
  }
  ssl.pem_root_certs = *std::move(ca);  // empty: gRPC's default roots
  absl::StatusOr<std::string> cert =
      ReadOptional("CredentialsOptions.tls_cert", options.tls_cert, "CERTIFICATE");
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key =
      ReadOptional("CredentialsOptions.tls_key", options.tls_key, "PRIVATE KEY");
  if (!key.ok()) return key.status();
  if (!cert->empty()) {
    if (absl::Status s = CheckKeyPair(options, *cert, *key); !s.ok()) return s;
  }
  ssl.pem_cert_chain = *std::move(cert);
  ssl.pem_private_key = *std::move(key);
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::SslCredentials(ssl);
  if (credentials == nullptr) {
    return absl::InvalidArgumentError(
        "CredentialsOptions.tls_ca: gRPC could not make TLS channel credentials");
  }
  if (options.auth_token_file.empty()) return credentials;
  absl::StatusOr<std::string> token =
      ReadBearerToken("CredentialsOptions.auth_token_file", options.auth_token_file);
  if (!token.ok()) return token.status();
  // Sends "authorization: Bearer <token>" on every call; gRPC sends call
  // credentials only over a secure channel.
  return grpc::CompositeChannelCredentials(credentials, grpc::AccessTokenCredentials(*token));
}

void SetChannelArguments(const CredentialsOptions& options, grpc::ChannelArguments* args) {
  if (!options.tls_server_name.empty()) args->SetSslTargetNameOverride(options.tls_server_name);
}

}  // namespace

absl::StatusOr<std::string> ReadPemFile(absl::string_view option, const std::string& path,
                                        absl::string_view pem_type) {
  absl::StatusOr<std::string> read = ReadSmallFile(option, path, kMaxPemFileBytes, "a PEM file");
  if (!read.ok()) return read.status();
  const std::string& text = *read;
  // A line "-----BEGIN CERTIFICATE-----", or "-----BEGIN [EC |RSA ]PRIVATE KEY-----".
  const std::string suffix = absl::StrCat(pem_type, "-----");
  for (size_t begin = text.find("-----BEGIN "); begin != std::string::npos;
       begin = text.find("-----BEGIN ", begin + 1)) {
    absl::string_view line = absl::string_view(text).substr(begin);
    line = line.substr(0, line.find('\n'));
    if (absl::EndsWith(absl::StripTrailingAsciiWhitespace(line), suffix)) return text;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      option, ": '", path, "' holds no PEM block '-----BEGIN ...", pem_type, "-----'"));
}

CredentialsFactory TlsCredentialsFactory() {
  CredentialsFactory factory;
  factory.server = MakeServerCredentials;
  factory.channel = MakeChannelCredentials;
  factory.channel_arguments = SetChannelArguments;
  return factory;
}

}  // namespace sophon
