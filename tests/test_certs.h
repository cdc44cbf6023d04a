// TLS certificates for tests, made at test time with the `openssl` command
// line tool (tools/install-deps.sh installs it) into a directory.
#ifndef SOPHON_TESTS_TEST_CERTS_H_
#define SOPHON_TESTS_TEST_CERTS_H_

#include <string>

#include "absl/status/statusor.h"

namespace sophon::testing {

// PEM file paths. All keys are EC P-256, unencrypted; certificates last a day.
struct TestCertificates {
  std::string ca;                   // the CA that signs the three below
  std::string server_cert;          // subjectAltName IP:127.0.0.1, DNS:localhost
  std::string server_key;
  std::string client_cert;          // a client certificate (CN=sophon-test-client)
  std::string client_key;
  std::string other_ca;             // an unrelated CA
  std::string other_client_cert;    // a client certificate signed by other_ca
  std::string other_client_key;
};

// Writes the certificates into `dir` (which must exist). Errors carry
// openssl's output.
absl::StatusOr<TestCertificates> MakeTestCertificates(const std::string& dir);

}  // namespace sophon::testing

#endif  // SOPHON_TESTS_TEST_CERTS_H_
