// The storage servers of a training job: one SampleClient (channel) per
// server, and the global manifest of what they hold together
// (global_manifest.h: sharded, replicated or mixed).
#ifndef SOPHON_CLIENT_LOADER_SERVER_SET_H_
#define SOPHON_CLIENT_LOADER_SERVER_SET_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/loader/global_manifest.h"
#include "client/loader/sample_client.h"

namespace sophon {

class ServerSet {
 public:
  // Connects to every server at once (each retrying up to its
  // connect_timeout) and builds the global manifest. InvalidArgument naming
  // the address when one is listed twice; a failed connection's error names
  // its address.
  static absl::StatusOr<std::unique_ptr<ServerSet>> Connect(
      const std::vector<ClientOptions>& options);
  // Over clients that are already connected; they must outlive the set.
  static absl::StatusOr<std::unique_ptr<ServerSet>> Of(const std::vector<SampleClient*>& clients);

  int size() const { return static_cast<int>(clients_.size()); }
  SampleClient* client(int server) const { return clients_[server]; }
  const std::string& address(int server) const { return addresses_[server]; }
  const std::vector<std::string>& addresses() const { return addresses_; }
  const GlobalManifest& manifest() const { return manifest_; }
  // For messages: global sample `id`'s relative path, asked of server
  // `server` (one that holds it; SampleClient::RelativePaths), or "its sample
  // N (path unknown: REASON)" when the server cannot say.
  // REQUIRES: id < manifest().num_samples().
  std::string RelativePath(uint64_t id, int server) const;
  // "sharded: 3000 samples, ... on a, b, c".
  std::string Describe() const { return manifest_.Describe(addresses_); }

 private:
  ServerSet() = default;
  static absl::StatusOr<std::unique_ptr<ServerSet>> Build(std::unique_ptr<ServerSet> set);

  std::vector<std::unique_ptr<SampleClient>> owned_;
  std::vector<SampleClient*> clients_;
  std::vector<std::string> addresses_;
  GlobalManifest manifest_;
};

}  // namespace sophon

#endif  // SOPHON_CLIENT_LOADER_SERVER_SET_H_
