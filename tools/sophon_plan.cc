// sophon-plan: what-if planning from a profile. For each fixed mode and each
// planner it prints the predicted epoch time, the bytes on the wire, the
// bottleneck resource, the samples at each stage and the lower bound; with
// --sweep it tabulates and plots them over bandwidths and storage CPU counts.
#include <cstdio>
#include <fstream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "sophon/base/status_macros.h"
#include "sophon/cli/cli.h"
#include "sophon/cli/log_level.h"
#include "sophon/planning/plan_report.h"
#include "sophon/planning/what_if.h"
#include "tools/plot_script.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, profile, "",
          "Profile folder, or file: Sophon's sample_profile.csv or the original SOPHON "
          "prep_sizes.csv. Required.");
ABSL_FLAG(std::string, times, "",
          "Original SOPHON prep_times.csv for a prep_sizes.csv profile. Default: the "
          "prep_times.csv beside it if any, else --times-profile, else the built-in model.");
ABSL_FLAG(std::string, times_profile, "",
          "A profile with measured times (folder or file) whose fitted times model fills the "
          "times of a sizes-only profile. Default: none (built-in model).");
ABSL_FLAG(int, crop_size, 0,
          "Crop size S of an original SOPHON profile; 0 infers it from its sizes. Default 0.");
ABSL_FLAG(double, net_bw, 500, "Network bandwidth in Mbit/s (10^6 bits/s). Default 500.");
ABSL_FLAG(double, remote_cpus, 4,
          "Storage node prep workers (sophon-server --prep-workers). Default 4.");
ABSL_FLAG(double, workers, 2, "Training node prep workers (sophon-train --workers). Default 2.");
ABSL_FLAG(double, remote_speed, 0,
          "Storage node CPU seconds per training node CPU second; 0 takes the profile's "
          "server_speed (1 when it has none). Default 0.");
ABSL_FLAG(double, recv_ns_per_byte, 0,
          "Training node CPU ns per byte received (sophon-train measures it; about 1 on the "
          "reference machine). Default 0 (ignored).");
ABSL_FLAG(double, read_ns_per_byte, 0,
          "Storage node ns per byte of file read, charged to its CPUs for every sample. "
          "Default 0 (ignored).");
ABSL_FLAG(double, send_ns_per_byte, 0,
          "Storage node CPU ns per byte sent, charged to its CPUs. Default 0 (ignored).");
ABSL_FLAG(double, gpu_batch_seconds, 0,
          "Trainer step time per batch in seconds; 0: the GPU never limits. Default 0.");
ABSL_FLAG(int, batch_size, 256, "Samples per batch. Default 256.");
ABSL_FLAG(bool, json, false, "Print JSON instead of the table. Default false.");
ABSL_FLAG(bool, sweep, false,
          "Also plan every --sweep-net-bw x --sweep-remote-cpus pair and write PREFIX.csv and "
          "PREFIX.png. Default false.");
ABSL_FLAG(std::string, sweep_out, "sophon-sweep",
          "PREFIX of the sweep files. Default "
          "sophon-sweep.");
ABSL_FLAG(sophon::CommaList, sweep_net_bw,
          sophon::CommaList({"50", "100", "200", "500", "1000", "2000", "5000", "10000"}),
          "Bandwidths of the sweep, Mbit/s. Default 50,100,200,500,1000,2000,5000,10000.");
ABSL_FLAG(sophon::CommaList, sweep_remote_cpus, sophon::CommaList({"1", "2", "4", "8", "16"}),
          "Storage CPU counts of the sweep. Default 1,2,4,8,16.");
ABSL_FLAG(std::string, plot_script, "tools/plot_sweep.py",
          "The sweep plotter; empty skips the PNG. Default tools/plot_sweep.py (run from the "
          "repository root).");
ABSL_FLAG(std::string, python, "/usr/bin/python3",
          "Python with matplotlib for the plot. Default /usr/bin/python3.");
