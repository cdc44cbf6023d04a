// The finished batches that loaders of one node with the same batches share:
// the jobs of a search that train on one dataset with one data seed (other
// models, other learning rates) get each batch fetched and prepared once.
//
// A folder per batch key (BatchShareKey: the dataset, the seed, the order,
// the rank's slice, the batch size, the target and every option that shapes
// a sample's bytes) in this user's folder under BatchShareOptions.dir
// (`sophon-<uid>`, owner-only: another user can neither read a batch nor
// plant one), best on tmpfs (/dev/shm): memory the processes share, released
// by the last one to leave.
// Batch `seq` (its epoch and first position, BatchSeq) is a file written by
// rename, so a reader sees all of it or none. Whoever needs a batch first
// claims it (an exclusive flock on its claim file; the kernel drops it when
// the holder exits, SIGKILL included), makes it as a lone job would, and
// publishes it; the others wait for it and read it. A job never waits for a
// slower one: batches older than the window (window_bytes behind the newest
// published) are removed, and a job that finds its batch gone makes it
// itself, and one waits for another's claim at most max_wait (then makes the
// batch itself, unshared): a job stopped or stuck holds no other back for
// longer. A claim whose holder died or stopped is taken over at once.
#ifndef SOPHON_CLIENT_LOADER_BATCH_SHARE_H_
#define SOPHON_CLIENT_LOADER_BATCH_SHARE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace sophon {

struct BatchShareOptions {
  std::string dir;  // the folder of every key's folder; "" = no sharing
  // How far behind the newest published batch a batch is kept, in bytes of
  // batches (at least two batches are kept). Bounds the node's memory on tmpfs.
  int64_t window_bytes = int64_t{256} << 20;
  // The longest a job waits for a batch another job has claimed.
  absl::Duration max_wait = absl::Seconds(10);

  bool enabled() const { return !dir.empty(); }
  absl::Status Validate() const;  // names the field
};

struct BatchShareStats {
  uint64_t read = 0;       // batches read from another job
  uint64_t claimed = 0;    // batches this job made (published or not)
  uint64_t published = 0;
  uint64_t taken_over = 0; // claims found free after another job had held them
  uint64_t waited_out = 0; // batches made here unshared after max_wait
  double wait_seconds = 0; // waiting for batches other jobs were making
};

class BatchShare {
 public:
  // An exclusive flock on a batch's claim file: this job makes the batch.
  // Released when it goes.
  class Claim {
   public:
    Claim() = default;
    explicit Claim(int fd) : fd_(fd) {}
    Claim(Claim&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
    Claim& operator=(Claim&& other) noexcept;
    Claim(const Claim&) = delete;
    Claim& operator=(const Claim&) = delete;
    ~Claim() { Release(); }
    bool held() const { return fd_ >= 0; }
    void Release();

   private:
    int fd_ = -1;
  };

  // The folder of `key` in this user's folder under options.dir (both made
  // owner-only; a folder another user owns or could open is refused). Errors
  // name the folder.
  static absl::StatusOr<std::unique_ptr<BatchShare>> Open(const BatchShareOptions& options,
                                                          uint64_t key);
  ~BatchShare();  // the last process of the folder removes it

  BatchShare(const BatchShare&) = delete;
  BatchShare& operator=(const BatchShare&) = delete;

  enum class Outcome {
    kRead,     // another job's batch is in `parts`
    kClaimed,  // *claim holds it: make it and Publish
    kStopped,  // `stopped` returned true while waiting
  };
  // Batch `seq`: read into `parts` (their sizes together must be the file's)
  // when another job has published it; otherwise claimed for this job, after
  // waiting while another job holds the claim (`stopped` asked every few
  // milliseconds meanwhile; at most max_wait: then kClaimed with no claim
  // held, the batch made here and not shared). A file that does not match
  // (another size, another key) is removed and the batch claimed.
  // Thread-safe.
  Outcome Take(uint64_t seq, absl::Span<const absl::Span<char>> parts, Claim* claim,
               const std::function<bool()>& stopped);
  // Writes batch `seq` (the parts in order) for the other jobs and releases
  // the claim; skipped for a batch already behind the window. Errors name
  // the file; a failed write leaves nothing behind and sharing goes on.
  absl::Status Publish(uint64_t seq, absl::Span<const absl::Span<const char>> parts,
                       Claim claim);

  const std::string& folder() const { return folder_; }
  BatchShareStats stats() const;

 private:
  BatchShare(const BatchShareOptions& options, std::string folder, uint64_t key, int in_use)
      : options_(options), folder_(std::move(folder)), key_(key), in_use_(in_use) {}
  std::string PathOf(uint64_t seq, const char* suffix) const;
  // 1: read; 0: no file; -1: a file that does not match (removed).
  int TryRead(uint64_t seq, absl::Span<const absl::Span<char>> parts) const;
  // Keeps the newest batches whose files add up to window_bytes (two at
  // least) and removes the files of every older seq; the oldest seq kept.
  uint64_t Sweep();

  const BatchShareOptions options_;
  const std::string folder_;
  const uint64_t key_;
  const int in_use_;  // a shared flock held while open
  mutable absl::Mutex mu_;
  // Batches before it are gone (as this process last swept): not published.
  uint64_t window_start_ ABSL_GUARDED_BY(mu_) = 0;
  BatchShareStats stats_ ABSL_GUARDED_BY(mu_);
};

// The seq of the batch whose first position in `epoch`'s padded global order
// is `position`, the epoch `epoch_positions` long: later batches have larger
// seqs.
inline uint64_t BatchSeq(uint64_t epoch, uint64_t epoch_positions, uint64_t position) {
  return epoch * epoch_positions + position;
}

// A stable 64-bit digest (FNV-1a) of `text`: the key of a batch folder.
uint64_t StableDigest(std::string_view text);

}  // namespace sophon

#endif  // SOPHON_CLIENT_LOADER_BATCH_SHARE_H_
