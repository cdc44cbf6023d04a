// Profiling through the server: the pass that makes a dataset profile when
// none exists (smartoff, --profile-out), and how the storage node's measured
// times are read.
#ifndef SOPHON_CLIENT_OFFLOAD_PROFILE_PASS_H_
#define SOPHON_CLIENT_OFFLOAD_PROFILE_PASS_H_

#include <string>

#include "absl/status/statusor.h"
#include "client/loader/loader.h"
#include "client/loader/sample_client.h"
#include "sophon/planning/profile.h"

namespace sophon {

// A pass through the server: every sample is fetched RAW and run through all
// ops here, timing each (no training); then the same work on
// `speed_probe_samples` samples is done by the server to get its speed factor
// (from its prep workers' wall time, so shared cores count; under a CPU quota
// below the prep worker count, from their CPU time, as the cost model charges
// the quota through the storage CPU count). Sizes of the sized stages follow
// from the crop size.
absl::StatusOr<DatasetProfile> ProfileOverNetwork(SampleClient* client,
                                                  const LoaderOptions& loader_options,
                                                  int speed_probe_samples);

// ProfileOverNetwork, then writes the profile folder `folder`.
absl::Status WriteProfileOverNetwork(SampleClient* client, const LoaderOptions& loader_options,
                                     int speed_probe_samples, const std::string& folder);

// Prep workers sharing a CPU quota smaller than their number are each slowed
// by prep_workers / cpu_limit; the cost model charges the storage node's work
// to min(prep workers, cpu limit) CPUs, so wall times measured on one prep
// worker are scaled by this factor (1 without such a quota).
double StorageWallScale(const ServerManifest& manifest);

// The storage node's time for a sample's ops, without the file read (the cost
// model charges it per byte), from what the server reported (see the
// definition for when it is wall and when CPU time).
double ServerOpSeconds(double wall, double cpu, double read, double wall_scale);

}  // namespace sophon

#endif  // SOPHON_CLIENT_OFFLOAD_PROFILE_PASS_H_
