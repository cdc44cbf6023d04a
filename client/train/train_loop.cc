#include "client/train/train_loop.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/loader/offload_policy.h"
#include "client/loader/sampler.h"
#include "client/loader/server_set.h"
#include "client/train/batch_digests.h"
#include "client/train/batch_timings.h"
#include "client/train/csv_log.h"
#include "client/train/epoch_steps.h"
#include "sophon/base/json.h"
#include "sophon/base/process_status.h"
#include "spdlog/spdlog.h"

namespace sophon {
namespace {

double Seconds(absl::Time since) { return absl::ToDoubleSeconds(absl::Now() - since); }

uint64_t TotalBytes(const LoaderEpochStats& s) {
  uint64_t total = 0;
  for (uint64_t b : s.bytes_by_stage) total += b;
  return total;
}

// One progress line, rewritten in place on a terminal.
class Progress {
 public:
  explicit Progress(bool enabled) : enabled_(enabled), tty_(isatty(STDERR_FILENO) != 0) {}

  void Update(int epoch, int64_t batch, int64_t batches, uint64_t images, uint64_t bytes,
              double wait, double loss, absl::Time start) {
    if (!enabled_) return;
    const absl::Time now = absl::Now();
    if (now - last_ < (tty_ ? absl::Milliseconds(250) : absl::Seconds(10))) return;
    last_ = now;
    const double secs = std::max(1e-9, absl::ToDoubleSeconds(now - start));
    const std::string line = absl::StrFormat(
        "epoch %d  batch %d/%d  %.1f img/s  %.1f MB/s  data wait %.1fs (%.0f%%)  loss %.4f",
        epoch, batch, batches, images / secs, bytes / secs / 1e6, wait, 100 * wait / secs, loss);
    if (tty_) {
      std::fprintf(stderr, "\r%-110s", line.c_str());
      std::fflush(stderr);
      dirty_ = true;
    } else {
      spdlog::info("{}", line);
    }
  }
  void Finish() {
    if (dirty_) std::fprintf(stderr, "\n");
    dirty_ = false;
  }

