// sophon-bench-load's run against a real server on port 0 (a small
// dataset): every sample exactly once, idle and hostile streams open until
// the end, the process sampler, the report; and the fairness index.
#include "tools/bench/load_run.h"

#include <unistd.h>

#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "server/storage_server.h"
#include "tests/test_util.h"
#include "tools/bench/load_report.h"
#include "tools/bench/proc_sampler.h"

namespace sophon {
namespace {

TEST(JainIndexTest, EqualSharesAreOneAndOneTakerIsOneOverN) {
  EXPECT_DOUBLE_EQ(JainIndex({5, 5, 5, 5}), 1.0);
  EXPECT_DOUBLE_EQ(JainIndex({8, 0, 0, 0}), 0.25);
  EXPECT_NEAR(JainIndex({1, 2}), 9.0 / 10.0, 1e-12);
  EXPECT_DOUBLE_EQ(JainIndex({}), 1.0);
}

TEST(ReceiptLedgerTest, CountsMissingDuplicatedAndOutOfRange) {
  ReceiptLedger ledger(3, 2);
  ledger.Record(0, 0);
  ledger.Record(0, 1);
  ledger.Record(0, 2);
  ledger.Record(1, 0);
  ledger.Record(1, 0);
  ledger.Record(1, 7);  // no such id
  ledger.Record(2, 0);  // no such epoch
  const ReceiptLedger::Check c = ledger.Verify();
  EXPECT_EQ(c.expected, 6u);
  EXPECT_EQ(c.exactly_once, 3u);
  EXPECT_EQ(c.missing, 2u);
  EXPECT_EQ(c.duplicated, 1u);
  EXPECT_EQ(c.out_of_range, 2u);
  EXPECT_FALSE(c.ok());
}

TEST(ProcSamplerTest, ReadsThisProcess) {
  const ProcSample s = ReadProcSample(getpid());
  EXPECT_TRUE(s.alive);
  EXPECT_GT(s.rss_bytes, 0);
  EXPECT_GE(s.threads, 1);
  EXPECT_FALSE(ReadProcSample(0).alive);  // no /proc/0
}

TEST(LoadOptionsTest, NamesTheBadField) {
  LoadOptions o;
  o.address = "127.0.0.1:1";
  EXPECT_TRUE(o.Validate().ok());
  o.idle_channels = 0;
  EXPECT_NE(o.Validate().message().find("LoadOptions.idle_channels"), std::string::npos);
  o = LoadOptions();
  o.address = "nowhere";
  EXPECT_NE(o.Validate().message().find("LoadOptions.address"), std::string::npos);
}

TEST(LoadRunTest, TrainersGetEverySampleOnceBesideIdleAndHostileStreams) {
  testing::TestDatasetOptions dopts;
  dopts.classes = 3;
  dopts.per_class = 5;
  StorageServerOptions sopts;
  sopts.data_dir = testing::MakeTestDataset("bench_load", dopts);
  sopts.host = "127.0.0.1";
  sopts.port = 0;
  sopts.service.prep_workers = 2;
  sopts.stats_interval = absl::ZeroDuration();
  absl::StatusOr<std::unique_ptr<StorageServer>> server = StorageServer::Start(sopts);
  ASSERT_TRUE(server.ok()) << server.status();

  LoadOptions o;
  o.address = (*server)->address();
  o.label = "test";
  o.server_pid = getpid();  // the server runs in this process
  o.trainers = 4;           // 15 samples: shards of 4, 4, 4 and 3
  o.epochs = 2;
  o.crop_size = 32;
  o.ids_per_request = 2;
  o.window = 3;  // smaller than a shard: the window must refill
  o.idle = 20;
  o.idle_channels = 3;
  o.idle_settle = absl::Milliseconds(100);
  o.hostile = 1;
  o.hostile_crop = 64;
  o.hostile_samples = 4;
  absl::StatusOr<LoadResult> r = RunLoad(o);
  ASSERT_TRUE(r.ok()) << r.status();

  EXPECT_EQ(r->num_samples, 15u);
  EXPECT_FALSE(r->timed_out);
  EXPECT_TRUE(r->exactly_once.ok())
      << r->exactly_once.missing << " missing, " << r->exactly_once.duplicated << " duplicated";
  EXPECT_EQ(r->exactly_once.expected, 30u);
  uint64_t samples = 0;
  for (const TrainerResult& t : r->trainers) {
    samples += t.samples;
    EXPECT_EQ(t.epochs_ok, 2);
    EXPECT_EQ(t.foreign, 0u);
    EXPECT_EQ(t.bad_payload, 0u);
    EXPECT_GT(t.seconds, 0);
  }
  EXPECT_EQ(samples, 30u);
  EXPECT_TRUE(r->sample_errors.empty());
  EXPECT_EQ(r->trainer_ends, (std::map<std::string, uint64_t>{{"OK", 8}}));
  EXPECT_EQ(r->idle_ends, (std::map<std::string, uint64_t>{{"open_at_end", 20}}));
  EXPECT_EQ(r->idle_messages, 0u);
  EXPECT_EQ(r->hostile_ends, (std::map<std::string, uint64_t>{{"open_at_end", 1}}));
  EXPECT_EQ(r->hostile_ids_written, 4u);
  EXPECT_TRUE(r->server_end.alive);
  EXPECT_GT(r->server.peak_rss_bytes, 0);
  EXPECT_GE(r->server.peak_threads, r->server_before.threads);
  EXPECT_FALSE(r->server.exited);
  EXPECT_TRUE(r->stats_ok);

  const std::string json = LoadJson(*r);
  EXPECT_EQ(json.front(), '{');
  EXPECT_EQ(json.back(), '\n');
  EXPECT_NE(json.find("\"exactly_once\": true"), std::string::npos) << json;
  EXPECT_NE(LoadSummary(*r).find("exactly once: yes"), std::string::npos);
  (*server)->Shutdown();
}

TEST(LoadRunTest, NoServerIsAnError) {
  LoadOptions o;
  o.address = "127.0.0.1:1";  // nothing listens on port 1
  o.idle = 0;
  o.connect_timeout = absl::Seconds(1);
  absl::StatusOr<LoadResult> r = RunLoad(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("127.0.0.1:1"), std::string::npos) << r.status();
}

}  // namespace
}  // namespace sophon
