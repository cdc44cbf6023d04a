// sophon-bench-load: many clients at once against one running sophon-server
// (tools/bench/load starts the servers and compares them). T trainers read
// disjoint shards of the manifest as fast as they can (every sample exactly
// once per epoch), I idle streams stay open and silent, H hostile clients
// request the largest samples and never read; the server's RSS, threads and
// CPU are sampled from /proc/<pid>; an attack (--attack, load_attacks.h) may
// run beside the trainers. Prints a summary, then one JSON line.
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "sophon/cli/cli.h"
#include "tools/bench/load_report.h"
#include "tools/bench/load_run.h"

ABSL_FLAG(std::string, server, "", "HOST:PORT of a running sophon-server. Required.");
ABSL_FLAG(absl::Duration, connect_timeout, absl::Seconds(30),
          "How long to retry reaching the server at the start. Default 30s.");
ABSL_FLAG(std::string, label, "server", "Name of this run in the report. Default server.");
ABSL_FLAG(int, server_pid, 0,
          "The server's process id, to sample its RSS, threads and CPU from /proc; 0 = none. "
          "Default 0.");
ABSL_FLAG(int, trainers, 16,
          "Trainer streams, each reading its shard of the manifest; 0 = none: the --attack "
          "alone, until it ends by itself (--attack-time or its count). Default 16.");
ABSL_FLAG(int, epochs, 1, "Epochs per trainer (one stream each). Default 1.");
ABSL_FLAG(std::string, stage, "cropped", "Stage the trainers request. Default cropped.");
ABSL_FLAG(int, crop_size, 224, "The trainers' crop size. Default 224.");
ABSL_FLAG(int, ids_per_request, 32, "Sample ids per request message. Default 32.");
ABSL_FLAG(int, window, 128,
          "Samples a trainer has requested and not yet received, at most (a loader's prefetch "
          "window); 0 = request the whole shard at once. Default 128.");
ABSL_FLAG(uint64_t, seed, 1, "Augmentation seed and shard order. Default 1.");
ABSL_FLAG(int, idle, 1000, "Idle streams (send nothing, open for the whole run). Default 1000.");
ABSL_FLAG(int, idle_channels, 10,
          "Connections the idle streams are spread over (a server may cap streams per "
          "connection). Default 10.");
ABSL_FLAG(absl::Duration, idle_settle, absl::Seconds(2),
          "Wait after opening the idle streams, before the others start. Default 2s.");
ABSL_FLAG(int, hostile, 0, "Hostile streams (largest crop, never read). Default 0.");
ABSL_FLAG(int, hostile_crop, 4096, "The hostile streams' crop size. Default 4096.");
ABSL_FLAG(std::string, hostile_stage, "tensor", "Stage the hostile streams request. Default tensor.");
ABSL_FLAG(int, hostile_samples, 1024, "Ids each hostile stream requests. Default 1024.");
ABSL_FLAG(std::string, attack, "none",
          "An attack beside the trainers, over raw HTTP/2: none, hog (streams asking for large "
          "samples, never reading), rotating (the hog, re-opened every --attack-rotate-every), "
          "halfsent (Fetch streams announcing a --attack-message-bytes request and sending all "
          "but its last byte), halfunary (the same on GetStats), unreadunary (GetStats calls "
          "whose answers are never read: a receive window of 0), slots (streams sending only "
          "headers), growfile (grows --attack-grow-file, then asks for it "
          "--attack-grow-requests times at the RAW stage, never reading), churn (streams opened "
          "and ended as fast as possible). Default none.");
ABSL_FLAG(absl::Duration, attack_time, absl::Seconds(60),
          "The attack ends by itself after this (or with the trainers, if sooner). Default 60s.");
ABSL_FLAG(absl::Duration, attack_lead, absl::Seconds(2),
          "Wait, at most, for the attack to open its streams before the trainers start. "
          "Default 2s.");
ABSL_FLAG(int, attack_sources, -1,
          "Loopback addresses the attack connects from, 127.0.0.2 on (so that the server sees "
          "another client than the trainers); 0 = 127.0.0.1, the trainers' address; -1 = the "
          "attack's default (16 for slots, else 1). Default -1.");
ABSL_FLAG(int, attack_streams, 0,
          "Streams (calls) of the attack; 0 = its default: hog and rotating 8, halfsent 2048, "
          "halfunary 1000, unreadunary 100000, slots 4096, growfile 1, churn 300000. Default 0.");
ABSL_FLAG(int, attack_connections, 0,
          "Connections the attack spreads its streams over; 0 = its default: halfsent and "
          "slots 16, halfunary 8, churn 4, else 1. Default 0.");