 private:
  const bool enabled_;
  const bool tty_;
  bool dirty_ = false;
  absl::Time last_ = absl::InfinitePast();
};

absl::Status WarmUp(Loader* loader, Trainer* trainer, const TrainLoopOptions& options,
                    WarmupReport* report) {
  const absl::Time start = absl::Now();
  if (absl::Status s = loader->StartEpoch(kWarmupEpoch, options.warmup_batches); !s.ok()) {
    return s;
  }
  Batch batch;
  int64_t steps = 0;
  while (steps < options.warmup_batches) {
    absl::StatusOr<bool> more = loader->Next(&batch);
    if (!more.ok()) {
      return absl::Status(more.status().code(),
                          absl::StrCat("warm-up: ", more.status().message()));
    }
    if (!*more) break;
    const absl::Time step_start = absl::Now();
    absl::StatusOr<StepResult> step = trainer->Step(batch);
    if (!step.ok()) {
      return absl::Status(step.status().code(),
                          absl::StrCat("warm-up step ", steps, ": ", step.status().message()));
    }
    loader->policy()->OnStep(Seconds(step_start));
    ++steps;
  }
  loader->Stop();
  report->batches = steps;
  report->seconds = Seconds(start);
  report->bytes_received = TotalBytes(loader->stats());
  spdlog::info("warm-up: {} batches in {:.2f}s, {:.1f} MB received (not reported)", steps,
               report->seconds, report->bytes_received / 1e6);
  return absl::OkStatus();
}

// Every server's stats, read before or after an epoch; a server that does
// not answer is missing (the loader waits for it or goes on without it).
std::vector<absl::StatusOr<v1::ServerStats>> ReadServerStats(ServerSet* servers) {
  std::vector<absl::StatusOr<v1::ServerStats>> stats;
  for (int i = 0; i < servers->size(); ++i) stats.push_back(servers->client(i)->GetStats());
  return stats;
}

absl::Status WriteCheckpoint(Trainer* trainer, const TrainLoopOptions& options, int64_t epoch,
                             int64_t position, int64_t steps, int64_t epoch_length) {
  TrainingCursor cursor;
  cursor.epoch = epoch;
  cursor.position = position;
  if (position >= epoch_length) {  // the epoch is done: the next one starts
    cursor.epoch = epoch + 1;
    cursor.position = 0;
  }
  cursor.steps = steps;
  cursor.global_batch = options.global_batch;
  cursor.world_size = trainer->world_size();
  cursor.dataset_fingerprint = options.dataset_fingerprint;
  cursor.seed = options.seed;
  cursor.shuffle_window = options.shuffle_window;
  const absl::Time start = absl::Now();
  if (absl::Status s = trainer->SaveCheckpoint(options.checkpoint_path, cursor); !s.ok()) {
    return s;
  }
  spdlog::info("checkpoint: step {}, epoch {} at sample {} of its order, written to {} in {}",
               steps, cursor.epoch, cursor.position, options.checkpoint_path,
               absl::FormatDuration(absl::Trunc(absl::Now() - start, absl::Milliseconds(1))));
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckResumable(const TrainingCursor& cursor, const TrainLoopOptions& options,
                            const std::string& path) {
  if (cursor.dataset_fingerprint != options.dataset_fingerprint) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint ", path, " was written for dataset fingerprint ", cursor.dataset_fingerprint,
        ", but the storage servers now serve fingerprint ", options.dataset_fingerprint,
        ": its data cursor would point into another sample order"));
  }
  if (cursor.global_batch != options.global_batch) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint ", path, " was written with a global batch of ", cursor.global_batch,
        " samples (", cursor.world_size, " ranks), but this run's is ", options.global_batch,
        " (--batch-size x --world-size): give a batch size that makes the global batch ",
        cursor.global_batch));
  }
  if (cursor.seed != options.seed) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint ", path, " was written with --seed=", cursor.seed,
                     ", but this run has --seed=", options.seed,
                     ": the epoch's order would differ"));
  }
  if (cursor.shuffle_window != options.shuffle_window) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint ", path, " was written with --shuffle-window=", cursor.shuffle_window,
        ", but this run has --shuffle-window=", options.shuffle_window,
        ": the epoch's order would differ"));
  }
  if (cursor.position < 0 || (options.global_batch > 0 && cursor.position % options.global_batch != 0)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint ", path, " holds data cursor ", cursor.position,
        ", not a multiple of its global batch ", cursor.global_batch));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<EpochReport>> RunTraining(Loader* loader, Trainer* trainer,
                                                     const TrainLoopOptions& options) {
  std::vector<EpochReport> reports;
  absl::StatusOr<std::unique_ptr<CsvLog>> opened =
      CsvLog::Create(options.batch_timings, kBatchTimingsHeader, kBatchTimingsWhat);
  if (!opened.ok()) return opened.status();
  std::unique_ptr<CsvLog> timings = *std::move(opened);
  absl::StatusOr<std::unique_ptr<CsvLog>> opened_digests =
      CsvLog::Create(options.batch_digests, kBatchDigestsHeader, kBatchDigestsWhat);
  if (!opened_digests.ok()) return opened_digests.status();
  std::unique_ptr<CsvLog> digests = *std::move(opened_digests);
  WarmupReport warmup;
  if (options.warmup_batches > 0 && !options.resumed) {
    if (absl::Status s = WarmUp(loader, trainer, options, &warmup); !s.ok()) return s;
  }
  ServerSet* const servers = loader->servers();
  const int64_t epoch_length =
      PaddedEpochLength(servers->manifest().num_samples(), loader->world());
  const bool writes_checkpoints = !options.checkpoint_path.empty() && trainer->rank() == 0;
  int64_t total_steps = options.start.steps;
  int64_t last_checkpoint_steps = total_steps;
  int64_t cursor = options.start.position;
  int64_t last_epoch = options.start.epoch;
  auto StepLimitReached = [&] { return options.max_steps > 0 && total_steps >= options.max_steps; };
  DivergenceWatch divergence(options.model_labels);
  for (int epoch = static_cast<int>(options.start.epoch);
       epoch < options.epochs && !StepLimitReached(); ++epoch) {
    last_epoch = epoch;
    const std::vector<absl::StatusOr<v1::ServerStats>> before = ReadServerStats(servers);
    // A server restarted between epochs with other data would pair this
    // manifest's labels with other images.
    for (int i = 0; i < servers->size(); ++i) {
      if (before[i].ok()) {
        if (absl::Status s = servers->client(i)->CheckSameDataset(*before[i]); !s.ok()) return s;
      }
    }
    const int64_t start_position = epoch == options.start.epoch ? options.start.position : 0;
    if (absl::Status s = loader->StartEpoch(epoch, options.max_batches, start_position); !s.ok()) {
      return s;
    }
    if (start_position > 0) {
      spdlog::info("resuming epoch {} at sample {} of its order ({} samples per rank left)", epoch,
                   start_position, loader->epoch_samples());
    }
    trainer->BeginEpoch(epoch, options.epochs);
    EpochReport report;
    report.epoch = epoch;
    Progress progress(options.progress);
    const absl::Time start = absl::Now();
    EpochTally tally;
    EpochSteps epoch_steps(trainer, epoch, &report, &tally, &divergence, timings.get());
    int64_t steps = 0;
    Batch batch;
    while ((options.max_batches == 0 || steps < options.max_batches) && !StepLimitReached()) {
      const absl::Time wait_start = absl::Now();
      absl::StatusOr<bool> more = loader->Next(&batch);
      const double wait = Seconds(wait_start);
      report.data_wait_seconds += wait;
      if (!more.ok()) {
        progress.Finish();
        return more.status();
      }
      if (!*more) break;
      if (digests) AddBatchDigest(digests.get(), epoch, batch);
      // On an asynchronous device the step is queued: its result arrives
      // with a later submit, and the host goes on to fetch the next batch.
      absl::StatusOr<double> step_seconds = epoch_steps.Submit(batch, steps, wait);
      if (!step_seconds.ok()) {
        progress.Finish();
        return step_seconds.status();
      }
      loader->policy()->OnDataWait(wait);
      loader->policy()->OnStep(*step_seconds);
      ++steps;
      ++total_steps;
      cursor = batch.cursor;
      if (writes_checkpoints && options.checkpoint_every > 0 &&
          total_steps % options.checkpoint_every == 0) {
        // The checkpoint copies the parameters after every step submitted
        // so far (the device runs them in order), so it matches the cursor.
        if (absl::Status s =
                WriteCheckpoint(trainer, options, epoch, cursor, total_steps, epoch_length);
            !s.ok()) {
          progress.Finish();
          return s;
        }
        last_checkpoint_steps = total_steps;
      }
      const LoaderEpochStats ls = loader->stats();
      progress.Update(epoch, steps, loader->num_batches(), tally.seen(), TotalBytes(ls),
                      report.data_wait_seconds,
                      epoch_steps.latest() ? epoch_steps.latest()->loss : 0.0, start);
    }
    if (absl::Status s = epoch_steps.Finish(); !s.ok()) {
      progress.Finish();
      return s;
    }
    loader->Stop();  // also ends an epoch cut short by --max-batches
    progress.Finish();
    report.wall_seconds = Seconds(start);
    report.emulated = options.emulated;
    report.predicted_seconds = loader->policy()->PredictedEpochSeconds();
    report.loader = loader->stats();
    if (absl::StatusOr<ProcessStatus> ps = ReadProcessStatus(); ps.ok()) {
      report.peak_rss_bytes = ps->peak_rss_bytes;
    }
    tally.Finish(&report);
    const std::vector<absl::StatusOr<v1::ServerStats>> after = ReadServerStats(servers);
    for (int i = 0; i < servers->size(); ++i) {
      ServerEpochReport& server = report.servers.emplace_back();
      server.address = servers->address(i);
      server.reachable = after[i].ok();
      if (!after[i].ok()) continue;
      // A server that restarted during the epoch (it has been up for less
      // than the epoch's time since `before`) counts from its restart.
      const bool restarted =
          !before[i].ok() ||
          after[i]->uptime_seconds() + 1.0 < before[i]->uptime_seconds() + report.wall_seconds;
      server.prep_busy_seconds =
          after[i]->prep_busy_seconds() - (restarted ? 0.0 : before[i]->prep_busy_seconds());
      server.prep_workers = static_cast<int>(after[i]->prep_workers());
      report.server_prep_busy_seconds += server.prep_busy_seconds;
      report.server_prep_workers += server.prep_workers;
    }
    spdlog::info("{}", FormatEpochReport(report, options.model_labels));
    reports.push_back(report);
    // The next epoch starts at its beginning whatever --max-batches cut,
    // unless the run stopped at its step limit inside this one.
    if (!StepLimitReached() || loader->num_batches() == steps) cursor = epoch_length;
  }
  if (writes_checkpoints && total_steps > last_checkpoint_steps) {
    if (absl::Status s =
            WriteCheckpoint(trainer, options, last_epoch, cursor, total_steps, epoch_length);
        !s.ok()) {
      return s;
    }
  }
  if (digests) {
    if (absl::Status s = digests->Close(); !s.ok()) return s;
  }
  if (timings) {
    if (absl::Status s = timings->Close(); !s.ok()) return s;
  }
  if (absl::Status s = WriteReportJson(reports, options, warmup); !s.ok()) return s;
  return reports;
}

