// A trained classifier for offline inference: a checkpoint written by
// sophon-train --save, in evaluation mode without gradients, giving each
// sample's top-k classes and their probabilities. It takes TENSOR batches
// (the whole network) or FEATURES batches (the head alone, on a frozen
// backbone's features from the same checkpoint).
//
// Only sophon_torch's files include models.h; this header does not.
#ifndef SOPHON_CLIENT_TRAIN_PREDICTOR_H_
#define SOPHON_CLIENT_TRAIN_PREDICTOR_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sophon/data/batch.h"

namespace sophon {

struct PredictorOptions {
  std::string checkpoint;  // written by sophon-train --save
  int top_k = 5;           // classes per sample, best first; >= 1, at most the checkpoint's classes
  absl::Status Validate() const;  // names the field
};

// One sample's best classes, most probable first (softmax of the logits).
struct Prediction {
  std::vector<int> labels;
  std::vector<float> probabilities;
};

class Predictor {
 public:
  // NotFound / InvalidArgument naming the file. A top_k over the
  // checkpoint's class count gives every class.
  static absl::StatusOr<std::unique_ptr<Predictor>> Load(const PredictorOptions& options);
  ~Predictor();

  const std::string& arch() const { return arch_; }
  int num_classes() const { return num_classes_; }
  int top_k() const { return top_k_; }
  // One prediction per sample of `batch` (TENSOR or FEATURES of this
  // architecture); InvalidArgument naming what does not fit. One batch at a
  // time.
  absl::StatusOr<std::vector<Prediction>> Predict(const Batch& batch) const;

 private:
  struct Model;
  Predictor() = default;
  std::unique_ptr<Model> model_;
  std::string arch_;
  int num_classes_ = 0;
  int top_k_ = 0;
};

}  // namespace sophon

#endif  // SOPHON_CLIENT_TRAIN_PREDICTOR_H_
