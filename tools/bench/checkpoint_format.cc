// sophon-bench-checkpoint: a model checkpoint in torch.save's format (what
// Sophon writes, model/checkpoint_file.h) against LibTorch's module archive
// (what earlier versions wrote, model/module_archive.h): file size, save time
// and load time, the two written and read in turn --repeats times.
//
// The torch.save file is written through AtomicFileWriter (fsync of the file
// and its folder before it counts as saved); the archive as earlier versions
// did (a temporary file renamed, no fsync). --sync-archive adds an fsync of
// the archive so that both pay for durability.
//
// Output: a Markdown table on stdout (medians and the new/old ratio).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "model/models.h"
#include "model/module_archive.h"
#include "sophon/cli/cli.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, arch, "resnet50", "Architecture of the model written. Default resnet50.");
ABSL_FLAG(int, num_classes, 1000, "Its class count. Default 1000.");
ABSL_FLAG(int, repeats, 5, "Saves and loads of each format. Default 5.");
ABSL_FLAG(std::string, dir, "/tmp", "Folder for the two files (removed at the end). Default /tmp.");
ABSL_FLAG(bool, sync_archive, false,
          "fsync the archive after it is written (the torch.save file always is). Default false.");

namespace {

double Seconds(const std::function<bool()>& run) {
  const auto start = std::chrono::steady_clock::now();
  if (!run()) return -1;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

long FileSize(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0 ? static_cast<long>(info.st_size) : -1;
}

bool Fsync(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) return false;
  const bool ok = fsync(fd) == 0;
  close(fd);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  sophon::ParseProgramFlags(argc, argv,
                            "Compares the size, save and load time of a model checkpoint in "
                            "torch.save's format and in LibTorch's module archive.");
  const std::string arch = absl::GetFlag(FLAGS_arch);
  const int classes = absl::GetFlag(FLAGS_num_classes);
  const int repeats = absl::GetFlag(FLAGS_repeats);
  if (repeats < 1) {
    spdlog::error("--repeats must be >= 1");
    return 2;
  }
  absl::StatusOr<sophon::Classifier> model = sophon::MakeModel(arch, classes);
  absl::StatusOr<sophon::Classifier> into = sophon::MakeModel(arch, classes);
  if (!model.ok() || !into.ok()) {
    spdlog::error("{}", (model.ok() ? into : model).status().ToString());
    return 2;
  }
  const std::string pickled = absl::GetFlag(FLAGS_dir) + "/sophon-bench-checkpoint.pt";
  const std::string archive = absl::GetFlag(FLAGS_dir) + "/sophon-bench-checkpoint.archive.pt";
  std::vector<double> save_new, save_old, load_new, load_old;
  for (int i = 0; i < repeats; ++i) {
    const auto fail = [](const absl::Status& s) {
      spdlog::error("{}", s.ToString());
      return false;
    };
    save_old.push_back(Seconds([&] {
      absl::Status s = sophon::WriteModuleArchive(*model, arch, classes, archive);
      if (s.ok() && absl::GetFlag(FLAGS_sync_archive) && !Fsync(archive)) {
        s = absl::InternalError("fsync of " + archive);
      }
      return s.ok() || fail(s);
    }));
    save_new.push_back(Seconds([&] {
      absl::Status s = sophon::SaveModel(*model, arch, classes, pickled);
      return s.ok() || fail(s);
    }));
    load_old.push_back(Seconds([&] {
      absl::Status s = sophon::LoadModel(archive, arch, classes, *into);
      return s.ok() || fail(s);
    }));
    load_new.push_back(Seconds([&] {
      absl::Status s = sophon::LoadModel(pickled, arch, classes, *into);
      return s.ok() || fail(s);
    }));
    if (save_old.back() < 0 || save_new.back() < 0 || load_old.back() < 0 ||
        load_new.back() < 0) {
      return 1;
    }
  }
  const long size_new = FileSize(pickled), size_old = FileSize(archive);
  std::printf("%s, %d classes, %d repeats (medians)%s\n\n", arch.c_str(), classes, repeats,
              absl::GetFlag(FLAGS_sync_archive) ? ", both fsynced" : "");
  std::printf("| | torch.save format | module archive | new / old |\n|---|---|---|---|\n");
  std::printf("| size (bytes) | %ld | %ld | %.3f |\n", size_new, size_old,
              static_cast<double>(size_new) / static_cast<double>(size_old));
  std::printf("| save (s) | %.3f | %.3f | %.2f |\n", Median(save_new), Median(save_old),
              Median(save_new) / Median(save_old));
  std::printf("| load (s) | %.3f | %.3f | %.2f |\n", Median(load_new), Median(load_old),
              Median(load_new) / Median(load_old));
  std::remove(pickled.c_str());
  std::remove(archive.c_str());
  return 0;
}
