// Runs the sweep's plotting script for sophon-plan --sweep.
#ifndef SOPHON_TOOLS_PLOT_SCRIPT_H_
#define SOPHON_TOOLS_PLOT_SCRIPT_H_

#include <string>

#include "absl/status/status.h"

namespace sophon {

// Runs `python script csv_path png_path` and waits for it. Internal naming
// the command and its exit status if it fails.
absl::Status RunPlotScript(const std::string& python, const std::string& script,
                           const std::string& csv_path, const std::string& png_path);

}  // namespace sophon

#endif  // SOPHON_TOOLS_PLOT_SCRIPT_H_
