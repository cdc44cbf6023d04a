#include "tools/plot_script.h"

#include <spawn.h>
#include <sys/wait.h>

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"

extern char** environ;

namespace sophon {

absl::Status RunPlotScript(const std::string& python, const std::string& script,
                           const std::string& csv_path, const std::string& png_path) {
  std::vector<std::string> args = {python, script, csv_path, png_path};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const std::string command = absl::StrCat(python, " ", script, " ", csv_path, " ", png_path);
  if (int err = posix_spawn(&pid, python.c_str(), nullptr, nullptr, argv.data(), environ);
      err != 0) {
    return absl::InternalError(absl::StrCat("cannot run '", command, "': ", std::strerror(err)));
  }
  int status = 0;
  if (waitpid(pid, &status, 0) < 0) {
    return absl::InternalError(absl::StrCat("waiting for '", command, "' failed"));
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(absl::StrCat("'", command, "' failed (exit status ",
                                            WIFEXITED(status) ? WEXITSTATUS(status) : -1,
                                            "); is python3-matplotlib installed?"));
  }
  return absl::OkStatus();
}

}  // namespace sophon
