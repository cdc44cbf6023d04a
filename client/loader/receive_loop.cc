// A server's receiver: reads each Fetch stream to its end, routing the
// samples to the prep queue (ReadStream, RouteSamplesLocked), then goes on
// from how the stream ended (EndStream: DecideStreamBreak from its code and
// the server's reason): done, a stream refused for want of a slot opened
// again after a backoff, or a broken stream recovered (RecoverBrokenStream:
// a new stream to a live server, the server lost to its replicas, or awaited
// up to connect_timeout, AwaitServerBack), else the epoch fails.
#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/loader/stream_break.h"
#include "client/loader/stream_loader.h"
#include "spdlog/spdlog.h"

namespace sophon {
namespace {

BackoffOptions ResetBackoff() {
  BackoffOptions backoff;
  backoff.initial = absl::Milliseconds(50);
  backoff.max = absl::Seconds(1);
  backoff.multiplier = 2;
  backoff.jitter = 0.5;
  return backoff;
}

}  // namespace

StreamLoader::Receiver::Receiver(int server, SampleClient* client)
    : server(server),
      client(client),
      address(client->address()),
      refusal_backoff(SampleClient::RetryBackoff()),
      reset_backoff(ResetBackoff()) {}

void StreamLoader::ReceiveLoop(int server, const EpochPlan& plan) {
  Receiver r(server, servers_->client(server));
  {
    absl::MutexLock lock(&mu_);
    r.call = links_[server].call;
    r.key_offset = links_[server].key_offset;
  }
  while (true) {
    const int64_t delivered = ReadStream(plan, &r);
    const StreamEnd end = EndStream(delivered, &r);
    if (end.done) break;
    if (end.refusal_wait > absl::ZeroDuration()) {
      r.client->LogRetry(absl::StrCat("opening a fetch stream from storage server ", r.address),
                         end.status, end.refusal_wait);
      if (!ReopenAfter(end.refusal_wait, &r)) break;
      continue;
    }
    if (!RecoverBrokenStream(end, delivered, &r)) break;
  }
  absl::MutexLock lock(&mu_);
  links_[server].stream_done = true;
  --streams_open_;
}

int64_t StreamLoader::ReadStream(const EpochPlan& plan, Receiver* r) {
  int64_t delivered = 0;
  while (r->call->Read(&r->response)) {
    absl::MutexLock lock(&mu_);
    delivered += RouteSamplesLocked(plan, *r, &r->response);
  }
  return delivered;
}

int64_t StreamLoader::RouteSamplesLocked(const EpochPlan& plan, const Receiver& r,
                                         v1::FetchResponse* response) {
  const std::vector<int64_t>& position_of_id = plan.position_of_id;
  const int64_t b = options_.batch_size;
  const int server = r.server;
  ServerLink& link = links_[server];
  int64_t delivered = 0;
  for (v1::Sample& sample : *response->mutable_samples()) {
    const uint64_t id = r.key_offset + sample.id();
    const int64_t pos = id < position_of_id.size() ? position_of_id[id] : -1;
    auto it = pos >= 0 ? pending_.find(pos / b) : pending_.end();
    const int slot = static_cast<int>(pos % b);
    if (it == pending_.end() || it->second->arrived[slot] ||
        it->second->assigned[slot].server != server) {
      FailLocked(absl::DataLossError(absl::StrCat(
          "storage server ", r.address, " sent sample ", sample.id(), " (global id ", id, ")",
          it == pending_.end() || it->second->assigned[slot].server != server
              ? " that was not requested from it"
              : " twice")));
      break;
    }
    it->second->arrived[slot] = 1;
    link.owed--;
    queued_payload_bytes_ += sample.payload().size();
    stats_.servers[server].samples++;
    stats_.servers[server].bytes += sample.payload().size();
    NotePeaksLocked();
    WorkItem item;
    item.id = id;
    item.server = server;
    item.sample = std::move(sample);
    item.batch = it->second.get();
    item.slot = slot;
    work_.push_back(std::move(item));
    ++received_;
    ++delivered;
  }
  return delivered;
}

StreamLoader::StreamEnd StreamLoader::EndStream(int64_t delivered, Receiver* r) {
  StreamEnd end;
  end.status = r->call->Finish();
  const absl::Status& status = end.status;
  // Whether to retry is decided from the code and the server's reason.
  const std::string reason = r->call->RefusalReason();
  const StreamBreakAction action =
      DecideStreamBreak({status, reason, r->call->largest_request_bytes()});
  absl::MutexLock lock(&mu_);
  ServerLink& link = links_[r->server];
  ServerLoadStats& ss = stats_.servers[r->server];
  end.done = true;
  if (EndingLocked()) return end;
  if (status.ok()) {
    if (link.owed > 0) {
      FailLocked(absl::DataLossError(
          absl::StrCat("storage server ", r->address, " closed the stream with ", link.owed,
                       " requested samples missing")));
    }
    return end;
  }
  end.outstanding = link.owed;
  link.opened_at_break = opened_batches_;
  // Everything the epoch needs has arrived: nothing to reconnect for.
  if (end.outstanding == 0 && AllReceivedLocked()) return end;
  if (action == StreamBreakAction::kAwaitSlot && delivered == 0) {
    stats_.streams_refused++;
    ss.streams_refused++;
    const absl::Time now = absl::Now();
    if (r->refusals++ == 0) {
      r->refused_since = now;
      r->refusal_backoff.Reset();
    }
    const absl::Duration left = r->refused_since + r->client->connect_timeout() - now;
    if (left <= absl::ZeroDuration()) {
      FailLocked(absl::ResourceExhaustedError(absl::StrCat(
          "storage server ", r->address, " refused a fetch stream ", r->refusals,
          " times in a row over ",
          absl::FormatDuration(absl::Trunc(now - r->refused_since, absl::Milliseconds(1))),
          " (ClientOptions.connect_timeout = ",
          absl::FormatDuration(r->client->connect_timeout()), "): ", status.message())));
      return end;
    }
    end.refusal_wait = std::min(r->refusal_backoff.Next(), left);
  } else {
    r->refusals = 0;
    stats_.stream_breaks++;
    ss.stream_breaks++;
    if (action == StreamBreakAction::kFail) {
      FailLocked(absl::Status(status.code(),
                              absl::StrCat("fetch stream from storage server ", r->address,
                                           " failed: ", status.message())));
      return end;
    }
  }
  end.done = false;
  return end;
}

bool StreamLoader::RecoverBrokenStream(const StreamEnd& end, int64_t delivered, Receiver* r) {
  const absl::Status& status = end.status;
  const std::string broke_with = absl::StrCat(
      "its fetch stream failed (", absl::StatusCodeToString(status.code()), ": ",
      status.message(), ")");
  if (r->call->ServerDraining()) {
    // Stopping (a rolling restart): it hands back what it had not started.
    absl::MutexLock lock(&mu_);
    if (EndingLocked()) return false;
    if (links_.HasLiveReplica(r->server)) {
      LoseServerLocked(r->server,
                       absl::UnavailableError(absl::StrCat(broke_with, ": it is draining")));
      return false;
    }
  }
  // Does the server still answer? A live one that reset the stream does at
  // once; one whose process is gone refuses the connection at once.
  if (delivered > 0) r->reset_backoff.Reset();
  const absl::Status ping = r->client->Ping();
  if (ping.ok() || ping.code() == absl::StatusCode::kResourceExhausted) {
    // Alive (RESOURCE_EXHAUSTED: answering, but short of memory): a new
    // stream after a backoff, and everything it owes requested again.
    // However often: only a server that stops answering is given up on.
    const absl::Duration wait = r->reset_backoff.Next();
    r->client->LogRetry(absl::StrCat("the fetch stream from storage server ", r->address, " (",
                                     end.outstanding, " requested samples not received; the "
                                     "server still answers)"),
                        status, wait);
    if (!ReopenAfter(wait, r)) return false;
    absl::MutexLock lock(&mu_);
    stats_.reconnects++;
    stats_.servers[r->server].reconnects++;
    return true;
  }
  {
    absl::MutexLock lock(&mu_);
    if (EndingLocked()) return false;
    if (ping.code() == absl::StatusCode::kFailedPrecondition) {  // another dataset
      FailLocked(ping);
      return false;
    }
    // Unreachable (the connection refused: the process is gone) while a
    // replica can serve: its samples go there now, not after connect_timeout.
    if (ping.code() == absl::StatusCode::kUnavailable && links_.HasLiveReplica(r->server)) {
      LoseServerLocked(r->server, absl::UnavailableError(absl::StrCat(
                                      broke_with, " and it does not answer: ", ping.message())));
      return false;
    }
  }
  return AwaitServerBack(end, broke_with, r);
}

bool StreamLoader::AwaitServerBack(const StreamEnd& end, const std::string& broke_with,
                                   Receiver* r) {
  const absl::Status& status = end.status;
  SampleClient* const client = r->client;
  spdlog::warn("fetch stream from storage server {} broke ({}: {}) with {} requested samples "
               "not received; waiting up to {} for it to come back, then requesting those "
               "again with any requested while it is away",
               r->address, absl::StatusCodeToString(status.code()), std::string(status.message()),
               end.outstanding, absl::FormatDuration(client->connect_timeout()));
  const absl::Time broke = absl::Now();
  absl::Status back = client->AwaitSameServer([this]() {
    absl::MutexLock lock(&mu_);
    return EndingLocked();
  });
  std::shared_ptr<FetchCall> fresh;
  if (back.ok()) fresh = client->OpenFetch();
  absl::MutexLock lock(&mu_);
  if (EndingLocked()) return false;
  if (!back.ok()) {
    // Gone for good: a changed dataset fails the run; a server that did
    // not come back hands its samples to its replicas, if any.
    if (back.code() == absl::StatusCode::kUnavailable) {
      LoseServerLocked(r->server, absl::UnavailableError(absl::StrCat(
                                      broke_with, " and it did not answer again within ",
                                      absl::FormatDuration(client->connect_timeout()),
                                      " (ClientOptions.connect_timeout): ", back.message())));
    } else {
      FailLocked(std::move(back));
    }
    return false;
  }
  spdlog::info("storage server {} is back after {}; fetch stream re-opened", r->address,
               absl::FormatDuration(absl::Trunc(absl::Now() - broke, absl::Milliseconds(100))));
  AdoptStreamLocked(std::move(fresh), r);
  stats_.reconnects++;
  stats_.servers[r->server].reconnects++;
  return true;
}

bool StreamLoader::ReopenAfter(absl::Duration wait, Receiver* r) {
  {
    absl::MutexLock lock(&mu_);
    auto done = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return stopping_ || !error_.ok(); };
    mu_.AwaitWithTimeout(absl::Condition(&done), wait);
    if (EndingLocked()) return false;
  }
  std::shared_ptr<FetchCall> fresh = r->client->OpenFetch();
  absl::MutexLock lock(&mu_);
  if (EndingLocked()) return false;
  AdoptStreamLocked(std::move(fresh), r);
  return true;
}

void StreamLoader::AdoptStreamLocked(std::shared_ptr<FetchCall> fresh, Receiver* r) {
  links_[r->server].call = fresh;
  r->call = std::move(fresh);
  ++links_[r->server].gen;  // the writer requests again what had not arrived
}

}  // namespace sophon
