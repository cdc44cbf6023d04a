// Test helper: the logits that Sophon's C++ model computes from a checkpoint,
// for the Python side to compare with torchvision's model loaded from the same
// file (tests/client/train/checkpoint_torchvision_test.py).
//
// Usage: sophon-test-checkpoint-logits CHECKPOINT OUT SIZE
// Loads CHECKPOINT (LoadFrozenModel: evaluation mode), runs it on a batch of
// two random images of SIZE x SIZE (seed 0) and writes {"input", "logits"}
// to OUT as a checkpoint file that torch.load opens. Exits 1 naming the error.
#include <torch/torch.h>

#include <cstdlib>
#include <iostream>
#include <string>

#include "model/checkpoint_file.h"
#include "model/models.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: " << argv[0] << " CHECKPOINT OUT SIZE\n";
    return 2;
  }
  absl::StatusOr<sophon::FrozenModel> model = sophon::LoadFrozenModel(argv[1]);
  if (!model.ok()) {
    std::cerr << model.status() << "\n";
    return 1;
  }
  const int64_t size = std::atoi(argv[3]);
  torch::manual_seed(0);
  const torch::Tensor input = torch::rand({2, 3, size, size});
  torch::NoGradGuard no_grad;
  const torch::Tensor logits = model->net->forward(input);
  c10::impl::GenericDict out = sophon::NewCheckpointRoot("test");
  out.insert("input", input);
  out.insert("logits", logits.contiguous());
  if (absl::Status s = sophon::WriteCheckpointFile(argv[2], out); !s.ok()) {
    std::cerr << s << "\n";
    return 1;
  }
  return 0;
}
