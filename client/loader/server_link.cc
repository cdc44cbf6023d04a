// The loader's links to its servers: their state and routing (ServerLinks),
// the writer of each (WriteLoop, WriteRequests), and failover: a server lost
// to its replicas (LoseServerLocked) and probed again when an epoch starts,
// when every other server's health service is asked too (ProbeServers).
#include "client/loader/server_link.h"

#include <algorithm>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/loader/stream_loader.h"
#include "sophon/net/wire.h"
#include "spdlog/spdlog.h"

namespace sophon {

void ServerLink::ResetForEpoch() {
  outbox.clear();
  owed = 0;
  gen = 0;
  opened_at_break = 0;
  stream_done = lost;
  call.reset();
}

ServerLinks::ServerLinks(const ServerSet& servers, const FeatureExtractor* local)
    : manifest_(servers.manifest()), links_(servers.size()) {
  for (int i = 0; i < servers.size(); ++i) {
    links_[i].server = i;
    links_[i].client = servers.client(i);
    links_[i].max_stage = ServedStage(servers.client(i)->manifest(), local);
    links_[i].key_offset = manifest_.shards()[manifest_.ShardOfServer(i)].base;
  }
}

Stage ServerLinks::StageFor(int server, Stage stage) const {
  return std::min(stage, links_[server].max_stage);
}

int ServerLinks::Route(uint64_t id, int wanted) const {
  const GlobalManifest& m = manifest_;
  const Shard& shard = m.shards()[m.ShardOf(id)];
  if (wanted != SampleAssignment::kAnyServer) {
    if (wanted < 0 || wanted >= static_cast<int>(links_.size()) ||
        m.ShardOfServer(wanted) != m.ShardOf(id)) {
      return -1;
    }
    if (!links_[wanted].lost) return wanted;
  }
  int best = -1;
  for (int s : shard.servers) {
    if (links_[s].lost) continue;
    if (best < 0 || links_[s].owed < links_[best].owed) best = s;
  }
  return best;
}

bool ServerLinks::HasLiveReplica(int server) const {
  const GlobalManifest& m = manifest_;
  for (int r : m.shards()[m.ShardOfServer(server)].servers) {
    if (r != server && !links_[r].lost && !links_[r].client->IsDown()) return true;
  }
  return false;
}

void ServerLinks::AwaitShardsWithoutServers() {
  for (const Shard& shard : manifest_.shards()) {
    bool any = false;
    for (int s : shard.servers) any = any || !links_[s].lost;
    if (!any) {
      for (int s : shard.servers) links_[s].lost = false;
    }
  }
}

bool WriteRequests(const LoaderOptions& options, uint64_t epoch, uint64_t key_offset,
                   FetchCall* call, const LinkRequests& requests) {
  FetchRequestBuilder builder(epoch, options.seed, options.pipeline, key_offset);
  for (size_t i = 0; i < requests.size(); ++i) {
    builder.Add(requests[i].first - key_offset, requests[i].second);
    if (builder.size() == options.requests_per_message || i + 1 == requests.size()) {
      if (!call->Write(builder.Take())) return false;  // the stream broke: see ReceiveLoop
    }
  }
  return true;
}

void StreamLoader::WriteLoop(int server, const EpochPlan& plan) {
  uint64_t gen = 0;
  std::shared_ptr<FetchCall> call;
  uint64_t key_offset = 0;  // constant; read once under the lock
  {
    absl::MutexLock lock(&mu_);
    gen = links_[server].gen;
    call = links_[server].call;
    key_offset = links_[server].key_offset;
  }
  SampleClient* const client = servers_->client(server);
  bool done_sent = false;
  while (true) {
    LinkRequests writes;
    bool resend = false;
    bool send_done = false;
    size_t owed_at_break = 0;
    {
      absl::MutexLock lock(&mu_);
      ServerLink& link = links_[server];
      auto ready = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return stopping_ || !error_.ok() || link.stream_done || link.gen != gen ||
               !link.outbox.empty() || (!done_sent && AllReceivedLocked());
      };
      mu_.Await(absl::Condition(&ready));
      if (stopping_ || !error_.ok() || link.stream_done) return;
      if (link.gen != gen) {
        // The receiver re-opened the stream: everything owed goes out again,
        // the queued requests with it (they are registered, so they count).
        gen = link.gen;
        call = link.call;
        done_sent = false;
        link.outbox.clear();
        for (const auto& [index, batch] : pending_) {
          for (int i = 0; i < batch->n; ++i) {
            if (batch->arrived[i] || batch->assigned[i].server != server) continue;
            writes.emplace_back(batch->ids[i], batch->assigned[i].stage);
            if (index < link.opened_at_break) ++owed_at_break;
          }
        }
        stats_.resent += writes.size();
        stats_.servers[server].resent += writes.size();
        resend = true;
      } else if (!link.outbox.empty()) {
        writes.swap(link.outbox);
      } else {
        send_done = true;
        done_sent = true;
      }
    }
    if (resend && !writes.empty()) {
      // Batches the trainer made room for while the stream was down were
      // written to the dead stream: they are requested here too.
      spdlog::info("requesting again from storage server {} the {} samples not received yet: {} "
                   "owed when the stream ended, {} requested on it after that",
                   client->address(), writes.size(), owed_at_break,
                   writes.size() - owed_at_break);
    }
    // A failed write means the stream broke: the receiver re-opens it and
    // the next generation resends.
    if (!writes.empty()) WriteRequests(options_, plan.epoch, key_offset, call.get(), writes);
    if (send_done) call->WritesDone();
  }
}

