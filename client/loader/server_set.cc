#include "client/loader/server_set.h"

#include <set>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"

namespace sophon {

absl::StatusOr<std::unique_ptr<ServerSet>> ServerSet::Connect(
    const std::vector<ClientOptions>& options) {
  if (options.empty()) return absl::InvalidArgumentError("no storage server given");
  std::set<std::string> seen;
  for (const ClientOptions& o : options) {
    if (!seen.insert(o.address).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("ClientOptions.address: storage server ", o.address, " is listed twice"));
    }
  }
  // In parallel: a server that is slow to come up costs its own retries only.
  std::vector<absl::StatusOr<std::unique_ptr<SampleClient>>> results(options.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < options.size(); ++i) {
    threads.emplace_back([&, i] { results[i] = SampleClient::Connect(options[i]); });
  }
  for (std::thread& t : threads) t.join();
  auto set = std::unique_ptr<ServerSet>(new ServerSet());
  for (auto& result : results) {
    if (!result.ok()) return result.status();
    set->clients_.push_back(result->get());
    set->owned_.push_back(*std::move(result));
  }
  return Build(std::move(set));
}

absl::StatusOr<std::unique_ptr<ServerSet>> ServerSet::Of(
    const std::vector<SampleClient*>& clients) {
  auto set = std::unique_ptr<ServerSet>(new ServerSet());
  set->clients_ = clients;
  return Build(std::move(set));
}

absl::StatusOr<std::unique_ptr<ServerSet>> ServerSet::Build(std::unique_ptr<ServerSet> set) {
  std::vector<const ServerManifest*> manifests;
  for (SampleClient* c : set->clients_) {
    manifests.push_back(&c->manifest());
    set->addresses_.push_back(c->address());
  }
  absl::StatusOr<GlobalManifest> manifest = GlobalManifest::Build(manifests, set->addresses_);
  if (!manifest.ok()) return manifest.status();
  set->manifest_ = *std::move(manifest);
  return set;
}

std::string ServerSet::RelativePath(uint64_t id, int server) const {
  const uint64_t local = manifest_.LocalId(id);
  absl::StatusOr<std::vector<std::string>> paths = clients_[server]->RelativePaths({local});
  if (paths.ok()) return (*paths)[0];
  return absl::StrCat("its sample ", local, " (path unknown: ", paths.status().message(), ")");
}

}  // namespace sophon
