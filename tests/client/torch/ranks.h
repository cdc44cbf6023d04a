// Helpers for tests of data-parallel ranks: a free TCP port on loopback for
// rank 0's store, and ranks run as threads of the test process.
#ifndef SOPHON_TESTS_CLIENT_TORCH_RANKS_H_
#define SOPHON_TESTS_CLIENT_TORCH_RANKS_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <functional>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "client/train/trainer.h"

namespace sophon::testing {

// A port nobody listens on right now (bound to port 0, then closed).
inline int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof(address);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    if (fd >= 0) close(fd);
    return 0;
  }
  close(fd);
  return ntohs(address.sin_port);
}

// Rank `rank` of `world_size` on loopback at `port`.
inline DistributedOptions RankOptions(int rank, int world_size, int port,
                                      absl::Duration timeout = absl::Seconds(30)) {
  DistributedOptions options;
  options.world_size = world_size;
  options.rank = rank;
  options.master_addr = "127.0.0.1";
  options.master_port = port;
  options.collective_timeout = timeout;
  return options;
}

// Runs body(rank) for every rank, each in its own thread, and waits for all.
inline void OnRanks(int world_size, const std::function<void(int rank)>& body) {
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world_size; ++rank) threads.emplace_back(body, rank);
  for (std::thread& thread : threads) thread.join();
}

}  // namespace sophon::testing

#endif  // SOPHON_TESTS_CLIENT_TORCH_RANKS_H_