void DivergenceWatch::Check(const StepResult& step, int epoch, int64_t batch) {
  const size_t models = std::max<size_t>(1, step.models.size());
  if (warned_.size() < models) warned_.resize(models, false);
  for (size_t k = 0; k < models; ++k) {
    const double loss = step.models.empty() ? step.loss : step.models[k].loss;
    if (std::isfinite(loss) || warned_[k]) continue;
    warned_[k] = true;
    if (step.models.empty()) {
      spdlog::warn("the model diverged: its loss is {} at batch {} of epoch {} (lower --lr?)",
                   loss, batch, epoch);
    } else {
      spdlog::warn("model {}{}{} diverged: its loss is {} at batch {} of epoch {}; the other "
                   "models train on",
                   k, k < labels_.size() ? " " : "", k < labels_.size() ? labels_[k] : "", loss,
                   batch, epoch);
    }
  }
}

void EpochTally::AddStep(const StepResult& step, double step_seconds, EpochReport* report) {
  report->compute_seconds += step_seconds;
  report->copy_seconds += step.copy_seconds;
  all_.loss += step.loss * step.count;
  all_.correct += step.correct;
  if (models_.size() < step.models.size()) models_.resize(step.models.size());
  for (size_t k = 0; k < step.models.size(); ++k) {
    models_[k].loss += step.models[k].loss * step.count;
    models_[k].correct += step.models[k].correct;
  }
  seen_ += step.count;
}

