#include "client/torch/rank_heartbeat.h"

#include <pthread.h>

#include <exception>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/torch/torch_step.h"
#include "spdlog/spdlog.h"

namespace sophon {
namespace {

struct SeenBeat {
  int64_t count = 0;
  int64_t unix_micros = 0;
};

// The beat stored under rank's key: InvalidArgument when malformed,
// Unavailable when the store cannot be read.
absl::StatusOr<SeenBeat> ReadBeat(c10d::Store& store, int rank) {
  std::vector<uint8_t> value;
  try {
    value = store.get(HeartbeatKey(rank));
  } catch (const std::exception& e) {
    return absl::UnavailableError(ExceptionText(e));
  }
  const std::string text(value.begin(), value.end());
  const std::vector<std::string> fields = absl::StrSplit(text, ' ');
  SeenBeat beat;
  if (fields.size() != 2 || !absl::SimpleAtoi(fields[0], &beat.count) ||
      !absl::SimpleAtoi(fields[1], &beat.unix_micros)) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed heartbeat of rank ", rank, ": '", text, "'"));
  }
  return beat;
}

}  // namespace

std::string HeartbeatKey(int rank) { return absl::StrCat("sophon/heartbeat/", rank); }

RankHeartbeat::RankHeartbeat(c10::intrusive_ptr<c10d::Store> writer,
                             c10::intrusive_ptr<c10d::Store> reader,
                             const RankHeartbeatOptions& options)
    : writer_(std::move(writer)), reader_(std::move(reader)), options_(options) {}

absl::StatusOr<std::unique_ptr<RankHeartbeat>> RankHeartbeat::Start(
    c10::intrusive_ptr<c10d::Store> writer, c10::intrusive_ptr<c10d::Store> reader,
    const RankHeartbeatOptions& options) {
  std::unique_ptr<RankHeartbeat> heartbeat(
      new RankHeartbeat(std::move(writer), std::move(reader), options));
  try {
    heartbeat->Beat();
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("rank ", options.rank, " of ", options.world_size,
                                               " cannot write its heartbeat to the store at ",
                                               options.store_address, ": ", ExceptionText(e)));
  }
  heartbeat->thread_ = std::thread([raw = heartbeat.get()] { raw->Run(); });
  return heartbeat;
}

RankHeartbeat::~RankHeartbeat() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

int64_t RankHeartbeat::beats() const {
  absl::MutexLock lock(&mu_);
  return beats_;
}

void RankHeartbeat::Beat() {
  int64_t count;
  {
    absl::MutexLock lock(&mu_);
    count = ++beats_;
  }
  const std::string value = absl::StrCat(count, " ", absl::ToUnixMicros(absl::Now()));
  writer_->set(HeartbeatKey(options_.rank), std::vector<uint8_t>(value.begin(), value.end()));
}

bool RankHeartbeat::WaitForStop(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(absl::Condition(&stop_), timeout);
}

void RankHeartbeat::Run() {
  pthread_setname_np(pthread_self(), "sophon-heartbeat");
  bool failing = false;
  while (!WaitForStop(options_.interval)) {
    try {
      Beat();
      failing = false;
    } catch (const std::exception& e) {
      // The store host is gone (or has shut down at the end of a run): the
      // next collective fails and DescribeSilentRanks says why. Keep trying.
      if (!failing) {
        spdlog::debug("rank {}: cannot write its heartbeat to {}: {}", options_.rank,
                      options_.store_address, ExceptionText(e));
      }
      failing = true;
    }
  }
}

std::string RankHeartbeat::DescribeSilentRanks() {
  const int world = options_.world_size;
  const auto store_gone = [&](const absl::Status& status) {
    return absl::StrCat("rank 0 of ", world, " (the TCPStore host at ", options_.store_address,
                        ") is gone or not answering: ", status.message());
  };
  std::vector<std::string> parts;  // what is wrong, rank by rank
  std::map<int, SeenBeat> silent;   // rank -> its first beat seen
  for (int r = 0; r < world; ++r) {
    if (r == options_.rank) continue;
    bool joined = false;
    try {
      joined = reader_->check({HeartbeatKey(r)});
    } catch (const std::exception& e) {
      return store_gone(absl::UnavailableError(ExceptionText(e)));
    }
    if (!joined) {
      parts.push_back(absl::StrCat("rank ", r, " of ", world, " has not joined (no heartbeat)"));
      continue;
    }
    absl::StatusOr<SeenBeat> beat = ReadBeat(*reader_, r);
    if (absl::IsUnavailable(beat.status())) return store_gone(beat.status());
    if (!beat.ok()) return std::string(beat.status().message());
    silent[r] = *beat;
  }
  // A live rank beats at least once per interval; allow three.
  const absl::Time deadline = absl::Now() + 3 * options_.interval;
  while (!silent.empty() && absl::Now() < deadline) {
    if (WaitForStop(options_.interval / 4)) break;
    for (auto it = silent.begin(); it != silent.end();) {
      absl::StatusOr<SeenBeat> beat = ReadBeat(*reader_, it->first);
      if (absl::IsUnavailable(beat.status())) return store_gone(beat.status());
      if (beat.ok() && beat->count != it->second.count) {
        it = silent.erase(it);
      } else {
        ++it;
      }
    }
  }
  if (parts.empty() && silent.empty()) return "every other rank's heartbeat is fresh";
  const int64_t now = absl::ToUnixMicros(absl::Now());
  for (const auto& [r, beat] : silent) {
    parts.push_back(absl::StrFormat("rank %d of %d stopped responding (last heartbeat %.1f s ago)",
                                    r, world, (now - beat.unix_micros) / 1e6));
  }
  return absl::StrJoin(parts, "; ");
}

}  // namespace sophon