void StreamLoader::LoseServerLocked(int server, const absl::Status& why) {
  ServerLink& link = links_[server];
  link.lost = true;
  link.client->MarkDown(why);  // statistics calls skip it too
  stats_.servers[server].lost = true;
  const GlobalManifest& m = servers_->manifest();
  const int shard_index = m.ShardOfServer(server);
  const Shard& shard = m.shards()[shard_index];
  if (links_.Route(shard.base, SampleAssignment::kAnyServer) < 0) {
    // No replica left: count what this epoch will miss.
    int64_t owed = 0;
    for (const auto& [index, batch] : pending_) {
      for (int i = 0; i < batch->n; ++i) {
        if (!batch->arrived[i] && batch->assigned[i].server == server) ++owed;
      }
    }
    const int64_t b = options_.batch_size;
    const std::vector<uint64_t>& order = plan_->order;
    const int64_t total = std::min(static_cast<int64_t>(order.size()), plan_->num_batches * b);
    int64_t unrequested = 0;
    for (int64_t p = opened_batches_ * b; p < total; ++p) {
      if (m.ShardOf(order[p]) == shard_index) ++unrequested;
    }
    FailLocked(absl::UnavailableError(absl::StrCat(
        "storage server ", link.client->address(), " is gone and no other server holds its shard ('",
        shard.dataset_name, "', ", shard.size, " samples): ", owed + unrequested,
        " samples of epoch ", plan_->epoch, " are missing (", owed, " requested and not received, ",
        unrequested, " not requested yet); ", why.message())));
    return;
  }
  uint64_t moved = 0;
  std::vector<int> to;
  for (const auto& [index, batch] : pending_) {
    for (int i = 0; i < batch->n; ++i) {
      if (batch->arrived[i] || batch->assigned[i].server != server) continue;
      const int r = links_.Route(batch->ids[i], SampleAssignment::kAnyServer);
      batch->assigned[i].server = r;
      batch->assigned[i].stage = links_.StageFor(r, batch->assigned[i].stage);
      links_[r].Queue(batch->ids[i], batch->assigned[i].stage);
      ++moved;
      if (std::find(to.begin(), to.end(), r) == to.end()) to.push_back(r);
    }
  }
  link.owed = 0;
  link.outbox.clear();
  stats_.servers[server].failed_over += moved;
  std::vector<std::string> names;
  for (int r : to) names.push_back(links_[r].client->address());
  spdlog::warn("storage server {} is down ({}); going on without it: its {} samples owed go to "
               "{}, and its shard's next samples to the other servers that hold it (it is "
               "probed again when an epoch starts)",
               link.client->address(), std::string(why.message()), moved,
               names.empty() ? std::string("none") : absl::StrJoin(names, ", "));
}

absl::Status StreamLoader::ProbeServers(uint64_t epoch) {
  const GlobalManifest& m = servers_->manifest();
  std::vector<int> down;
  std::vector<int> up;  // up, with replicas: its health service is asked
  {
    absl::MutexLock lock(&mu_);
    for (const ServerLink& link : links_) {
      if (link.lost || link.client->IsDown()) {
        down.push_back(link.server);
      } else if (m.shards()[m.ShardOfServer(link.server)].servers.size() > 1) {
        up.push_back(link.server);
      }
    }
  }
  // Once each, all at once: a refused connection answers at once, a host
  // that is away costs SampleClient::kProbeTimeout.
  std::vector<absl::Status> probes(down.size());
  std::vector<absl::Status> serving(up.size());
  {
    std::vector<std::thread> threads;
    for (size_t i = 0; i < down.size(); ++i) {
      threads.emplace_back([&, i] { probes[i] = servers_->client(down[i])->Probe(); });
      NameLoaderThread(threads.back(), absl::StrCat("sophon-probe-", down[i]));
    }
    for (size_t i = 0; i < up.size(); ++i) {
      threads.emplace_back([&, i] {
        serving[i] = servers_->client(up[i])->CheckServing(SampleClient::kProbeTimeout);
      });
      NameLoaderThread(threads.back(), absl::StrCat("sophon-health-", up[i]));
    }
    for (std::thread& t : threads) t.join();
  }
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < down.size(); ++i) {
    ServerLink& link = links_[down[i]];
    if (probes[i].code() == absl::StatusCode::kFailedPrecondition) return probes[i];  // other data
    if (probes[i].ok()) {
      if (link.lost) {
        spdlog::info("storage server {} is back: it serves again from epoch {}",
                     link.client->address(), epoch);
      }
      link.lost = false;
    }
  }
  // A server that served at the last epoch's end and drains now (its drain
  // began after its stream ended, or reached that stream only after the
  // client had all it asked for) refuses a new stream: none is opened while
  // a replica serves, as if its stream had ended saying it drains.
  for (size_t i = 0; i < up.size(); ++i) {
    if (serving[i].ok() || !links_.HasLiveReplica(up[i])) continue;
    ServerLink& link = links_[up[i]];
    link.lost = true;
    link.client->MarkDown(serving[i]);
    spdlog::warn("{}; epoch {} goes on without it", std::string(serving[i].message()), epoch);
  }
  for (size_t i = 0; i < down.size(); ++i) {
    ServerLink& link = links_[down[i]];
    if (link.lost || !link.client->IsDown()) continue;
    // Down and not given up on yet: not waited for while a replica serves.
    if (links_.HasLiveReplica(down[i])) {
      link.lost = true;
      spdlog::warn("storage server {} is down ({}); epoch {} goes on without it",
                   link.client->address(), std::string(probes[i].message()), epoch);
    }
  }
  // A shard none of whose servers is left is waited for (up to
  // connect_timeout, as any server that broke) rather than failed at once:
  // one of them may be back by then.
  links_.AwaitShardsWithoutServers();
  return absl::OkStatus();
}

}  // namespace sophon