ABSL_FLAG(int, servers, 1,
          "Storage servers to plan over. With more than one, each gets --net-bw and "
          "--remote-cpus (or its entry of --server-net-bw / --server-remote-cpus) and the "
          "training node's side is shared. Default 1.");
ABSL_FLAG(std::string, layout, "sharded",
          "With --servers > 1: sharded (the profile's samples split into equal contiguous "
          "shards, one per server) or replicated (every server holds every sample). Default "
          "sharded.");
ABSL_FLAG(sophon::CommaList, server_net_bw, sophon::CommaList(),
          "With --servers > 1: each server's link in Mbit/s, one value per server. Default: "
          "--net-bw for each.");
ABSL_FLAG(sophon::CommaList, server_remote_cpus, sophon::CommaList(),
          "With --servers > 1: each server's prep CPUs, one value per server. Default: "
          "--remote-cpus for each.");
ABSL_FLAG(double, ingress_bw, 0,
          "With --servers > 1: the training node's ingress in Mbit/s, shared by all servers; 0 "
          "= not a limit. Default 0.");
ABSL_FLAG(std::string, stages, "all",
          "The stages a plan may choose, comma-separated from raw, jpeg_crop, cropped, flipped, "
          "tensor (must include raw), or all; only those the profile measured count (a "
          "published SOPHON profile has no jpeg_crop). Default all.");
ABSL_FLAG(bool, expected_crops, false,
          "Plan as sophon-train does: each sample's lossless crop (its bytes and the times that "
          "depend on it) at the dataset's average crop, not at the profiled epoch's crop. "
          "Default false.");
ABSL_FLAG(bool, held_here, false,
          "Every sample in the training node's cache (--local-cache-bytes holding the whole set): "
          "RAW crosses no link; the other stages are still storage node jobs. Default false.");
ABSL_FLAG(double, held_read_ns_per_byte, 0,
          "With --held-here: training node CPU ns per byte to take a file out of its cache. "
          "Default 0.");

namespace {

absl::Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.flush();
  if (!out) return absl::PermissionDeniedError("cannot write " + path);
  return absl::OkStatus();
}

absl::StatusOr<sophon::WhatIfOptions> OptionsFromFlags() {
  sophon::WhatIfOptions o;
  o.source.path = absl::GetFlag(FLAGS_profile);
  o.source.times_path = absl::GetFlag(FLAGS_times);
  o.source.times_profile = absl::GetFlag(FLAGS_times_profile);
  o.source.crop_size = absl::GetFlag(FLAGS_crop_size);
  absl::StatusOr<sophon::StageSet> stages = sophon::ParseStageSet(absl::GetFlag(FLAGS_stages));
  if (!stages.ok()) return sophon::FlagError("--stages", stages.status());
  o.stages = *stages;
  o.net_mbit = absl::GetFlag(FLAGS_net_bw);
  o.remote_cpus = absl::GetFlag(FLAGS_remote_cpus);
  o.workers = absl::GetFlag(FLAGS_workers);
  o.remote_speed = absl::GetFlag(FLAGS_remote_speed);
  o.recv_ns_per_byte = absl::GetFlag(FLAGS_recv_ns_per_byte);
  o.read_ns_per_byte = absl::GetFlag(FLAGS_read_ns_per_byte);
  o.send_ns_per_byte = absl::GetFlag(FLAGS_send_ns_per_byte);
  o.gpu_batch_seconds = absl::GetFlag(FLAGS_gpu_batch_seconds);
  o.batch_size = absl::GetFlag(FLAGS_batch_size);
  o.servers = absl::GetFlag(FLAGS_servers);
  o.layout = absl::GetFlag(FLAGS_layout);
  if (const sophon::CommaList& list = absl::GetFlag(FLAGS_server_net_bw); !list.items.empty()) {
    ASSIGN_OR_RETURN(o.server_net_mbit, list.PerModel("--server-net-bw", o.servers, "--servers"));
  }
  if (const sophon::CommaList& list = absl::GetFlag(FLAGS_server_remote_cpus);
      !list.items.empty()) {
    ASSIGN_OR_RETURN(o.server_remote_cpus,
                     list.PerModel("--server-remote-cpus", o.servers, "--servers"));
  }
  o.ingress_mbit = absl::GetFlag(FLAGS_ingress_bw);
  o.expected_crops = absl::GetFlag(FLAGS_expected_crops);
  o.held_here = absl::GetFlag(FLAGS_held_here);
  o.held_read_ns_per_byte = absl::GetFlag(FLAGS_held_read_ns_per_byte);
  return o;
}

