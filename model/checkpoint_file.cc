#include "model/checkpoint_file.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/import_read.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <torch/serialize.h>

#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <memory>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "sophon/base/atomic_file.h"

namespace sophon {
namespace {

// The first line of a LibTorch error (the rest is a backtrace).
std::string FirstLine(const std::exception& e) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  const std::string text = c10_error != nullptr ? c10_error->what_without_backtrace() : e.what();
  return std::string(text.substr(0, text.find('\n')));
}

// The process's umask (/proc/self/status; umask(2) cannot read it without
// changing it); 022 where that file does not say.
mode_t CurrentUmask() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (absl::StartsWith(line, "Umask:")) {
      return static_cast<mode_t>(std::strtoul(line.c_str() + 6, nullptr, 8));
    }
  }
  return 022;
}

absl::Status MissingFile(const std::string& path) {
  return absl::NotFoundError(absl::StrCat("cannot open the checkpoint '", path, "'"));
}

}  // namespace

namespace {

// The zip of `path`, opened; errors name the file.
absl::StatusOr<std::unique_ptr<caffe2::serialize::PyTorchStreamReader>> OpenZip(
    const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return MissingFile(path);
  char magic[4] = {};
  in.read(magic, sizeof(magic));
  if (in.gcount() != sizeof(magic) || std::memcmp(magic, "PK\x03\x04", sizeof(magic)) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", path, "' is not a checkpoint: not a zip archive (torch.save's format)"));
  }
  try {
    return std::make_unique<caffe2::serialize::PyTorchStreamReader>(path);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("'", path, "' is not a checkpoint: ",
                                                   FirstLine(e), " (truncated or damaged?)"));
  }
}

absl::StatusOr<CheckpointFormat> FormatOf(caffe2::serialize::PyTorchStreamReader& zip,
                                          const std::string& path) {
  std::vector<std::string> records;
  try {
    records = zip.getAllRecords();
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' is not a checkpoint: ", FirstLine(e)));
  }
  bool pickle = false;
  for (const std::string& record : records) {
    if (record == "constants.pkl" || absl::StartsWith(record, "code/")) {
      return CheckpointFormat::kModuleArchive;
    }
    pickle = pickle || record == "data.pkl";
  }
  if (!pickle) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' is not a checkpoint: a zip archive without data.pkl"));
  }
  return CheckpointFormat::kPickled;
}

}  // namespace

absl::StatusOr<CheckpointFormat> DetectCheckpointFormat(const std::string& path) {
  absl::StatusOr<std::unique_ptr<caffe2::serialize::PyTorchStreamReader>> zip = OpenZip(path);
  if (!zip.ok()) return zip.status();
  return FormatOf(**zip, path);
}

std::string TensorShapeString(const at::Tensor& t) {
  return absl::StrCat("[", absl::StrJoin(t.sizes(), ", "), "]");
}

c10::impl::GenericDict NewCheckpointDict() {
  return c10::impl::GenericDict(c10::StringType::get(), c10::AnyType::get());
}

c10::impl::GenericDict NewCheckpointRoot(absl::string_view kind) {
  c10::impl::GenericDict root = NewCheckpointDict();
  root.insert("format", std::string(kCheckpointFormat));
  root.insert("version", kCheckpointVersion);
  root.insert("kind", std::string(kind));
  return root;
}

absl::Status WriteCheckpointFile(const std::string& path, const c10::impl::GenericDict& root) {
  absl::StatusOr<std::unique_ptr<AtomicFileWriter>> file = AtomicFileWriter::Open(path);
  if (!file.ok()) return file.status();
  // A checkpoint gets the mode of any file this process creates (a backbone is
  // often read by a server running as another user), not the temporary
  // file's 0600.
  if (chmod((*file)->temp_path().c_str(), 0666 & ~CurrentUmask()) != 0) {
    return absl::InternalError(absl::StrCat("cannot set the mode of '", (*file)->temp_path(),
                                            "': ", std::strerror(errno)));
  }
  absl::Status written;
  try {
    std::vector<char> pickle;
    // No type tags: torch.load's weights_only reader refuses their
    // torch.jit._pickle.restore_type_tag.
    torch::jit::Pickler pickler(
        [&](const char* data, size_t size) { pickle.insert(pickle.end(), data, data + size); },
        /*tensor_table=*/nullptr, /*type_renamer=*/nullptr, /*memoized_class_types=*/nullptr,
        /*get_tensor_id=*/nullptr, /*tag_aggregates=*/false);
    pickler.protocol();
    pickler.pushIValue(c10::IValue(root));
    pickler.stop();
    caffe2::serialize::PyTorchStreamWriter zip([&](const void* data, size_t size) -> size_t {
      if (!written.ok()) return 0;
      written = (*file)->Append(data, size);
      return written.ok() ? size : 0;
    });
    torch::jit::writeArchiveAndTensors("data", pickle.data(), pickle.size(),
                                       pickler.tensorData(), zip);
    zip.writeEndOfFile();
  } catch (const std::exception& e) {
    if (written.ok()) {
      return absl::InternalError(
          absl::StrCat("writing the checkpoint '", path, "': ", FirstLine(e)));
    }
  }
  if (!written.ok()) {
    return absl::Status(written.code(), absl::StrCat("writing the checkpoint '", path,
                                                     "': ", written.message()));
  }
  return (*file)->Commit();
}

