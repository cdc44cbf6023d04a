// sophon-bench-load's run against a real server on port 0 (a small
// dataset): every sample exactly once, idle and hostile streams open until
// the end, the process sampler, the report; and the fairness index. The
// attacks and their raw HTTP/2 client against the same kind of server.
#include "tools/bench/load_run.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "server/storage_server.h"
#include "tests/test_util.h"
#include "client/loader/sample_client.h"
#include "server/service_impl.h"
#include "tools/bench/h2_raw.h"
#include "tools/bench/load_attacks.h"
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
  o = LoadOptions();
  o.address = "127.0.0.1:1";
  o.trainers = 0;  // no trainers and no attack: nothing to run
  EXPECT_NE(o.Validate().message().find("LoadOptions.trainers"), std::string::npos);
  o.attack.kind = AttackKind::kHalfSent;
  o.attack.port = 1;  // RunLoad takes it from the address
  EXPECT_TRUE(o.Validate().ok()) << o.Validate();
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

// A server on port 0 over a small dataset (15 samples).
std::unique_ptr<StorageServer> StartTestServer(const std::string& name,
                                               std::string* data_dir = nullptr) {
  testing::TestDatasetOptions dopts;
  dopts.classes = 3;
  dopts.per_class = 5;
  StorageServerOptions sopts;
  sopts.data_dir = testing::MakeTestDataset(name, dopts);
  if (data_dir != nullptr) *data_dir = sopts.data_dir;
  sopts.host = "127.0.0.1";
  sopts.port = 0;
  sopts.service.prep_workers = 2;
  sopts.stats_interval = absl::ZeroDuration();
  absl::StatusOr<std::unique_ptr<StorageServer>> server = StorageServer::Start(sopts);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

v1::ServerStats Stats(StorageServer& server) {
  v1::ServerStats stats;
  EXPECT_TRUE(server.service()->GetStats({}, &stats).ok());
  return stats;
}

// Polls the server's stats until `done` holds (nothing to wait on: the
// server's state changes on gRPC's threads); false after 10 s.
bool WaitForStats(StorageServer& server, const std::function<bool(const v1::ServerStats&)>& done) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline) {
    if (done(Stats(server))) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return false;
}

// Pumps `c` until `done` holds or 10 s pass.
bool PumpUntil(H2RawConnection& c, const std::function<bool()>& done) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!done() && absl::Now() < deadline && !c.closed()) (void)c.Pump(absl::Milliseconds(10));
  return done();
}

TEST(AttackOptionsTest, NamesAndBadFields) {
  for (const char* name : {"none", "hog", "rotating", "halfsent", "halfunary", "unreadunary",
                           "slots", "growfile", "churn"}) {
    absl::StatusOr<AttackKind> kind = ParseAttackKind(name);
    ASSERT_TRUE(kind.ok()) << name;
    EXPECT_EQ(AttackName(*kind), name);
  }
  EXPECT_NE(ParseAttackKind("flood").status().message().find("AttackOptions.kind"),
            std::string::npos);
  AttackOptions o;
  o.kind = AttackKind::kGrowFile;
  o.port = 1;
  EXPECT_NE(o.Validate().message().find("AttackOptions.grow_file"), std::string::npos);
  o.kind = AttackKind::kHalfSent;
  o.message_bytes = 1;
  EXPECT_NE(o.Validate().message().find("AttackOptions.message_bytes"), std::string::npos);
}

TEST(H2RawTest, AHalfSentMessageIsIncompleteUntilItsLastByte) {
  std::unique_ptr<StorageServer> server = StartTestServer("h2_half");
  ASSERT_NE(server, nullptr);
  H2RawOptions ho;
  ho.port = server->port();
  ho.source_address = "127.0.0.2";
  absl::StatusOr<std::unique_ptr<H2RawConnection>> c = H2RawConnection::Connect(ho);
  ASSERT_TRUE(c.ok()) << c.status();
  H2RawConnection& conn = **c;
  // 1000 zero bytes: not a FetchRequest (field number 0), which the server
  // can only tell once it has all of them.
  const std::string message = H2RawConnection::GrpcPrefix(1000) + std::string(1000, '\0');
  ASSERT_TRUE(PumpUntil(conn, [&] { return conn.got_peer_settings(); }));
  const uint32_t id = conn.StartCall("/sophon.v1.SampleService/Fetch", false);
  size_t sent = 0;
  ASSERT_TRUE(PumpUntil(conn, [&] {
    sent += conn.SendData(id, absl::string_view(message).substr(sent, message.size() - 1 - sent),
                          false);
    return sent == message.size() - 1 && conn.queued_bytes() == 0;
  }));
  ASSERT_TRUE(WaitForStats(*server, [](const v1::ServerStats& s) {
    return s.active_streams() == 1;
  }));
  EXPECT_EQ(Stats(*server).requests_rejected(), 0u);
  EXPECT_TRUE(conn.IsOpen(id));
  // The last byte completes it: the server refuses the message and ends the stream.
  EXPECT_EQ(conn.SendData(id, absl::string_view(message).substr(sent), false), 1u);
  ASSERT_TRUE(PumpUntil(conn, [&] { return !conn.IsOpen(id); }));
  EXPECT_EQ(conn.counters().streams_ended_by_peer + conn.counters().streams_reset_by_peer, 1u);
  EXPECT_TRUE(WaitForStats(*server, [](const v1::ServerStats& s) {
    return s.requests_rejected() == 1 && s.active_streams() == 0;
  }));
  server->Shutdown();
}

