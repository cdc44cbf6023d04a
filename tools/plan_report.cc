#include "tools/plan_report.h"

#include <spawn.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "sophon/planning/profile_csv.h"
#include "sophon/base/status_macros.h"

extern char** environ;

namespace sophon {
namespace {

std::string Seconds(double s) {
  return std::isfinite(s) ? absl::StrFormat("%.2f", s) : std::string("inf");
}

std::string JsonNumber(double v) {
  return std::isfinite(v) ? absl::StrFormat("%.6g", v) : std::string("null");
}

std::string JsonString(absl::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c < 0x20) {
      absl::StrAppendFormat(&out, "\\u%04x", c);
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  return out + "\"";
}

int64_t Batches(const Resources& r, size_t samples) {
  return (static_cast<int64_t>(samples) + r.batch_size - 1) / r.batch_size;
}

}  // namespace

std::string FormatPlanTable(const DatasetProfile& profile, const Resources& resources,
                            const std::vector<PlanResult>& plans) {
  std::string out;
  absl::StrAppendFormat(&out, "profile    %s: %d samples, S=%d, fingerprint %s\n", profile.dataset,
                        profile.samples.size(), profile.crop_size,
                        profile.fingerprint ? FingerprintHex(profile.fingerprint) : "unknown");
  absl::StrAppendFormat(
      &out, "op times   %s\n",
      profile.times_detail.empty() ? TimesSourceName(profile.times_source) : profile.times_detail);
  absl::StrAppendFormat(
      &out,
      "resources  network %.6g Mbit/s; storage node %.6g CPUs at %.3g s per client s, "
      "%.3g ns/byte read, %.3g ns/byte sent; training node %.6g workers, %.3g ns/byte "
      "received; GPU %.6g s/batch x %d batches of %d\n",
      resources.net_bytes_per_s * 8 / 1e6, resources.remote_cpus, resources.remote_speed,
      resources.remote_seconds_per_raw_byte * 1e9, resources.remote_seconds_per_wire_byte * 1e9,
      resources.local_cpus, resources.local_seconds_per_wire_byte * 1e9,
      resources.gpu_seconds_per_batch,
      Batches(resources, profile.samples.size()), resources.batch_size);
  if (!plans.empty()) {
    absl::StrAppendFormat(&out,
                          "lower bound %s s (LP relaxation over every stage of every sample, "
                          "and the GPU time)\n",
                          Seconds(plans.front().lower_bound_s));
  }
  absl::StrAppendFormat(&out, "\n%-10s %10s %10s %10s %10s %10s %9s %-11s %7s %7s %7s %7s %10s\n",
                        "planner", "epoch_s", "net_s", "remote_s", "local_s", "gpu_s", "wire_GB",
                        "bottleneck", "raw", "cropped", "flipped", "tensor", "bound_s");
  for (const PlanResult& p : plans) {
    const PlanCost& c = p.cost;
    absl::StrAppendFormat(&out, "%-10s %10s %10s %10s %10s %10s %9.3f %-11s %7d %7d %7d %7d %10s\n",
                          PlannerKindName(p.kind), Seconds(c.epoch_s), Seconds(c.net_s),
                          Seconds(c.remote_s), Seconds(c.local_s), Seconds(c.gpu_s),
                          static_cast<double>(c.wire_bytes) / 1e9, ResourceName(c.bottleneck),
                          c.samples_per_stage[0], c.samples_per_stage[1], c.samples_per_stage[2],
                          c.samples_per_stage[3], Seconds(p.lower_bound_s));
  }
  return out;
}

std::string FormatPlanJson(const DatasetProfile& profile, const Resources& resources,
                           const std::vector<PlanResult>& plans) {
  std::string out = "{\n";
  absl::StrAppend(&out, "  \"profile\": {\"dataset\": ", JsonString(profile.dataset),
                  ", \"samples\": ", profile.samples.size(), ", \"crop_size\": ", profile.crop_size,
                  ", \"fingerprint\": ", JsonString(FingerprintHex(profile.fingerprint)),
                  ", \"times\": ", JsonString(TimesSourceName(profile.times_source)),
                  ", \"times_detail\": ", JsonString(profile.times_detail), "},\n");
  absl::StrAppend(&out, "  \"resources\": {\"net_mbit_per_s\": ",
                  JsonNumber(resources.net_bytes_per_s * 8 / 1e6),
                  ", \"remote_cpus\": ", JsonNumber(resources.remote_cpus),
                  ", \"remote_speed\": ", JsonNumber(resources.remote_speed),
                  ", \"remote_read_ns_per_byte\": ",
                  JsonNumber(resources.remote_seconds_per_raw_byte * 1e9),
                  ", \"remote_send_ns_per_byte\": ",
                  JsonNumber(resources.remote_seconds_per_wire_byte * 1e9),
                  ", \"local_cpus\": ", JsonNumber(resources.local_cpus),
                  ", \"local_recv_ns_per_byte\": ",
                  JsonNumber(resources.local_seconds_per_wire_byte * 1e9),
                  ", \"gpu_seconds_per_batch\": ", JsonNumber(resources.gpu_seconds_per_batch),
                  ", \"batch_size\": ", resources.batch_size, "},\n");
  absl::StrAppend(&out, "  \"plans\": [");
  for (size_t i = 0; i < plans.size(); ++i) {
    const PlanResult& p = plans[i];
    const PlanCost& c = p.cost;
    absl::StrAppend(
        &out, i ? ",\n    " : "\n    ", "{\"planner\": ", JsonString(PlannerKindName(p.kind)),
        ", \"epoch_s\": ", JsonNumber(c.epoch_s), ", \"net_s\": ", JsonNumber(c.net_s),
        ", \"remote_s\": ", JsonNumber(c.remote_s), ", \"local_s\": ", JsonNumber(c.local_s),
        ", \"gpu_s\": ", JsonNumber(c.gpu_s), ", \"wire_bytes\": ", c.wire_bytes,
        ", \"bottleneck\": ", JsonString(ResourceName(c.bottleneck)), ", \"samples_per_stage\": {");
    for (int k = 0; k < kNumStages; ++k) {
      absl::StrAppend(&out, k ? ", " : "", JsonString(StageName(static_cast<Stage>(k))), ": ",
                      c.samples_per_stage[k]);
    }
    absl::StrAppend(&out, "}, \"lower_bound_s\": ", JsonNumber(p.lower_bound_s), "}");
  }
  absl::StrAppend(&out, "\n  ]\n}\n");
  return out;
}

absl::StatusOr<std::string> SweepCsv(const DatasetProfile& profile, const Resources& base,
                                     const SweepOptions& options) {
  std::string out =
      "net_mbit,remote_cpus,planner,epoch_s,net_s,remote_s,local_s,gpu_s,wire_bytes,"
      "bottleneck,raw,cropped,flipped,tensor,lower_bound_s\n";
  const std::vector<uint64_t> ids = AllSampleIds(profile);
  for (double mbit : options.net_mbit) {
    for (double cpus : options.remote_cpus) {
      Resources r = base;
      r.net_bytes_per_s = MbitToBytesPerSecond(mbit);
      r.remote_cpus = cpus;
      ASSIGN_OR_RETURN(const std::vector<PlanResult> plans, MakeAllPlans(profile, r, ids));
      for (const PlanResult& p : plans) {
        const PlanCost& c = p.cost;
        absl::StrAppendFormat(&out, "%g,%g,%s,%s,%s,%s,%s,%s,%d,%s,%d,%d,%d,%d,%s\n", mbit, cpus,
                              PlannerKindName(p.kind), JsonNumber(c.epoch_s), JsonNumber(c.net_s),
                              JsonNumber(c.remote_s), JsonNumber(c.local_s), JsonNumber(c.gpu_s),
                              c.wire_bytes, ResourceName(c.bottleneck), c.samples_per_stage[0],
                              c.samples_per_stage[1], c.samples_per_stage[2],
                              c.samples_per_stage[3], JsonNumber(p.lower_bound_s));
      }
    }
  }
  return out;
}

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

absl::StatusOr<std::vector<double>> ParseNumberList(const std::string& text,
                                                    const std::string& flag) {
  std::vector<double> values;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    double v = 0;
    if (!absl::SimpleAtod(absl::StripAsciiWhitespace(item), &v) || !std::isfinite(v)) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": '", item, "' is not a number (expected e.g. 50,100,1000)"));
    }
    values.push_back(v);
  }
  if (values.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": give at least one value"));
  }
  return values;
}

}  // namespace sophon
