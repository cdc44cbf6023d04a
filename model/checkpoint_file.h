// Sophon's checkpoint files: what Python's torch.save writes (a zip holding
// one pickle and the tensors' storages), so that torch.load opens them, with
// the default weights_only=True of PyTorch 2.6 and later too.
//
// The root is a dict with string keys; its values are tensors, ints, bools,
// strings, and lists and string-keyed dicts of those. No floats (PyTorch
// 1.13's weights_only reader refuses them: a float is a float64 tensor here)
// and no TorchScript classes or type tags. Every checkpoint has
//   "format": "sophon-checkpoint", "version": 2,
//   "kind":   "model" (models.h) or "training" (client/torch/training_checkpoint.h)
// Written with LibTorch's pickler (type tags off) and read with
// torch::pickle_load: no TorchScript module is built either way.
//
// Files written by earlier versions are LibTorch's serialized module archive
// (module_archive.h): DetectCheckpointFormat tells them apart.
//
// Only sophon_model's and sophon_torch's files include this header: it pulls
// in LibTorch.
#ifndef SOPHON_MODEL_CHECKPOINT_FILE_H_
#define SOPHON_MODEL_CHECKPOINT_FILE_H_

#include <ATen/core/Dict.h>
#include <ATen/core/ivalue.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sophon {

inline constexpr char kCheckpointFormat[] = "sophon-checkpoint";
inline constexpr int64_t kCheckpointVersion = 2;

enum class CheckpointFormat {
  kPickled,        // torch.save's format (this file's)
  kModuleArchive,  // LibTorch's serialized module archive (earlier versions)
};

// Which format `path` is in, from its zip records (nothing is unpickled).
// NotFound for a missing file; InvalidArgument naming the file for one that
// is neither (not a zip, truncated, another program's zip).
absl::StatusOr<CheckpointFormat> DetectCheckpointFormat(const std::string& path);

// A new string-keyed dict for a checkpoint's root or its parts.
c10::impl::GenericDict NewCheckpointDict();
// The root of a checkpoint of `kind`, with format and version set.
c10::impl::GenericDict NewCheckpointRoot(absl::string_view kind);

// Writes `root` to `path` through AtomicFileWriter (the old file or the whole
// new one). Errors name the file.
absl::Status WriteCheckpointFile(const std::string& path, const c10::impl::GenericDict& root);

// Reads a file written by WriteCheckpointFile (or torch.save of a dict
// written the same way) and checks its format, version and kind.
// NotFound for a missing file; InvalidArgument naming the file for anything
// else that is not such a checkpoint of `kind`.
absl::StatusOr<c10::impl::GenericDict> ReadCheckpointFile(const std::string& path,
                                                          absl::string_view kind);

// The module's parameters and buffers by their names (torchvision's for
// Sophon's models), detached CPU copies, contiguous: model.state_dict().
c10::impl::GenericDict StateDict(const torch::nn::Module& module);

// Copies `state` into the module's parameters and buffers (on whatever
// device they are). Every name must be there with the module's shape and
// element type, and no other: InvalidArgument naming `where` and the tensor
// otherwise, with nothing changed.
absl::Status LoadStateDict(const c10::IValue& state, const torch::nn::Module& module,
                           absl::string_view where);
// The checks of LoadStateDict without the copy: (the module's tensor, the
// saved one) for its parameters, then its buffers, in their order.
absl::StatusOr<std::vector<std::pair<at::Tensor, at::Tensor>>> MatchStateDict(
    const c10::IValue& state, const torch::nn::Module& module, absl::string_view where);

// "[2, 3]": a tensor's shape in errors.
std::string TensorShapeString(const at::Tensor& t);

// Typed reads of a checkpoint dict's entries: InvalidArgument naming `where`
// and the key when it is missing or of another type.
absl::StatusOr<c10::IValue> Entry(const c10::impl::GenericDict& dict, const std::string& key,
                                  absl::string_view where);
absl::StatusOr<int64_t> IntEntry(const c10::impl::GenericDict& dict, const std::string& key,
                                 absl::string_view where);
absl::StatusOr<std::string> StringEntry(const c10::impl::GenericDict& dict,
                                        const std::string& key, absl::string_view where);
absl::StatusOr<bool> BoolEntry(const c10::impl::GenericDict& dict, const std::string& key,
                               absl::string_view where);
absl::StatusOr<at::Tensor> TensorEntry(const c10::impl::GenericDict& dict, const std::string& key,
                                       absl::string_view where);
absl::StatusOr<c10::impl::GenericDict> DictEntry(const c10::impl::GenericDict& dict,
                                                 const std::string& key, absl::string_view where);

}  // namespace sophon

#endif  // SOPHON_MODEL_CHECKPOINT_FILE_H_