absl::StatusOr<c10::impl::GenericDict> ReadCheckpointFile(const std::string& path,
                                                          absl::string_view kind) {
  absl::StatusOr<std::unique_ptr<caffe2::serialize::PyTorchStreamReader>> zip = OpenZip(path);
  if (!zip.ok()) return zip.status();
  absl::StatusOr<CheckpointFormat> format = FormatOf(**zip, path);
  if (!format.ok()) return format.status();
  if (*format != CheckpointFormat::kPickled) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", path, "' is in LibTorch's module archive format, not torch.save's"));
  }
  c10::IValue root;
  try {
    // What torch::pickle_load does, reading the file in place of a copy of it.
    root = torch::jit::readArchiveAndTensors("data", /*pickle_prefix=*/"", /*tensor_prefix=*/"",
                                             /*type_resolver=*/{}, /*obj_loader=*/{},
                                             /*device=*/{}, **zip);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' cannot be read as a checkpoint: ", FirstLine(e)));
  }
  const std::string where = absl::StrCat("checkpoint '", path, "'");
  if (!root.isGenericDict()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' is not a Sophon checkpoint: its root is a ",
                     root.tagKind(), ", not a dict"));
  }
  c10::impl::GenericDict dict = root.toGenericDict();
  absl::StatusOr<std::string> saved_format = StringEntry(dict, "format", where);
  if (!saved_format.ok() || *saved_format != kCheckpointFormat) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", path, "' is not a Sophon checkpoint (no \"format\": \"", kCheckpointFormat,
        "\" entry)"));
  }
  absl::StatusOr<int64_t> version = IntEntry(dict, "version", where);
  if (!version.ok()) return version.status();
  if (*version != kCheckpointVersion) {
    return absl::InvalidArgumentError(absl::StrCat(where, " has format version ", *version,
                                                   ", this program reads ",
                                                   kCheckpointVersion));
  }
  absl::StatusOr<std::string> saved_kind = StringEntry(dict, "kind", where);
  if (!saved_kind.ok()) return saved_kind.status();
  if (*saved_kind != kind) {
    return absl::InvalidArgumentError(absl::StrCat("'", path, "' is not a ", kind,
                                                   " checkpoint: it is a ", *saved_kind,
                                                   " checkpoint"));
  }
  return dict;
}

c10::impl::GenericDict StateDict(const torch::nn::Module& module) {
  c10::impl::GenericDict state(c10::StringType::get(), c10::TensorType::get());
  const auto add = [&](const torch::OrderedDict<std::string, at::Tensor>& tensors) {
    for (const auto& item : tensors) {
      state.insert(item.key(), item.value().detach().to(torch::kCPU).contiguous());
    }
  };
  add(module.named_parameters());
  add(module.named_buffers());
  return state;
}

