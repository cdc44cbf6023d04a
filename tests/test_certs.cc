#include "tests/test_certs.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace sophon::testing {

absl::StatusOr<TestCertificates> MakeTestCertificates(const std::string& dir) {
  // One shell script: a CA, a leaf signed by it (extensions from a file).
  const std::string script = absl::StrCat(R"(set -e
cd ')", dir, R"('
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1"; }
ca() {
  key "$1.key"
  openssl req -x509 -new -key "$1.key" -out "$1.pem" -days 1 -subj "/CN=$2" \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
}
leaf() {  # name ca cn extensions
  key "$1.key"
  openssl req -new -key "$1.key" -out "$1.csr" -subj "/CN=$3"
  printf '%b\n' "$4" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA "$2.pem" -CAkey "$2.key" -set_serial "$RANDOM$RANDOM" \
    -days 1 -out "$1.pem" -extfile "$1.ext"
}
ca ca "Sophon Test CA"
ca other_ca "Unrelated Test CA"
leaf server ca localhost \
  'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost'
leaf client ca sophon-test-client \
  'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=clientAuth'
leaf other_client other_ca sophon-other-client \
  'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=clientAuth'
)");
  const std::string script_path = dir + "/make-certs.sh";
  const std::string log_path = dir + "/make-certs.log";
  {
    std::ofstream out(script_path);
    out << script;
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", script_path));
  }
  const int rc = std::system(absl::StrCat("bash '", script_path, "' > '", log_path, "' 2>&1").c_str());
  if (rc != 0) {
    std::ifstream log(log_path);
    std::stringstream text;
    text << log.rdbuf();
    return absl::InternalError(
        absl::StrCat("making test certificates with openssl failed (status ", rc, "): ",
                     text.str()));
  }
  TestCertificates c;
  c.ca = dir + "/ca.pem";
  c.server_cert = dir + "/server.pem";
  c.server_key = dir + "/server.key";
  c.client_cert = dir + "/client.pem";
  c.client_key = dir + "/client.key";
  c.other_ca = dir + "/other_ca.pem";
  c.other_client_cert = dir + "/other_client.pem";
  c.other_client_key = dir + "/other_client.key";
  return c;
}

}  // namespace sophon::testing