void EpochTally::Finish(EpochReport* report) const {
  report->images_per_second = seen_ / std::max(1e-9, report->wall_seconds);
  const double seen = std::max<double>(1, seen_);
  report->mean_loss = all_.loss / seen;
  report->top1 = all_.correct / seen;
  report->models.clear();
  if (models_.empty()) return;
  double top1_sum = 0;
  for (const Sums& m : models_) {
    report->models.push_back({m.loss / seen, m.correct / seen});
    top1_sum += m.correct / seen;
  }
  report->top1 = top1_sum / models_.size();
}

absl::Status WriteReportJson(const std::vector<EpochReport>& reports,
                             const TrainLoopOptions& options, const WarmupReport& warmup) {
  if (options.report_json.empty()) return absl::OkStatus();
  std::ofstream out(options.report_json);
  out << EpochReportsToJson(reports, options, warmup);
  if (!out) {
    return absl::UnavailableError(
        absl::StrCat("cannot write the JSON report '", options.report_json, "'"));
  }
  return absl::OkStatus();
}

std::string FormatEpochReport(const EpochReport& r, const std::vector<std::string>& model_labels) {
  const LoaderEpochStats& l = r.loader;
  const uint64_t bytes = TotalBytes(l);
  std::string by_stage;
  for (Stage stage : AllStages()) {
    const int i = StageIndex(stage);
    if (l.samples_by_stage[i] == 0) continue;
    absl::StrAppendFormat(&by_stage, "%s%s %d samples %.1f MB", by_stage.empty() ? "" : ", ",
                          StageName(stage), l.samples_by_stage[i], l.bytes_by_stage[i] / 1e6);
  }
  if (l.feature_cache_hits > 0) {
    absl::StrAppendFormat(&by_stage, "%s%d from the feature cache", by_stage.empty() ? "" : ", ",
                          l.feature_cache_hits);
  }
  if (l.sample_cache_hits > 0 || l.sample_cache_inserted > 0) {
    absl::StrAppendFormat(&by_stage,
                          "%ssample cache: %d hits (%.1f MB not fetched), %d misses, %d kept, "
                          "holds %d (%.1f MB)",
                          by_stage.empty() ? "" : ", ", l.sample_cache_hits,
                          l.sample_cache_hit_bytes / 1e6, l.sample_cache_misses,
                          l.sample_cache_inserted,
                          l.sample_cache_entries, l.sample_cache_bytes / 1e6);
  }
  if (l.shared_batches_read > 0 || l.shared_batches_published > 0) {
    absl::StrAppendFormat(&by_stage,
                          "%sshared batches: %d read from other jobs (%.2fs taking them), %d "
                          "made here for them",
                          by_stage.empty() ? "" : ", ", l.shared_batches_read,
                          l.shared_take_seconds, l.shared_batches_published);
  }
  std::string out = absl::StrFormat(
      "epoch %d%s: %.2fs, %d images, %.1f img/s, %.1f MB received (%.1f KB/image; %s), "
      "data wait %.2fs (%.0f%%), loss %.4f, top-1 %.3f, skipped %d",
      r.epoch, r.emulated ? " (emulated GPU)" : "", r.wall_seconds, l.samples,
      r.images_per_second, bytes / 1e6,
      l.samples ? bytes / 1e3 / l.samples : 0.0, by_stage, r.data_wait_seconds,
      100 * r.data_wait_seconds / std::max(1e-9, r.wall_seconds), r.mean_loss, r.top1, l.skipped);
  absl::StrAppendFormat(&out,
                        "; local prep %.2f CPU-s, server prep %.2f CPU-s on %d workers (%.0f%% busy)",
                        l.local_cpu_seconds, r.server_prep_busy_seconds, r.server_prep_workers,
                        r.server_prep_workers
                            ? 100 * r.server_prep_busy_seconds /
                                  (r.server_prep_workers * std::max(1e-9, r.wall_seconds))
                            : 0.0);
  if (l.padding > 0) {
    absl::StrAppendFormat(&out, "; %d samples repeated to give every rank as many", l.padding);
  }
  if (l.reconnects > 0) {
    absl::StrAppendFormat(&out, "; stream re-opened %d times, %d requests resent", l.reconnects,
                          l.resent);
  }
  if (l.streams_refused > 0) {
    absl::StrAppendFormat(&out, "; server full: fetch stream refused %d times and retried",
                          l.streams_refused);
  }
  if (r.predicted_seconds > 0) {
    absl::StrAppendFormat(&out, "; planner predicted %.2fs (measured/predicted %.2f)",
                          r.predicted_seconds, r.wall_seconds / r.predicted_seconds);
  }
  if (!r.models.empty()) {
    absl::StrAppendFormat(&out, "; %d fused models, %.1f model-images/s (loss and top-1 above: "
                          "their means)", r.models.size(), r.images_per_second * r.models.size());
  }
  // Several servers: each one's share (samples, bytes, prep busy).
  for (size_t i = 0; l.servers.size() > 1 && i < l.servers.size(); ++i) {
    const ServerLoadStats& s = l.servers[i];
    const ServerEpochReport* e = i < r.servers.size() ? &r.servers[i] : nullptr;
    absl::StrAppendFormat(
        &out, "\n  server %s: %d samples, %.1f MB, prep %.0f%% busy%s%s", s.address, s.samples,
        s.bytes / 1e6,
        e != nullptr && e->prep_workers > 0
            ? 100 * e->prep_busy_seconds / (e->prep_workers * std::max(1e-9, r.wall_seconds))
            : 0.0,
        s.reconnects > 0 ? absl::StrFormat(", re-opened %d times", s.reconnects) : "",
        s.lost ? absl::StrFormat(", LOST (%d samples failed over to replicas)", s.failed_over)
               : "");
  }
  for (size_t k = 0; k < r.models.size(); ++k) {
    absl::StrAppendFormat(&out, "\n  model %d%s%s: loss %.4f, top-1 %.3f", k,
                          k < model_labels.size() ? " " : "",
                          k < model_labels.size() ? model_labels[k] : "", r.models[k].mean_loss,
                          r.models[k].top1);
  }
  return out;
}