absl::StatusOr<std::vector<std::pair<at::Tensor, at::Tensor>>> MatchStateDict(
    const c10::IValue& state, const torch::nn::Module& module, absl::string_view where) {
  if (!state.isGenericDict()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": the model's state is a ", state.tagKind(), ", not a dict"));
  }
  const c10::impl::GenericDict saved = state.toGenericDict();
  std::vector<std::pair<at::Tensor, at::Tensor>> copies;  // (live, saved)
  const auto match = [&](const torch::OrderedDict<std::string, at::Tensor>& tensors) {
    for (const auto& item : tensors) {
      const auto found = saved.find(item.key());
      if (found == saved.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, " has no tensor '", item.key(), "'"));
      }
      if (!found->value().isTensor()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": '", item.key(), "' is not a tensor"));
      }
      const at::Tensor& t = found->value().toTensor();
      const at::Tensor& ours = item.value();
      if (!t.sizes().equals(ours.sizes()) || t.scalar_type() != ours.scalar_type()) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": tensor '", item.key(), "' is ", TensorShapeString(t), " ",
            c10::toString(t.scalar_type()), ", the model's is ", TensorShapeString(ours), " ",
            c10::toString(ours.scalar_type())));
      }
      copies.emplace_back(ours, t);
    }
    return absl::OkStatus();
  };
  if (absl::Status s = match(module.named_parameters()); !s.ok()) return s;
  if (absl::Status s = match(module.named_buffers()); !s.ok()) return s;
  if (copies.size() != saved.size()) {
    std::vector<std::string> extra;
    for (const auto& item : saved) {
      const std::string name = item.key().isString() ? item.key().toStringRef() : "(not a name)";
      if (module.named_parameters().find(name) == nullptr &&
          module.named_buffers().find(name) == nullptr) {
        extra.push_back(name);
      }
    }
    return absl::InvalidArgumentError(absl::StrCat(where, " holds tensors this model has not: ",
                                                   absl::StrJoin(extra, ", ")));
  }
  return copies;
}

absl::Status LoadStateDict(const c10::IValue& state, const torch::nn::Module& module,
                           absl::string_view where) {
  absl::StatusOr<std::vector<std::pair<at::Tensor, at::Tensor>>> copies =
      MatchStateDict(state, module, where);
  if (!copies.ok()) return copies.status();
  torch::NoGradGuard no_grad;
  for (auto& [live, from] : *copies) live.copy_(from);
  return absl::OkStatus();
}

absl::StatusOr<c10::IValue> Entry(const c10::impl::GenericDict& dict, const std::string& key,
                                  absl::string_view where) {
  const auto found = dict.find(key);
  if (found == dict.end()) {
    return absl::InvalidArgumentError(absl::StrCat(where, " has no \"", key, "\" entry"));
  }
  return found->value();
}

namespace {

absl::Status WrongType(const std::string& key, absl::string_view where, const c10::IValue& v,
                       absl::string_view expected) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": \"", key, "\" is a ", v.tagKind(),
                                                 ", not ", expected));
}

}  // namespace

absl::StatusOr<int64_t> IntEntry(const c10::impl::GenericDict& dict, const std::string& key,
                                 absl::string_view where) {
  absl::StatusOr<c10::IValue> v = Entry(dict, key, where);
  if (!v.ok()) return v.status();
  if (!v->isInt()) return WrongType(key, where, *v, "an int");
  return v->toInt();
}

absl::StatusOr<std::string> StringEntry(const c10::impl::GenericDict& dict,
                                        const std::string& key, absl::string_view where) {
  absl::StatusOr<c10::IValue> v = Entry(dict, key, where);
  if (!v.ok()) return v.status();
  if (!v->isString()) return WrongType(key, where, *v, "a string");
  return v->toStringRef();
}

absl::StatusOr<bool> BoolEntry(const c10::impl::GenericDict& dict, const std::string& key,
                               absl::string_view where) {
  absl::StatusOr<c10::IValue> v = Entry(dict, key, where);
  if (!v.ok()) return v.status();
  if (!v->isBool()) return WrongType(key, where, *v, "a bool");
  return v->toBool();
}

absl::StatusOr<at::Tensor> TensorEntry(const c10::impl::GenericDict& dict, const std::string& key,
                                       absl::string_view where) {
  absl::StatusOr<c10::IValue> v = Entry(dict, key, where);
  if (!v.ok()) return v.status();
  if (!v->isTensor()) return WrongType(key, where, *v, "a tensor");
  return v->toTensor();
}

absl::StatusOr<c10::impl::GenericDict> DictEntry(const c10::impl::GenericDict& dict,
                                                 const std::string& key, absl::string_view where) {
  absl::StatusOr<c10::IValue> v = Entry(dict, key, where);
  if (!v.ok()) return v.status();
  if (!v->isGenericDict()) return WrongType(key, where, *v, "a dict");
  return v->toGenericDict();
}

}  // namespace sophon
