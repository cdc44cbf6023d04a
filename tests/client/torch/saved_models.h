// Reads back what a trainer holds, through its LibTorch-free interface: the
// parameters and buffers of each of its models, from the files Trainer::Save
// writes.
#ifndef SOPHON_TESTS_CLIENT_TORCH_SAVED_MODELS_H_
#define SOPHON_TESTS_CLIENT_TORCH_SAVED_MODELS_H_

#include <torch/types.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "client/train/trainer.h"
#include "gtest/gtest.h"
#include "model/models.h"

namespace sophon::testing {

// One model's tensors: parameters, then buffers, by name.
using ModelTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// Each model of `trainer` (built with `options`), saved under `path`.
inline std::vector<ModelTensors> SavedModels(Trainer& trainer, const TrainerOptions& options,
                                             const std::string& path) {
  std::vector<ModelTensors> models;
  auto files = trainer.Save(path);
  EXPECT_TRUE(files.ok()) << files.status();
  if (!files.ok()) return models;
  for (const std::string& file : *files) {
    auto model = MakeModel(options.arch, options.num_classes, options.dropout);
    EXPECT_TRUE(model.ok()) << model.status();
    const absl::Status loaded = LoadModel(file, options.arch, options.num_classes, *model);
    EXPECT_TRUE(loaded.ok()) << loaded;
    ModelTensors tensors;
    for (const auto& item : (*model)->named_parameters()) {
      tensors.emplace_back(item.key(), item.value().detach().clone());
    }
    for (const auto& item : (*model)->named_buffers()) {
      tensors.emplace_back(item.key(), item.value().clone());
    }
    models.push_back(std::move(tensors));
  }
  return models;
}

// The largest absolute difference between a and b's tensors of the same
// name; -1 when their names or shapes differ. `parameters_only` skips
// buffers (those named running_* or num_batches_tracked).
inline double MaxDifference(const ModelTensors& a, const ModelTensors& b,
                            bool parameters_only = false) {
  if (a.size() != b.size()) return -1;
  double max = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const std::string& name = a[i].first;
    if (name != b[i].first || !a[i].second.sizes().equals(b[i].second.sizes())) return -1;
    const bool buffer = name.find("running_") != std::string::npos ||
                        name.find("num_batches_tracked") != std::string::npos;
    if (parameters_only && buffer) continue;
    max = std::max(max, (a[i].second.to(torch::kDouble) - b[i].second.to(torch::kDouble))
                            .abs()
                            .max()
                            .item<double>());
  }
  return max;
}

// Whether a and b hold the same names, shapes and bytes (parameters only
// with `parameters_only`, as MaxDifference).
inline bool BitwiseEqual(const ModelTensors& a, const ModelTensors& b,
                         bool parameters_only = false) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const std::string& name = a[i].first;
    const torch::Tensor x = a[i].second.contiguous(), y = b[i].second.contiguous();
    if (name != b[i].first || !x.sizes().equals(y.sizes()) ||
        x.scalar_type() != y.scalar_type()) {
      return false;
    }
    const bool buffer = name.find("running_") != std::string::npos ||
                        name.find("num_batches_tracked") != std::string::npos;
    if (parameters_only && buffer) continue;
    if (std::memcmp(x.data_ptr(), y.data_ptr(), x.numel() * x.element_size()) != 0) return false;
  }
  return true;
}

}  // namespace sophon::testing

#endif  // SOPHON_TESTS_CLIENT_TORCH_SAVED_MODELS_H_