TEST(AttackTest, SlotsOpensItsStreamsFromAnotherAddress) {
  std::unique_ptr<StorageServer> server = StartTestServer("attack_slots");
  ASSERT_NE(server, nullptr);
  ServerManifest manifest;
  AttackOptions o;
  o.kind = AttackKind::kSlots;
  o.port = server->port();
  o.streams = 12;
  o.connections = 3;
  o.sources = 2;
  o.time = absl::Seconds(30);
  Attack attack(o, &manifest);
  attack.Start();
  ASSERT_TRUE(attack.WaitStarted(absl::Seconds(10)));
  EXPECT_TRUE(WaitForStats(*server, [](const v1::ServerStats& s) {
    return s.active_streams() == 12;
  }));
  attack.Stop();
  const AttackResult r = attack.result();
  EXPECT_EQ(r.name, "slots");
  EXPECT_EQ(r.connections, 3);
  EXPECT_EQ(r.streams_started, 12u);
  EXPECT_EQ(r.streams_open_at_end, 12u);
  EXPECT_EQ(r.figures.at("streams_held_after_1s"), 12);
  EXPECT_EQ(r.sources, (std::vector<std::string>{"127.0.0.2", "127.0.0.3"}));
  // Its connections closed: the server lets the streams go.
  EXPECT_TRUE(WaitForStats(*server, [](const v1::ServerStats& s) {
    return s.active_streams() == 0;
  }));
  server->Shutdown();
}

