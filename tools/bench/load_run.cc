#include "tools/bench/load_run.h"

#include <algorithm>
#include <deque>
#include <memory>
#include <random>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/loader/sample_client.h"
#include "grpcpp/grpcpp.h"
#include "sophon/base/cpu_time.h"
#include "sophon/net/credentials.h"
#include "sophon/net/grpc_util.h"

namespace sophon {

absl::Status LoadOptions::Validate() const {
  auto bad = [](absl::string_view field, absl::string_view need, auto got) {
    return absl::InvalidArgumentError(
        absl::StrCat("LoadOptions.", field, " must be ", need, " (got ", got, ")"));
  };
  if (address.empty() || address.find(':') == std::string::npos) {
    return bad("address", "HOST:PORT", absl::StrCat("'", address, "'"));
  }
  if (connect_timeout <= absl::ZeroDuration()) {
    return bad("connect_timeout", "> 0", absl::FormatDuration(connect_timeout));
  }
  if (trainers < 0) return bad("trainers", ">= 0", trainers);
  if (trainers == 0 && attack.kind == AttackKind::kNone) {
    return absl::InvalidArgumentError(
        "LoadOptions.trainers may be 0 only with an attack (AttackOptions.kind)");
  }
  if (epochs < 1) return bad("epochs", ">= 1", epochs);
  if (crop_size < 1) return bad("crop_size", ">= 1", crop_size);
  if (ids_per_request < 1) return bad("ids_per_request", ">= 1", ids_per_request);
  if (window < 0) return bad("window", ">= 0", window);
  if (idle < 0) return bad("idle", ">= 0", idle);
  if (idle_channels < 1) return bad("idle_channels", ">= 1", idle_channels);
  if (idle_settle < absl::ZeroDuration()) {
    return bad("idle_settle", ">= 0", absl::FormatDuration(idle_settle));
  }
  if (hostile < 0) return bad("hostile", ">= 0", hostile);
  if (hostile_crop < 1) return bad("hostile_crop", ">= 1", hostile_crop);
  if (hostile_samples < 1) return bad("hostile_samples", ">= 1", hostile_samples);
  if (max_time <= absl::ZeroDuration())
    return bad("max_time", "> 0", absl::FormatDuration(max_time));
  if (sample_interval <= absl::ZeroDuration()) {
    return bad("sample_interval", "> 0", absl::FormatDuration(sample_interval));
  }
  if (attack_lead < absl::ZeroDuration()) {
    return bad("attack_lead", ">= 0", absl::FormatDuration(attack_lead));
  }
  if (absl::Status s = attack.Validate(); !s.ok()) return s;
  if (kill_server_above_rss_bytes < 0) {
    return bad("kill_server_above_rss_bytes", ">= 0", kill_server_above_rss_bytes);
  }
  if (kill_server_above_rss_bytes > 0 && server_pid <= 0) {
    return absl::InvalidArgumentError(
        "LoadOptions.kill_server_above_rss_bytes needs LoadOptions.server_pid");
  }
  return absl::OkStatus();
}

namespace {

// A channel of its own: a distinct argument and a local subchannel pool keep
// gRPC from sharing one connection (and its stream limit) between channels.
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address,
                                           const std::shared_ptr<grpc::ChannelCredentials>& creds,
                                           int index) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetInt("sophon.bench_load_channel", index);
  return grpc::CreateCustomChannel(address, creds, args);
}

struct Connection {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::SampleService::Stub> stub;
};

void Count(std::map<std::string, uint64_t>* counts, const std::string& key) { ++(*counts)[key]; }

// Waits for every stream to end, cancelling those still open; their ends are
// counted in `ends` (and server-ended ones' times in `first`/`last`).
template <typename Stream>
void CloseAll(std::vector<std::unique_ptr<Stream>>& streams, std::map<std::string, uint64_t>* ends,
              double* first, double* last, std::vector<std::string>* messages) {
  for (auto& s : streams) s->Cancel();
  for (auto& s : streams) {
    if (!s->WaitDone(absl::Seconds(30))) {
      Count(ends, "no_end_after_cancel");
      continue;
    }
    const StreamEnd end = s->end();
    Count(ends, StreamEndName(end));
    if (end.cancelled_by_client) continue;
    if (first != nullptr) *first = *first < 0 ? end.seconds : std::min(*first, end.seconds);
    if (last != nullptr) *last = std::max(*last, end.seconds);
    if (messages != nullptr && messages->size() < 4) {
      messages->push_back(absl::StrCat(StreamEndName(end), ": ", end.message));
    }
  }
}

}  // namespace

