// One run of the load benchmark against a running sophon-server: idle
// streams first, then hostile clients and trainers at once, while the
// server's RSS, threads and CPU are sampled from /proc (sophon-bench-load).
#ifndef SOPHON_TOOLS_BENCH_LOAD_RUN_H_
#define SOPHON_TOOLS_BENCH_LOAD_RUN_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "sophon/ops/stage.h"
#include "tools/bench/load_attacks.h"
#include "tools/bench/load_streams.h"
#include "tools/bench/proc_sampler.h"

namespace sophon {

struct LoadOptions {
  std::string address;                                 // HOST:PORT of the server
  absl::Duration connect_timeout = absl::Seconds(30);  // to reach it at the start
  std::string label;     // names the run in the report ("base", "main", ...)
  pid_t server_pid = 0;  // 0: no /proc sampling
  int trainers = 16;     // Fetch streams reading their shard as fast as they can; 0: the
                         // attack alone, until it ends by itself (needs one)
  int epochs = 1;        // per trainer; one stream per epoch
  Stage stage = Stage::kCropped;
  int crop_size = 224;
  int ids_per_request = 32;  // ids per request message
  int window = 128;          // a trainer's samples requested, not yet received; 0: all
  uint64_t seed = 1;
  int idle = 1000;         // streams that send nothing, open for the whole run
  int idle_channels = 10;  // connections the idle streams are spread over
  absl::Duration idle_settle = absl::Seconds(2);  // wait after opening them
  int hostile = 0;  // streams that request large samples and never read
  int hostile_crop = 4096;
  Stage hostile_stage = Stage::kTensor;
  int hostile_samples = 1024;                    // ids each hostile stream requests
  // An attack beside the trainers (its host and port are taken from
  // `address`); it starts before them and ends with them at the latest.
  AttackOptions attack;
  absl::Duration attack_lead = absl::Seconds(2);  // wait for its streams, at most
  absl::Duration max_time = absl::Seconds(300);  // the trainers' time limit
  absl::Duration sample_interval = absl::Milliseconds(100);
  int64_t kill_server_above_rss_bytes = 0;  // 0: never; else the sampler kills the server

  absl::Status Validate() const;  // names the field: "LoadOptions.trainers ..."
};

struct TrainerResult {
  uint64_t samples = 0;  // OK and checked
  uint64_t bytes = 0;
  uint64_t errors = 0;
  uint64_t foreign = 0;
  uint64_t bad_payload = 0;
  uint64_t samples_at_first_finish = 0;  // when the first trainer finished
  double seconds = 0;                    // run start to the end of its last stream
  int epochs_ok = 0;                     // epochs whose stream ended OK
  std::vector<StreamEnd> streams;        // one per epoch started
};

struct LoadResult {
  LoadOptions options;
  std::string dataset;
  uint64_t num_samples = 0;
  uint32_t server_prep_workers = 0;
  std::vector<TrainerResult> trainers;
  double seconds = 0;  // trainers' start to the last trainer's end
  double first_finish_seconds = 0;
  double client_cpu_seconds = 0;  // this process, over `seconds` (it shares the machine)
  bool timed_out = false;         // max_time passed; trainers were cancelled
  ReceiptLedger::Check exactly_once;
  std::map<std::string, uint64_t> sample_errors;  // by code name
  std::map<std::string, uint64_t> trainer_ends;   // epoch streams by end
  std::map<std::string, uint64_t> idle_ends;      // by end name (StreamEndName)
  double idle_first_end_s = -1;                   // server-ended idle streams: earliest
  double idle_last_end_s = -1;                    // and latest end, seconds after opening
  uint64_t idle_messages = 0;                     // responses sent to idle streams (0)
  std::map<std::string, uint64_t> hostile_ends;
  std::vector<std::string> hostile_messages;  // status messages of server-ended ones
  uint64_t hostile_ids_written = 0;
  std::string first_trainer_error;  // a message, for the summary
  bool attack_ran = false;
  AttackResult attack;
  // Server process: before anything, with the idle streams open, at the
  // trainers' start and end, and over the whole run.
  ProcSample server_before, server_idle, server_start, server_end;
  ProcSummary server;
  // GetStats at the end, if the server still answered.
  bool stats_ok = false;
  uint64_t stats_streams_opened = 0;
  uint32_t stats_active_streams = 0;
  uint64_t stats_requests_rejected = 0;
  std::map<std::string, uint64_t> stats_rejections_by_limit;
};

// Runs the scenario. Errors only for what prevents a run (bad options, no
// server); everything the server does to the streams is in the result.
absl::StatusOr<LoadResult> RunLoad(const LoadOptions& options);

}  // namespace sophon

#endif  // SOPHON_TOOLS_BENCH_LOAD_RUN_H_