ABSL_FLAG(int64_t, attack_message_bytes, 2'000'000,
          "halfsent, halfunary: the announced request size. Default 2000000.");
ABSL_FLAG(std::string, attack_stage, "tensor", "hog, rotating: the stage asked for. Default tensor.");
ABSL_FLAG(int, attack_crop, 1024, "hog, rotating: the crop size asked for. Default 1024.");
ABSL_FLAG(int, attack_samples, 1024, "hog, rotating: ids each stream asks for. Default 1024.");
ABSL_FLAG(absl::Duration, attack_rotate_every, absl::Seconds(20),
          "rotating: how often it re-opens its streams on a new connection. Default 20s.");
ABSL_FLAG(int64_t, attack_window, -1,
          "The attack's HTTP/2 stream receive window (never granted again); -1 = its default "
          "(0 for unreadunary, else 65535). Default -1.");
ABSL_FLAG(std::string, attack_grow_file, "",
          "growfile: a sample file of the server's dataset (absolute path); it is grown, so "
          "give a copy. Default none.");
ABSL_FLAG(int64_t, attack_grow_to_bytes, int64_t{60} << 20,
          "growfile: the file's size after growing. Default 62914560 (60 MiB).");
ABSL_FLAG(int, attack_grow_requests, 40,
          "growfile: how many times the stream asks for the file. Default 40.");
ABSL_FLAG(int, attack_churn_inflight, 64,
          "churn: streams one connection has open at once, at most. Default 64.");
ABSL_FLAG(absl::Duration, max_time, absl::Seconds(300),
          "Time limit of the trainers; then they are cancelled and the run reported as timed "
          "out. Default 300s.");
ABSL_FLAG(absl::Duration, sample_interval, absl::Milliseconds(100),
          "Period of the /proc samples of the server. Default 100ms.");
ABSL_FLAG(int64_t, kill_server_above_rss_mib, 0,
          "SIGKILL the server (--server-pid) once its RSS passes this many MiB: a memory cap where "
          "no cgroup can be made; 0 = never. Default 0.");

namespace {

const sophon::FlagNames kFlagNames = {
    {"LoadOptions.address", "--server"},
    {"LoadOptions.server_pid", "--server-pid"},
    {"LoadOptions.connect_timeout", "--connect-timeout"},
    {"LoadOptions.trainers", "--trainers"},
    {"LoadOptions.epochs", "--epochs"},
    {"LoadOptions.stage", "--stage"},
    {"LoadOptions.crop_size", "--crop-size"},
    {"LoadOptions.ids_per_request", "--ids-per-request"},
    {"LoadOptions.window", "--window"},
    {"LoadOptions.idle_channels", "--idle-channels"},
    {"LoadOptions.idle_settle", "--idle-settle"},
    {"LoadOptions.idle", "--idle"},
    {"LoadOptions.hostile_crop", "--hostile-crop"},
    {"LoadOptions.hostile_stage", "--hostile-stage"},
    {"LoadOptions.hostile_samples", "--hostile-samples"},
    {"LoadOptions.hostile", "--hostile"},
    {"LoadOptions.max_time", "--max-time"},
    {"LoadOptions.attack_lead", "--attack-lead"},
    {"AttackOptions.kind", "--attack"},
    {"AttackOptions.time", "--attack-time"},
    {"AttackOptions.sources", "--attack-sources"},
    {"AttackOptions.streams", "--attack-streams"},
    {"AttackOptions.connections", "--attack-connections"},
    {"AttackOptions.message_bytes", "--attack-message-bytes"},
    {"AttackOptions.stage", "--attack-stage"},
    {"AttackOptions.crop_size", "--attack-crop"},
    {"AttackOptions.samples_per_stream", "--attack-samples"},
    {"AttackOptions.ids_per_request", "--ids-per-request"},
    {"AttackOptions.rotate_every", "--attack-rotate-every"},
    {"AttackOptions.receive_window", "--attack-window"},
    {"AttackOptions.grow_file", "--attack-grow-file"},
    {"AttackOptions.grow_to_bytes", "--attack-grow-to-bytes"},
    {"AttackOptions.grow_requests", "--attack-grow-requests"},
    {"AttackOptions.churn_inflight", "--attack-churn-inflight"},
    {"LoadOptions.sample_interval", "--sample-interval"},
    {"LoadOptions.kill_server_above_rss_bytes", "--kill-server-above-rss-mib"},
};

absl::StatusOr<sophon::Stage> ParseStage(const std::string& name, const char* field) {
  for (sophon::Stage s : sophon::AllStages()) {
    if (absl::AsciiStrToLower(name) == sophon::StageName(s)) return s;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(field, " must be raw, cropped, flipped or tensor (got '", name, "')"));
}

}  // namespace

