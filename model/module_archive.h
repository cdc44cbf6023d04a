// LibTorch's serialized module archive (torch::serialize::OutputArchive: a
// TorchScript module holding every parameter and buffer by its torchvision
// name, plus "sophon_arch" and "sophon_num_classes"): the format of the model
// checkpoints earlier versions wrote. Read so that those checkpoints keep
// working; written only by tests and the checkpoint format benchmark. Sophon
// writes torch.save's format (checkpoint_file.h).
//
// Only sophon_model's and sophon_torch's files include this header: it pulls
// in LibTorch.
#ifndef SOPHON_MODEL_MODULE_ARCHIVE_H_
#define SOPHON_MODEL_MODULE_ARCHIVE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/models.h"

namespace sophon {

// Writes `model` to `path` in the archive format (CPU copies of its tensors;
// through a temporary file renamed into place).
absl::Status WriteModuleArchive(const Classifier& model, const std::string& arch, int num_classes,
                                const std::string& path);

// The architecture and class count of an archive checkpoint. NotFound for a
// missing file; InvalidArgument naming the file otherwise.
absl::StatusOr<CheckpointInfo> ReadModuleArchiveInfo(const std::string& path);

// Loads an archive checkpoint into `model` (built for `arch` and
// `num_classes`). Errors as LoadModel (models.h).
absl::Status LoadModuleArchive(const std::string& path, const std::string& arch,
                               int num_classes, const Classifier& model);

}  // namespace sophon

#endif  // SOPHON_MODEL_MODULE_ARCHIVE_H_
