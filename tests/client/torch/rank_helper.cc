// A rank of a data-parallel group in a process of its own, for
// dead_rank_test (which kills it or stops it):
//   sophon-test-rank-helper RANK WORLD_SIZE PORT TIMEOUT_SECONDS STEPS
// Joins the group as RANK at 127.0.0.1:PORT, trains STEPS steps of tinymlp on
// noise batches, then waits until its standard input closes (the test holds
// the other end, so the helper also ends when the test does).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>

#include "client/train/trainer.h"
#include "tests/client/torch/noise_batch.h"
#include "tests/client/torch/ranks.h"

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: %s RANK WORLD_SIZE PORT TIMEOUT_SECONDS STEPS\n", argv[0]);
    return 2;
  }
  const int rank = std::atoi(argv[1]);
  const int world_size = std::atoi(argv[2]);
  const int port = std::atoi(argv[3]);
  const int timeout_seconds = std::atoi(argv[4]);
  const int steps = std::atoi(argv[5]);
  sophon::TrainerOptions options;
  options.arch = "tinymlp";
  options.num_classes = 4;
  options.threads = 1;
  options.distributed =
      sophon::testing::RankOptions(rank, world_size, port, absl::Seconds(timeout_seconds));
  auto trainer = sophon::Trainer::Create(options);
  if (!trainer.ok()) {
    std::fprintf(stderr, "rank helper %d: %s\n", rank, trainer.status().ToString().c_str());
    return 1;
  }
  for (int step = 0; step < steps; ++step) {
    sophon::Batch batch = sophon::testing::NoiseBatch(4, 32, 4, 100 + 10 * step + rank);
    batch.index = step;
    auto result = (*trainer)->Step(batch);
    if (!result.ok()) {
      std::fprintf(stderr, "rank helper %d: %s\n", rank, result.status().ToString().c_str());
      return 1;
    }
  }
  std::fprintf(stderr, "rank helper %d: %d steps done\n", rank, steps);
  char byte;
  while (read(STDIN_FILENO, &byte, 1) > 0) {
  }
  return 0;
}
