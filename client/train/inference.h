// Offline inference over a dataset: every sample once, in manifest order,
// through a loader (whose target is FEATURES when the predictor takes the
// backbone's features, TENSOR otherwise) and a Predictor, to a CSV file of
// each sample's top-k classes.
#ifndef SOPHON_CLIENT_TRAIN_INFERENCE_H_
#define SOPHON_CLIENT_TRAIN_INFERENCE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "client/loader/loader.h"
#include "client/loader/server_set.h"
#include "client/train/predictor.h"

namespace sophon {

struct InferenceOptions {
  // CSV of predictions: id,path,label,class,pred_1,class_1,prob_1,... (one
  // line per sample; `class_k` is the dataset's class name of pred_k when the
  // model has as many classes as the dataset, else empty). Empty: none.
  std::string out;
  bool progress = true;  // a progress line every few seconds
};

struct InferenceReport {
  int64_t samples = 0;
  int64_t skipped = 0;       // bad samples the loader skipped
  double seconds = 0;
  uint64_t bytes = 0;        // payload bytes received
  int64_t top1_correct = 0;  // predictions equal to the folder's label (same class count only)
  bool labels_comparable = false;  // the model has as many classes as the dataset
  LoaderEpochStats loader;
};

// Runs epoch 0 of `loader` (built with shuffle off) to the end.
absl::StatusOr<InferenceReport> RunInference(Loader* loader, const ServerSet& servers,
                                             const Predictor& predictor,
                                             const InferenceOptions& options);

// "1000 images in 12.3 s: 81.3 images/s, 1.0 KB/image (features 1000), top-1 0.912".
std::string FormatInferenceReport(const InferenceReport& report);

}  // namespace sophon

#endif  // SOPHON_CLIENT_TRAIN_INFERENCE_H_
