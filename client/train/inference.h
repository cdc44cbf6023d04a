// Offline inference over a dataset: every sample once, in manifest order,
// through a loader whose target is PREDICTIONS (each sample's top-k classes
// and their probabilities, from the model's head wherever it ran), to a CSV
// file. LibTorch-free: the model runs in the ops (FeatureExtractor).
#ifndef SOPHON_CLIENT_TRAIN_INFERENCE_H_
#define SOPHON_CLIENT_TRAIN_INFERENCE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/loader/loader.h"
#include "client/loader/server_set.h"

namespace sophon {

struct InferenceOptions {
  // CSV of predictions: id,path,label,class,pred_1,class_1,prob_1,... (one
  // line per sample; `class_k` is the dataset's class name of pred_k when the
  // model has as many classes as the dataset, else empty). Empty: none.
  std::string out;
  bool progress = true;  // a progress line every few seconds
  int model_classes = 0;  // the model's class count; >= 1
  int top_k = 0;          // classes per sample in the batches (min(top_k, classes)); >= 1
};

// One sample's best classes, most probable first.
struct Prediction {
  std::vector<int> labels;
  std::vector<float> probabilities;
};

// The predictions of a PREDICTIONS batch ([n, 2k]: class, probability
// pairs); InvalidArgument naming the batch if it is another stage, its rows
// are not k pairs, or a class is not one of `classes`.
absl::StatusOr<std::vector<Prediction>> ReadPredictions(const Batch& batch, int k, int classes);

struct InferenceReport {
  int64_t samples = 0;
  int64_t skipped = 0;       // bad samples the loader skipped
  double seconds = 0;
  uint64_t bytes = 0;        // payload bytes received
  int64_t top1_correct = 0;  // predictions equal to the folder's label (same class count only)
  bool labels_comparable = false;  // the model has as many classes as the dataset
  LoaderEpochStats loader;
};

// Runs epoch 0 of `loader` (built with shuffle off and target PREDICTIONS)
// to the end.
absl::StatusOr<InferenceReport> RunInference(Loader* loader, const ServerSet& servers,
                                             const InferenceOptions& options);

// "600 images in 12.82 s: 46.8 images/s, 0.024 MB received (40 bytes/image;
// predictions 600), skipped 0, top-1 against the folders' labels 0.912".
std::string FormatInferenceReport(const InferenceReport& report);

}  // namespace sophon

#endif  // SOPHON_CLIENT_TRAIN_INFERENCE_H_
