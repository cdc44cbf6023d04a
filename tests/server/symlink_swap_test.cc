// A class folder swapped for a link to a folder outside the dataset, and back,
// in a tight loop while a real server (gRPC on 127.0.0.1, port 0) serves its
// files: under follow_symlinks=inside no answer ever carries an outside
// file's bytes, whatever moment of the check the swap lands in.
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <map>
#include <string>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "client/loader/sample_client.h"
#include "gtest/gtest.h"
#include "server/storage_server.h"
#include "sophon/net/wire.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

constexpr int kFiles = 8;

TEST(SymlinkSwapTest, AFolderSwappedForALinkOutsideInALoopNeverServesTheOutsideFiles) {
  const std::string base = testing::MakeTempDir("symlink_swap");
  const std::string root = base + "/data";
  const std::string outside = base + "/outside";
  std::map<std::string, std::string> inside_bytes;
  for (int i = 0; i < kFiles; ++i) {
    const std::string name = "f" + std::to_string(i) + ".jpg";
    inside_bytes["c/" + name] = "INSIDE " + name;
    testing::WriteFile(root + "/c/" + name, inside_bytes["c/" + name]);
    // The same size as the inside file: a size check alone does not refuse it.
    testing::WriteFile(outside + "/" + name, "SECRET " + name);
  }
  StorageServerOptions options;
  options.data_dir = root;
  options.port = 0;
  options.service.prep_workers = 2;
  options.stats_interval = absl::ZeroDuration();
  absl::StatusOr<std::unique_ptr<StorageServer>> server = StorageServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  ClientOptions copts;
  copts.address = (*server)->address();
  absl::StatusOr<std::unique_ptr<SampleClient>> client = SampleClient::Connect(copts);
  ASSERT_TRUE(client.ok()) << client.status();
  const SampleSource& source = (*server)->source();
  ASSERT_EQ(source.size(), static_cast<uint64_t>(kFiles));

  // c is the real folder, then a link to the outside one, then the real
  // folder again, each swap one atomic exchange (renameat2), as fast as the
  // file system allows.
  ASSERT_EQ(::symlink(outside.c_str(), (root + "/c.link").c_str()), 0);
  std::atomic<bool> stop{false};
  std::atomic<int64_t> swaps{0};
  std::thread swapper([&] {
    const std::string c = root + "/c", other = root + "/c.link";
    while (!stop.load()) {
      if (::renameat2(AT_FDCWD, c.c_str(), AT_FDCWD, other.c_str(), RENAME_EXCHANGE) != 0) break;
      swaps.fetch_add(1);
    }
  });

  absl::Cleanup join = [&] {
    stop = true;
    swapper.join();
  };
  int64_t served = 0, refused = 0, leaked = 0;
  std::string first_leak;
  const absl::Time end = absl::Now() + absl::Seconds(3);
  while (absl::Now() < end) {
    std::unique_ptr<FetchCall> call = (*client)->OpenFetch();
    AugmentOptions augment;
    augment.crop_size = 32;
    FetchRequestBuilder builder(1, 1, augment);
    for (int round = 0; round < 16; ++round) {
      for (uint64_t id = 0; id < source.size(); ++id) builder.Add(id, Stage::kRaw);
    }
    const v1::FetchRequest request = builder.Take();
    ASSERT_TRUE(call->Write(request));
    ASSERT_TRUE(call->WritesDone());
    v1::FetchResponse response;
    while (call->Read(&response)) {
      for (const v1::Sample& s : response.samples()) {
        if (s.error_code() != 0) {
          ++refused;
          continue;
        }
        ++served;
        const std::string& path = source.entry(s.id()).relative_path;
        if (s.payload() != inside_bytes[path]) {
          if (leaked++ == 0) first_leak = path + ": '" + s.payload() + "'";
        }
      }
    }
    const absl::Status finish = call->Finish();
    ASSERT_TRUE(finish.ok()) << finish;
  }
  std::move(join).Invoke();
  EXPECT_GT(swaps.load(), 1000) << "the folder was hardly swapped";
  EXPECT_GT(served, 0);
  EXPECT_EQ(leaked, 0) << leaked << " of " << served << " answers carried another file's bytes, "
                       << "the first " << first_leak << " (" << refused << " refused, "
                       << swaps.load() << " swaps)";
}

}  // namespace
}  // namespace sophon