std::string EpochReportsToJson(const std::vector<EpochReport>& reports,
                               const TrainLoopOptions& options, const WarmupReport& warmup) {
  JsonWriter w;
  w.BeginObject();
  w.Key("mode").String(options.mode_name);
  w.Key("arch").String(options.arch);
  w.Key("device").String(options.device);
  w.Key("emulated").Bool(options.emulated);
  w.Key("optimizer").String(options.optimizer);
  w.Key("fused_models").Int(static_cast<int64_t>(options.model_labels.size()));
  w.Key("model_hyperparameters").BeginArray();
  for (const std::string& label : options.model_labels) w.String(label);
  w.EndArray();
  w.Key("warmup").BeginObject();
  w.Key("batches").Int(warmup.batches);
  w.Key("seconds").Fixed(warmup.seconds, 6);
  w.Key("bytes_received").Uint(warmup.bytes_received);
  w.EndObject();
  w.Key("epochs").BeginArray();
  for (const EpochReport& r : reports) {
    const LoaderEpochStats& l = r.loader;
    const uint64_t bytes = TotalBytes(l);
    w.BeginObject();
    w.Key("epoch").Int(r.epoch);
    w.Key("wall_seconds").Fixed(r.wall_seconds, 6);
    w.Key("images").Uint(l.samples);
    w.Key("images_per_second").Fixed(r.images_per_second, 3);
    w.Key("bytes_received").Uint(bytes);
    w.Key("bytes_per_image").Fixed(l.samples ? static_cast<double>(bytes) / l.samples : 0.0, 1);
    w.Key("samples_by_stage").BeginObject();
    for (Stage stage : AllStages()) w.Key(StageName(stage)).Uint(l.samples_by_stage[StageIndex(stage)]);
    w.EndObject();
    w.Key("bytes_by_stage").BeginObject();
    for (Stage stage : AllStages()) w.Key(StageName(stage)).Uint(l.bytes_by_stage[StageIndex(stage)]);
    w.EndObject();
    w.Key("data_wait_seconds").Fixed(r.data_wait_seconds, 6);
    w.Key("compute_seconds").Fixed(r.compute_seconds, 6);
    w.Key("copy_seconds").Fixed(r.copy_seconds, 6);
    w.Key("mean_loss").Fixed(r.mean_loss, 6);
    w.Key("top1").Fixed(r.top1, 6);
    w.Key("skipped").Uint(l.skipped);
    w.Key("feature_cache_hits").Uint(l.feature_cache_hits);
    w.Key("sample_cache_hits").Uint(l.sample_cache_hits);
    w.Key("sample_cache_hit_bytes").Uint(l.sample_cache_hit_bytes);
    w.Key("sample_cache_misses").Uint(l.sample_cache_misses);
    w.Key("sample_cache_inserted").Uint(l.sample_cache_inserted);
    w.Key("sample_cache_entries").Int(l.sample_cache_entries);
    w.Key("sample_cache_bytes").Int(l.sample_cache_bytes);
    w.Key("shared_batches_read").Uint(l.shared_batches_read);
    w.Key("shared_batches_published").Uint(l.shared_batches_published);
    w.Key("shared_take_seconds").Fixed(l.shared_take_seconds, 6);
    w.Key("local_prep_cpu_seconds").Fixed(l.local_cpu_seconds, 6);
    w.Key("server_prep_cpu_seconds").Fixed(r.server_prep_busy_seconds, 6);
    w.Key("server_prep_workers").Int(r.server_prep_workers);
    w.Key("reconnects").Int(l.reconnects);
    w.Key("streams_refused").Int(l.streams_refused);
    w.Key("peak_batch_buffers").Int(l.peak_batch_buffers);
    w.Key("peak_queued_payload_bytes").Uint(l.peak_queued_payload_bytes);
    w.Key("predicted_seconds").Fixed(r.predicted_seconds, 6);
    w.Key("peak_rss_bytes").Uint(r.peak_rss_bytes);
    w.Key("padding").Int(l.padding);
    w.Key("servers").BeginArray();
    for (size_t i = 0; i < l.servers.size(); ++i) {
      const ServerLoadStats& s = l.servers[i];
      w.BeginObject();
      w.Key("address").String(s.address);
      w.Key("samples").Uint(s.samples);
      w.Key("bytes").Uint(s.bytes);
      if (i < r.servers.size()) {
        const ServerEpochReport& e = r.servers[i];
        w.Key("prep_cpu_seconds").Fixed(e.prep_busy_seconds, 6);
        w.Key("prep_workers").Int(e.prep_workers);
        w.Key("prep_busy_share")
            .Fixed(e.prep_workers > 0 ? e.prep_busy_seconds /
                                            (e.prep_workers * std::max(1e-9, r.wall_seconds))
                                      : 0.0,
                   4);
      }
      w.Key("reconnects").Int(s.reconnects);
      w.Key("failed_over").Uint(s.failed_over);
      w.Key("lost").Bool(s.lost);
      w.EndObject();
    }
    w.EndArray();
    w.Key("model_images_per_second")
        .Fixed(r.images_per_second * std::max<size_t>(1, r.models.size()), 3);
    w.Key("models").BeginArray();
    for (const ModelEpochReport& m : r.models) {
      w.BeginObject();
      w.Key("mean_loss").Fixed(m.mean_loss, 6);
      w.Key("top1").Fixed(m.top1, 6);
      w.EndObject();
    }
    w.EndArray();
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return w.Take();
}

}  // namespace sophon
