// The training loop of sophon-train: pulls batches from the loader, steps the
// trainer, shows progress and reports each epoch.
#ifndef SOPHON_CLIENT_TRAIN_TRAIN_LOOP_H_
#define SOPHON_CLIENT_TRAIN_TRAIN_LOOP_H_

#include <array>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "client/loader/loader.h"
#include "client/loader/sample_client.h"
#include "client/train/trainer.h"

namespace sophon {

struct TrainLoopOptions {
  int epochs = 1;
  int64_t max_batches = 0;         // per epoch; 0 = all
  // Batches of an unreported warm-up epoch (its own epoch number, so its
  // samples and crops differ) run before the first epoch: first-touch memory,
  // connections and, for smartoff, measured speeds are then not in epoch 0.
  int64_t warmup_batches = 0;
  std::string mode_name;           // for reports
  std::string arch;                // for reports
  bool progress = true;            // progress line on stderr
  std::string report_json;         // write the epoch reports here if non-empty
  std::string device;              // what the trainer runs on (Trainer::DeviceName), for reports
  bool emulated = false;           // the trainer emulates a GPU: reports say "emulated"
  std::string batch_timings;       // per-batch timings CSV (batch_timings.h) if non-empty
  std::string batch_digests;       // per-batch digests CSV (batch_digests.h) if non-empty
  // A fused array: one label per model (its hyperparameters) for the
  // per-model lines of the reports. Empty for one ordinary model.
  std::vector<std::string> model_labels;
  std::string optimizer;           // for reports ("sgd", "adam")
  // Checkpoints: the whole training state and the data cursor
  // (Trainer::SaveCheckpoint) to checkpoint_path every checkpoint_every steps
  // (0: none during the run) and after the last epoch; rank 0 only. Empty
  // path: none.
  std::string checkpoint_path;
  int64_t checkpoint_every = 0;
  // Stop the run once this many optimizer steps have been taken in total
  // (counting those before a resume); 0 = no limit. The last checkpoint is
  // written there.
  int64_t max_steps = 0;
  // Where the run starts: a resumed run's cursor (from the checkpoint; its
  // epoch and global position); a resumed run has no warm-up.
  TrainingCursor start;
  bool resumed = false;
  // Written into each checkpoint's cursor.
  int64_t global_batch = 0;
  uint64_t dataset_fingerprint = 0;
  uint64_t seed = 0;
  int shuffle_window = 0;  // the loader's: the order resumed must be the same
};

// One model's figures of an epoch of a fused array.
struct ModelEpochReport {
  double mean_loss = 0;
  double top1 = 0;
};

// One storage server's share of an epoch.
struct ServerEpochReport {
  std::string address;
  double prep_busy_seconds = 0;  // its prep workers' CPU seconds this epoch
  int prep_workers = 0;
  bool reachable = true;         // its stats could be read after the epoch
};

struct EpochReport {
  int epoch = 0;
  double wall_seconds = 0;
  double images_per_second = 0;
  double data_wait_seconds = 0;    // trainer blocked waiting for a batch
  double compute_seconds = 0;      // inside Trainer::Submit and Drain (the steps, or on an
                                   // asynchronous device queueing them and waiting for them)
  double copy_seconds = 0;         // of compute_seconds, host-to-device copy (where measured)
  bool emulated = false;           // steps were emulated (EmulatedTrainer)
  // Fused arrays: the means over the models of their mean loss and top-1.
  double mean_loss = 0;
  double top1 = 0;                 // fraction correct on the training batches
  std::vector<ModelEpochReport> models;  // a fused array's models, in order; else empty
  double predicted_seconds = 0;    // the planner's prediction of wall_seconds; 0 = none
  uint64_t peak_rss_bytes = 0;     // the process's most resident memory so far (VmHWM); 0 = unknown
  LoaderEpochStats loader;
  double server_prep_busy_seconds = 0;  // server prep workers' CPU seconds this epoch, all servers
  int server_prep_workers = 0;          // all servers
  std::vector<ServerEpochReport> servers;  // in --server order
};

// Whether a run with `options` (its dataset fingerprint, global batch and
// seed) can continue from `cursor`, read from `path`: FailedPrecondition
// naming the file and both values when the dataset, the global batch or the
// seed differs (another world size is fine: the global order and batches do
// not depend on it), or when the cursor is not at a step boundary.
absl::Status CheckResumable(const TrainingCursor& cursor, const TrainLoopOptions& options,
                            const std::string& path);

// Runs the epochs. Errors from the loader or trainer end the run.
absl::StatusOr<std::vector<EpochReport>> RunTraining(Loader* loader, Trainer* trainer,
                                                     const TrainLoopOptions& options);

// Sums the training steps of one epoch into its report; shared by the real
// and the synthetic training loops.
class EpochTally {
 public:
  // Adds one step: compute and copy time, loss, correct predictions.
  void AddStep(const StepResult& step, double step_seconds, EpochReport* report);
  // Sets images/s, mean loss and top-1 (and each model's, for a fused
  // array). REQUIRES: report->wall_seconds set.
  void Finish(EpochReport* report) const;
  int64_t seen() const { return seen_; }

 private:
  struct Sums {
    double loss = 0;  // sum over samples of the batch mean loss
    int64_t correct = 0;
  };
  Sums all_;
  std::vector<Sums> models_;
  int64_t seen_ = 0;
};

// Warns once per model when its loss stops being finite (a learning rate
// too high for it, in a search over many): the run goes on, and that model's
// figures in the reports are NaN (null in the JSON).
class DivergenceWatch {
 public:
  explicit DivergenceWatch(std::vector<std::string> model_labels)
      : labels_(std::move(model_labels)) {}
  void Check(const StepResult& step, int epoch, int64_t batch);

 private:
  const std::vector<std::string> labels_;
  std::vector<bool> warned_;
};

// What the unreported warm-up (TrainLoopOptions::warmup_batches) did.
struct WarmupReport {
  int64_t batches = 0;
  double seconds = 0;
  uint64_t bytes_received = 0;  // sample payload bytes
};

// Writes the reports as JSON to options.report_json; nothing if it is empty.
absl::Status WriteReportJson(const std::vector<EpochReport>& reports,
                             const TrainLoopOptions& options, const WarmupReport& warmup = {});

// Human-readable summary of one epoch; a fused array adds one line per model,
// labelled with `model_labels` where given.
std::string FormatEpochReport(const EpochReport& report,
                              const std::vector<std::string>& model_labels = {});
// All reports as JSON.
std::string EpochReportsToJson(const std::vector<EpochReport>& reports,
                               const TrainLoopOptions& options, const WarmupReport& warmup = {});

}  // namespace sophon

#endif  // SOPHON_CLIENT_TRAIN_TRAIN_LOOP_H_