int main(int argc, char** argv) {
  // accepts --server-pid and --server_pid
  sophon::ParseProgramFlags(
      argc, argv,
      "Load benchmark of a running sophon-server.\nUsage: sophon-bench-load --server=HOST:PORT "
      "[--server-pid=PID] [--trainers=16] [--idle=1000] [--hostile=0] [--attack=none]");

  sophon::LoadOptions o;
  o.address = absl::GetFlag(FLAGS_server);
  o.connect_timeout = absl::GetFlag(FLAGS_connect_timeout);
  o.label = absl::GetFlag(FLAGS_label);
  o.server_pid = absl::GetFlag(FLAGS_server_pid);
  o.trainers = absl::GetFlag(FLAGS_trainers);
  o.epochs = absl::GetFlag(FLAGS_epochs);
  o.crop_size = absl::GetFlag(FLAGS_crop_size);
  o.ids_per_request = absl::GetFlag(FLAGS_ids_per_request);
  o.window = absl::GetFlag(FLAGS_window);
  o.seed = absl::GetFlag(FLAGS_seed);
  o.idle = absl::GetFlag(FLAGS_idle);
  o.idle_channels = absl::GetFlag(FLAGS_idle_channels);
  o.idle_settle = absl::GetFlag(FLAGS_idle_settle);
  o.hostile = absl::GetFlag(FLAGS_hostile);
  o.hostile_crop = absl::GetFlag(FLAGS_hostile_crop);
  o.hostile_samples = absl::GetFlag(FLAGS_hostile_samples);
  o.max_time = absl::GetFlag(FLAGS_max_time);
  o.sample_interval = absl::GetFlag(FLAGS_sample_interval);
  o.kill_server_above_rss_bytes = absl::GetFlag(FLAGS_kill_server_above_rss_mib) << 20;
  absl::StatusOr<sophon::Stage> stage = ParseStage(absl::GetFlag(FLAGS_stage), "LoadOptions.stage");
  if (!stage.ok()) return sophon::FailProgram("sophon-bench-load", stage.status(), kFlagNames);
  o.stage = *stage;
  stage = ParseStage(absl::GetFlag(FLAGS_hostile_stage), "LoadOptions.hostile_stage");
  if (!stage.ok()) return sophon::FailProgram("sophon-bench-load", stage.status(), kFlagNames);
  o.hostile_stage = *stage;

  absl::StatusOr<sophon::AttackKind> attack = sophon::ParseAttackKind(absl::GetFlag(FLAGS_attack));
  if (!attack.ok()) return sophon::FailProgram("sophon-bench-load", attack.status(), kFlagNames);
  sophon::AttackOptions& a = o.attack;
  a.kind = *attack;
  a.time = absl::GetFlag(FLAGS_attack_time);
  a.sources = absl::GetFlag(FLAGS_attack_sources);
  a.streams = absl::GetFlag(FLAGS_attack_streams);
  a.connections = absl::GetFlag(FLAGS_attack_connections);
  a.message_bytes = absl::GetFlag(FLAGS_attack_message_bytes);
  a.crop_size = absl::GetFlag(FLAGS_attack_crop);
  a.samples_per_stream = absl::GetFlag(FLAGS_attack_samples);
  a.ids_per_request = o.ids_per_request;
  a.rotate_every = absl::GetFlag(FLAGS_attack_rotate_every);
  a.receive_window = absl::GetFlag(FLAGS_attack_window);
  a.grow_file = absl::GetFlag(FLAGS_attack_grow_file);
  a.grow_to_bytes = absl::GetFlag(FLAGS_attack_grow_to_bytes);
  a.grow_requests = absl::GetFlag(FLAGS_attack_grow_requests);
  a.churn_inflight = absl::GetFlag(FLAGS_attack_churn_inflight);
  o.attack_lead = absl::GetFlag(FLAGS_attack_lead);
  stage = ParseStage(absl::GetFlag(FLAGS_attack_stage), "AttackOptions.stage");
  if (!stage.ok()) return sophon::FailProgram("sophon-bench-load", stage.status(), kFlagNames);
  a.stage = *stage;

  absl::StatusOr<sophon::LoadResult> result = sophon::RunLoad(o);
  if (!result.ok()) return sophon::FailProgram("sophon-bench-load", result.status(), kFlagNames);
  std::fputs(sophon::LoadSummary(*result).c_str(), stdout);
  std::fputs(sophon::LoadJson(*result).c_str(), stdout);
  return 0;
}