absl::Status Run() {
  ASSIGN_OR_RETURN(const sophon::WhatIfOptions options, OptionsFromFlags());
  ASSIGN_OR_RETURN(const sophon::WhatIf what_if, sophon::PlanWhatIf(options));
  const std::string report = sophon::FormatWhatIf(what_if, absl::GetFlag(FLAGS_json));
  std::fputs(report.c_str(), stdout);
  if (!absl::GetFlag(FLAGS_sweep) || options.servers > 1) return absl::OkStatus();

  sophon::SweepOptions sweep;
  ASSIGN_OR_RETURN(sweep.net_mbit,
                   absl::GetFlag(FLAGS_sweep_net_bw).Numbers("--sweep-net-bw"));
  ASSIGN_OR_RETURN(
      sweep.remote_cpus,
      absl::GetFlag(FLAGS_sweep_remote_cpus).Numbers("--sweep-remote-cpus"));
  ASSIGN_OR_RETURN(const std::string csv,
                   sophon::SweepCsv(what_if.profile, what_if.resources, sweep));
  const std::string prefix = absl::GetFlag(FLAGS_sweep_out);
  RETURN_IF_ERROR(WriteFile(prefix + ".csv", csv));
  spdlog::info("sweep: wrote {}.csv", prefix);
  if (const std::string script = absl::GetFlag(FLAGS_plot_script); !script.empty()) {
    RETURN_IF_ERROR(sophon::RunPlotScript(absl::GetFlag(FLAGS_python), script, prefix + ".csv",
                                          prefix + ".png"));
    spdlog::info("sweep: wrote {}.png", prefix);
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  // accepts --net-bw and --net_bw
  sophon::ParseProgramFlags(
      argc, argv,
      "What-if planning from a profile.\nUsage: sophon-plan --profile=DIR|CSV [--net-bw=500] "
      "[--remote-cpus=4] [--workers=2] [--gpu-batch-seconds=0] [--json] [--sweep]");
  spdlog::set_default_logger(spdlog::stderr_color_mt("sophon-plan"));  // stdout is the report
  if (absl::Status s = sophon::ApplyLogLevelFlag(); !s.ok()) {
    return sophon::FailProgram("sophon-plan", s, {});
  }
  if (absl::Status s = Run(); !s.ok()) {
    return sophon::FailProgram("sophon-plan", s,
                               {{"Resources.net_bytes_per_s", "--net-bw"},
                                {"Resources.remote_cpus", "--remote-cpus"},
                                {"Resources.remote_speed", "--remote-speed"},
                                {"Resources.local_cpus", "--workers"},
                                {"Resources.gpu_seconds_per_batch", "--gpu-batch-seconds"},
                                {"Resources.batch_size", "--batch-size"},
                                {"ClusterResources.ingress_bytes_per_s", "--ingress-bw"},
                                {"WhatIfOptions.source.path", "--profile"},
                                {"WhatIfOptions.servers", "--servers"},
                                {"WhatIfOptions.layout", "--layout"},
                                {"WhatIfOptions.ingress_mbit", "--ingress-bw"},
                                {"ProfileSource.times_profile", "--times-profile"},
                                {"ProfileSource.times_path", "--times"}});
  }
  return 0;
}
