// A rank's sign of life for the other ranks of a process group, kept in the
// c10d store, so that a failed collective can name the rank that is gone.
// Gloo's own error ("Connection closed by peer [127.0.0.1]:5853", "Timed out
// waiting 3000ms for recv operation") names no rank.
//
// Each rank's RankHeartbeat owns a thread that writes the key
// "sophon/heartbeat/<rank>" = "<count> <unix time in microseconds>" every
// `interval`. After a failed collective, DescribeSilentRanks() watches the
// other ranks' keys for a few intervals: a rank whose count does not advance
// has stopped (killed, crashed, stopped, or its host is unreachable). The
// reported age compares the writer's clock with the reader's, so across hosts
// it is as good as their clock synchronisation.
//
// Only sophon_torch's files include this header: it pulls in LibTorch.
#ifndef SOPHON_CLIENT_TORCH_RANK_HEARTBEAT_H_
#define SOPHON_CLIENT_TORCH_RANK_HEARTBEAT_H_

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace sophon {

struct RankHeartbeatOptions {
  int rank = 0;
  int world_size = 1;
  absl::Duration interval = absl::Seconds(1);  // between two beats
  // Where the store lives, for messages: "127.0.0.1:29500". Rank 0 hosts it.
  std::string store_address;
};

class RankHeartbeat {
 public:
  // Writes the first beat (an error naming the rank and store if it cannot),
  // then starts the thread. `writer` is used by the thread only and `reader`
  // by DescribeSilentRanks only: two store clients of their own, so that a
  // read blocked on a stopped store host delays no beat, and the trainer's
  // own store connection is never shared. Their timeouts bound how long a
  // store operation can block (and so the destructor).
  static absl::StatusOr<std::unique_ptr<RankHeartbeat>> Start(
      c10::intrusive_ptr<c10d::Store> writer, c10::intrusive_ptr<c10d::Store> reader,
      const RankHeartbeatOptions& options);
  // Stops the thread and joins it.
  ~RankHeartbeat();
  RankHeartbeat(const RankHeartbeat&) = delete;
  RankHeartbeat& operator=(const RankHeartbeat&) = delete;

  // A sentence on the other ranks for the error of a failed collective:
  //   "rank 1 of 2 stopped responding (last heartbeat 3.1 s ago)" or
  //   "rank 2 of 3 has not joined (no heartbeat)" (several ranks joined with
  //   "; "),
  //   "rank 0 of 2 (the TCPStore host at 127.0.0.1:29500) is gone: <store error>"
  //   when the store cannot be read, or
  //   "every other rank's heartbeat is fresh" when all of them beat.
  // Watches the beats for up to three intervals and returns as soon as every
  // other rank has beaten. Call it from one thread at a time.
  std::string DescribeSilentRanks();

  // Beats written so far (tests).
  int64_t beats() const;

 private:
  RankHeartbeat(c10::intrusive_ptr<c10d::Store> writer, c10::intrusive_ptr<c10d::Store> reader,
                const RankHeartbeatOptions& options);
  // Writes the next beat; throws what the store throws.
  void Beat();
  void Run();
  // Waits `timeout` or until Stop; true once stopping.
  bool WaitForStop(absl::Duration timeout);

  // Constant after construction.
  const c10::intrusive_ptr<c10d::Store> writer_;
  const c10::intrusive_ptr<c10d::Store> reader_;
  const RankHeartbeatOptions options_;

  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int64_t beats_ ABSL_GUARDED_BY(mu_) = 0;

  std::thread thread_;  // started last, joined by the destructor
};

// The store key of a rank's heartbeat.
std::string HeartbeatKey(int rank);

}  // namespace sophon

#endif  // SOPHON_CLIENT_TORCH_RANK_HEARTBEAT_H_