TEST(AttackTest, HalfSentHoldsEveryMessageOneByteShort) {
  std::unique_ptr<StorageServer> server = StartTestServer("attack_halfsent");
  ASSERT_NE(server, nullptr);
  ServerManifest manifest;
  AttackOptions o;
  o.kind = AttackKind::kHalfSent;
  o.port = server->port();
  o.streams = 4;
  o.connections = 2;
  o.message_bytes = 100'000;  // more than the initial 64 KiB window
  // It sends what the server's windows let it, then holds until its time is
  // up: no Stop() racing the sending on a loaded machine.
  o.time = absl::Seconds(3);
  Attack attack(o, &manifest);
  attack.Start();
  ASSERT_TRUE(attack.WaitStarted(absl::Seconds(10)));
  EXPECT_TRUE(WaitForStats(*server, [](const v1::ServerStats& s) {
    return s.active_streams() == 4;
  }));
  attack.Join();
  const AttackResult r = attack.result();
  EXPECT_EQ(r.streams_started, 4u);
  EXPECT_EQ(r.streams_reset_by_server + r.streams_ended_by_server, 0u);
  EXPECT_LE(r.request_bytes_sent, 4u * (5 + 99'999));
  // Four streams are well within the read slots an address gets: each has a
  // read pending, so the server opens its window to the announced message
  // and every byte but the last arrives.
  EXPECT_EQ(r.figures.at("streams_with_all_but_last_byte"), 4) << r.request_bytes_sent;
  EXPECT_EQ(r.request_bytes_sent, 4u * (5 + 99'999));
  EXPECT_EQ(Stats(*server).requests_rejected(), 0u);  // no message was ever whole
  server->Shutdown();
}

TEST(AttackTest, ChurnOpensAndEndsItsStreams) {
  std::unique_ptr<StorageServer> server = StartTestServer("attack_churn");
  ASSERT_NE(server, nullptr);
  ServerManifest manifest;
  AttackOptions o;
  o.kind = AttackKind::kChurn;
  o.port = server->port();
  o.streams = 300;
  o.connections = 2;
  o.churn_inflight = 16;
  o.time = absl::Seconds(30);
  Attack attack(o, &manifest);
  attack.Start();
  attack.Join();  // it ends by itself once its 300 streams are done
  const AttackResult r = attack.result();
  EXPECT_EQ(r.streams_started, 300u);
  EXPECT_EQ(r.streams_ended_by_server, 300u);
  EXPECT_EQ(r.streams_open_at_end, 0u);
  EXPECT_EQ(Stats(*server).streams_opened(), 300u);
  server->Shutdown();
}

TEST(AttackTest, UnreadUnaryCallsAreAnsweredButNeverTaken) {
  std::unique_ptr<StorageServer> server = StartTestServer("attack_unread");
  ASSERT_NE(server, nullptr);
  ServerManifest manifest;
  AttackOptions o;
  o.kind = AttackKind::kUnreadUnary;
  o.port = server->port();
  o.streams = 50;
  o.time = absl::Seconds(2);  // it holds until then
  Attack attack(o, &manifest);
  attack.Start();
  attack.Join();
  const AttackResult r = attack.result();
  EXPECT_EQ(r.streams_started, 50u);
  EXPECT_EQ(r.figures.at("calls_sent"), 50);
  EXPECT_EQ(r.response_bytes_received, 0u);  // a window of 0: no message came
  server->Shutdown();
}

TEST(AttackTest, GrowFileGrowsTheSampleAndAsksForIt) {
  std::string data_dir;
  std::unique_ptr<StorageServer> server = StartTestServer("attack_growfile", &data_dir);
  ASSERT_NE(server, nullptr);
  ClientOptions copts;
  copts.address = server->address();
  absl::StatusOr<std::unique_ptr<SampleClient>> client = SampleClient::Connect(copts);
  ASSERT_TRUE(client.ok()) << client.status();
  const ServerManifest& manifest = (*client)->manifest();
  const std::string path = data_dir + "/" + server->source().entry(3).relative_path;
  AttackOptions o;
  o.kind = AttackKind::kGrowFile;
  o.port = server->port();
  o.grow_file = path;
  o.grow_to_bytes = 1 << 20;
  o.grow_requests = 3;
  o.time = absl::Seconds(30);
  Attack attack(o, &manifest);
  attack.Start();
  ASSERT_TRUE(attack.WaitStarted(absl::Seconds(10)));
  attack.Stop();
  const AttackResult r = attack.result();
  EXPECT_TRUE(r.first_error.empty()) << r.first_error;
  EXPECT_EQ(r.figures.at("manifest_file_bytes"), manifest.raw_sizes[3]);
  EXPECT_EQ(r.figures.at("file_bytes_after"), 1 << 20);
  EXPECT_EQ(std::filesystem::file_size(path), 1u << 20);
  EXPECT_EQ(r.streams_started, 1u);
  EXPECT_LE(r.response_bytes_received, 65535u);  // it never granted more
  server->Shutdown();
}

TEST(LoadRunTest, TrainersRunBesideAHog) {
  std::unique_ptr<StorageServer> server = StartTestServer("bench_load_hog");
  ASSERT_NE(server, nullptr);
  LoadOptions o;
  o.address = server->address();
  o.server_pid = getpid();
  o.trainers = 2;
  o.crop_size = 32;
  o.idle = 0;
  o.idle_settle = absl::ZeroDuration();
  o.attack.kind = AttackKind::kHog;
  o.attack.streams = 2;
  o.attack.crop_size = 64;
  o.attack.samples_per_stream = 8;
  o.attack.time = absl::Seconds(30);
  absl::StatusOr<LoadResult> r = RunLoad(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->exactly_once.ok());
  ASSERT_TRUE(r->attack_ran);
  EXPECT_EQ(r->attack.name, "hog");
  EXPECT_EQ(r->attack.streams_started, 2u);
  EXPECT_EQ(r->attack.sources, std::vector<std::string>{"127.0.0.2"});
  EXPECT_GT(r->attack.figures.at("sample_bytes_asked"), 0);
  const std::string json = LoadJson(*r);
  EXPECT_NE(json.find("\"attack\": \"hog\""), std::string::npos) << json;
  EXPECT_NE(LoadSummary(*r).find("attack hog"), std::string::npos);
  server->Shutdown();
}

TEST(LoadRunTest, NoTrainersRunsTheAttackAloneUntilItsTime) {
  std::unique_ptr<StorageServer> server = StartTestServer("bench_load_attack_only");
  ASSERT_NE(server, nullptr);
  LoadOptions o;
  o.address = server->address();
  o.trainers = 0;
  o.idle = 0;
  o.idle_settle = absl::ZeroDuration();
  o.attack.kind = AttackKind::kUnreadUnary;
  o.attack.streams = 20;
  o.attack.time = absl::Seconds(2);  // it holds its calls until then
  o.max_time = absl::Milliseconds(100);  // the trainers' limit: not the attack's
  absl::StatusOr<LoadResult> r = RunLoad(o);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->attack_ran);
  EXPECT_EQ(r->attack.streams_started, 20u);
  EXPECT_GE(r->attack.seconds, 1.9);  // joined, not stopped with the (absent) trainers
  EXPECT_TRUE(r->trainers.empty());
  EXPECT_TRUE(r->stats_ok);
  EXPECT_NE(LoadJson(*r).find("\"attack\": \"unreadunary\""), std::string::npos);
  server->Shutdown();
}

}  // namespace
}  // namespace sophon