absl::StatusOr<LoadResult> RunLoad(const LoadOptions& options) {
  LoadOptions checked = options;
  if (options.attack.kind != AttackKind::kNone) {
    // The attack's target: the server's port (and its host, for IPv4).
    const size_t colon = options.address.rfind(':');
    if (colon != std::string::npos) {
      int port = 0;
      if (absl::SimpleAtoi(options.address.substr(colon + 1), &port)) checked.attack.port = port;
      const std::string host = options.address.substr(0, colon);
      checked.attack.host = host == "localhost" ? "127.0.0.1" : host;
    }
  }
  if (absl::Status s = checked.Validate(); !s.ok()) return s;
  LoadResult r;
  r.options = checked;

  ClientOptions copts;
  copts.address = options.address;
  copts.connect_timeout = options.connect_timeout;
  absl::StatusOr<std::unique_ptr<SampleClient>> client = SampleClient::Connect(copts);
  if (!client.ok()) return client.status();
  const ServerManifest& manifest = (*client)->manifest();
  r.dataset = manifest.dataset_name;
  r.num_samples = manifest.num_samples();
  r.server_prep_workers = manifest.prep_workers;
  if (r.num_samples == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("storage server ", options.address, " serves no samples"));
  }
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> creds =
      CreateChannelCredentials(CredentialsOptions{});
  if (!creds.ok()) return creds.status();

  const bool watch = options.server_pid > 0;
  auto sample_server = [&] { return watch ? ReadProcSample(options.server_pid) : ProcSample{}; };
  ProcSamplerOptions sopts;
  sopts.pid = options.server_pid;
  sopts.interval = options.sample_interval;
  sopts.kill_above_rss_bytes = options.kill_server_above_rss_bytes;
  ProcSampler sampler(sopts);
  r.server_before = sample_server();
  if (watch) sampler.Start();

  int channel_index = 0;
  auto connect = [&] {
    Connection c;
    c.channel = MakeChannel(options.address, *creds, channel_index++);
    c.stub = v1::SampleService::NewStub(c.channel);
    return c;
  };

  // 1. Idle streams, spread over idle_channels connections.
  std::vector<Connection> idle_conns;
  for (int i = 0; i < std::min(options.idle_channels, std::max(options.idle, 1)); ++i) {
    idle_conns.push_back(connect());
  }
  std::vector<std::unique_ptr<IdleStream>> idle;
  for (int i = 0; i < options.idle; ++i) {
    idle.push_back(std::make_unique<IdleStream>(idle_conns[i % idle_conns.size()].stub.get()));
    idle.back()->Start();
  }
  absl::SleepFor(options.idle_settle);
  r.server_idle = sample_server();

  // 2. Hostile streams, one connection each: the largest samples, never read.
  std::vector<Connection> hostile_conns;
  std::vector<std::unique_ptr<HostileStream>> hostile;
  for (int h = 0; h < options.hostile; ++h) {
    hostile_conns.push_back(connect());
    FetchParams p;
    p.seed = options.seed;
    p.augment.crop_size = options.hostile_crop;
    p.stage = options.hostile_stage;
    p.ids_per_request = options.ids_per_request;
    std::vector<uint64_t> ids(options.hostile_samples);
    for (int k = 0; k < options.hostile_samples; ++k) {
      ids[k] = (static_cast<uint64_t>(h) * options.hostile_samples + k) % r.num_samples;
    }
    hostile.push_back(
        std::make_unique<HostileStream>(hostile_conns.back().stub.get(), std::move(ids), p));
    hostile.back()->Start();
  }

  // 3. The attack, if any: its streams open before the trainers start.
  std::unique_ptr<Attack> attack;
  if (checked.attack.kind != AttackKind::kNone) {
    attack = std::make_unique<Attack>(checked.attack, &manifest);
    attack->Start();
    attack->WaitStarted(options.attack_lead);
  }

  // 4. Trainers, one connection each; trainer t owns the ids with
  // id % trainers == t, in an order shuffled per epoch.
  const int T = options.trainers;
  ReceiptLedger ledger(r.num_samples, options.epochs);
  std::vector<Connection> trainer_conns;
  std::vector<std::unique_ptr<TrainerCounters>> counters;
  std::vector<std::vector<std::unique_ptr<EpochStream>>> streams(T);
  for (int t = 0; t < T; ++t) {
    trainer_conns.push_back(connect());
    counters.push_back(std::make_unique<TrainerCounters>());
  }
  absl::Mutex mu;
  std::deque<int> finished;  // trainers whose current stream ended
  auto start_epoch = [&](int t, int epoch) {
    std::vector<uint64_t> ids;
    for (uint64_t id = static_cast<uint64_t>(t); id < r.num_samples; id += T) ids.push_back(id);
    std::mt19937_64 rng(options.seed * 1000003u + static_cast<uint64_t>(epoch) * 7919u + t);
    std::shuffle(ids.begin(), ids.end(), rng);
    FetchParams p;
    p.epoch = static_cast<uint64_t>(epoch);
    p.seed = options.seed;
    p.augment.crop_size = options.crop_size;
    p.stage = options.stage;
    p.ids_per_request = options.ids_per_request;
    p.window = options.window;
    streams[t].push_back(std::make_unique<EpochStream>(trainer_conns[t].stub.get(), std::move(ids),
                                                       p, counters[t].get(), &ledger,
                                                       [&mu, &finished, t] {
                                                         absl::MutexLock lock(&mu);
                                                         finished.push_back(t);
                                                       }));
    streams[t].back()->Start();
  };
  r.server_start = sample_server();
  const double client_cpu_start = ProcessCpuSeconds();
  const absl::Time t0 = absl::Now();
  const absl::Time deadline = t0 + options.max_time;
  r.trainers.resize(T);
  for (int t = 0; t < T; ++t) start_epoch(t, 0);

  // No trainers: the attack alone, until it ends by itself (its count or time).
  if (T == 0) attack->Join();
  int running = T;
  bool first_done = false;
  while (running > 0) {
    int t = -1;
    {
      absl::MutexLock lock(&mu);
      auto any = [&finished]() { return !finished.empty(); };
      const absl::Time until = r.timed_out ? absl::Now() + absl::Seconds(30) : deadline;
      if (!mu.AwaitWithDeadline(absl::Condition(&any), until)) {
        if (r.timed_out) break;  // cancelled streams that never ended
        r.timed_out = true;
        mu.Unlock();
        for (auto& ts : streams) ts.back()->Cancel();
        mu.Lock();
        continue;
      }
      t = finished.front();
      finished.pop_front();
    }
    TrainerResult& tr = r.trainers[t];
    const StreamEnd end = streams[t].back()->end();
    const int epoch = static_cast<int>(streams[t].size()) - 1;
    if (end.code == grpc::StatusCode::OK) ++tr.epochs_ok;
    if (end.code == grpc::StatusCode::OK && epoch + 1 < options.epochs && !r.timed_out) {
      start_epoch(t, epoch + 1);
      continue;
    }
    tr.seconds = absl::ToDoubleSeconds(absl::Now() - t0);
    --running;
    if (!first_done) {
      first_done = true;
      r.first_finish_seconds = tr.seconds;
      for (int u = 0; u < T; ++u)
        r.trainers[u].samples_at_first_finish = counters[u]->samples.load();
    }
  }
  r.server_end = sample_server();
  r.seconds = absl::ToDoubleSeconds(absl::Now() - t0);
  if (attack != nullptr) {
    attack->Stop();
    r.attack_ran = true;
    r.attack = attack->result();
  }
  r.client_cpu_seconds = ProcessCpuSeconds() - client_cpu_start;

  // The server's own account, if it still answers.
  if (trainer_conns.empty()) trainer_conns.push_back(connect());
  {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(3)));
    v1::ServerStats stats;
    if (trainer_conns[0].stub->GetStats(&context, {}, &stats).ok()) {
      r.stats_ok = true;
      r.stats_streams_opened = stats.streams_opened();
      r.stats_active_streams = stats.active_streams();
      r.stats_requests_rejected = stats.requests_rejected();
      for (const auto& [limit, n] : stats.rejections_by_limit()) {
        r.stats_rejections_by_limit[limit] = n;
      }
    }
  }

  // A server that died: give the streams a moment to see it, so that they
  // are not counted as open at the end.
  if (watch && sampler.Summary().exited) absl::SleepFor(absl::Seconds(1));
  CloseAll(hostile, &r.hostile_ends, nullptr, nullptr, &r.hostile_messages);
  for (const auto& h : hostile) r.hostile_ids_written += h->ids_written();
  CloseAll(idle, &r.idle_ends, &r.idle_first_end_s, &r.idle_last_end_s, nullptr);
  for (const auto& s : idle) r.idle_messages += s->messages();
  if (watch) sampler.Stop();
  r.server = sampler.Summary();
  for (const ProcSample* p : {&r.server_before, &r.server_idle, &r.server_start, &r.server_end}) {
    r.server.peak_rss_bytes = std::max(r.server.peak_rss_bytes, p->rss_bytes);
    r.server.peak_threads = std::max(r.server.peak_threads, p->threads);
  }

  for (int t = 0; t < T; ++t) {
    for (auto& s : streams[t]) {
      if (!s->WaitDone(absl::Seconds(30))) {
        Count(&r.trainer_ends, "no_end_after_cancel");
        continue;
      }
      const StreamEnd end = s->end();
      Count(&r.trainer_ends, StreamEndName(end));
      if (end.code != grpc::StatusCode::OK && r.first_trainer_error.empty()) {
        r.first_trainer_error = absl::StrCat(StreamEndName(end), ": ", end.message);
      }
      r.trainers[t].streams.push_back(end);
    }
    TrainerCounters& c = *counters[t];
    TrainerResult& tr = r.trainers[t];
    tr.samples = c.samples.load();
    tr.bytes = c.bytes.load();
    tr.errors = c.errors.load();
    tr.foreign = c.foreign.load();
    tr.bad_payload = c.bad_payload.load();
    absl::MutexLock lock(&c.mu);
    for (const auto& [code, n] : c.errors_by_code) {
      r.sample_errors[absl::StatusCodeToString(static_cast<absl::StatusCode>(code))] += n;
    }
  }
  r.exactly_once = ledger.Verify();
  return r;
}

}  // namespace sophon
