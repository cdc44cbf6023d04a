// What planning needs to know: the per-sample profile (payload bytes at every
// stage, CPU seconds of every op) and the resources an epoch runs on.
// Reading and writing profiles: profile_csv.h (Sophon's format) and
// original_profile.h (the original SOPHON files).
#ifndef SOPHON_PLANNING_PROFILE_H_
#define SOPHON_PLANNING_PROFILE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "sophon/ops/stage.h"

namespace sophon {

// Measured facts about one sample.
struct SampleProfile {
  uint64_t id = 0;             // index in the manifest
  // Payload bytes at every stage; bytes[kFirstStage] is the encoded file. 0
  // for a stage the profile did not measure (not in DatasetProfile.stages:
  // FEATURES without a backbone).
  PerStage<uint64_t> bytes;
  // Thread CPU seconds of each op (stage.h's op table), as the training node
  // runs it.
  OpTimes client;
  // Width * height of the encoded image; 0 when unknown. Only the times model
  // (times_model.h) uses it.
  uint64_t source_pixels = 0;
  // The image's sides in pixels (0 when unknown): with them a planner draws the crop box of
  // any epoch (ops/augment.h).
  uint32_t width = 0;
  uint32_t height = 0;
  // The part of the image (pixel area, in (0, 1]) the crop box of the profiled epoch kept, its
  // mean over the profiled epochs; 0 when unknown. The lossless crop's bytes and the times of
  // the ops that depend on the crop were measured at this part.
  double crop_part = 0;
  // The part of the image's rows down to that box's bottom edge (the rows a lossless crop or
  // a region decode must read), its mean likewise; 0 when unknown.
  double crop_reach = 0;
  // The storage node served it from its sample cache when it was last read
  // (sophon-server --cache-bytes): planned without a read. Not stored in
  // profile files; smartoff sets it from what the servers report.
  bool cached = false;
  // This training node holds the sample's file (its sample cache,
  // sophon-train --local-cache-bytes): planned at RAW it crosses no link and
  // costs the storage node nothing; planned at a later stage it is a job for
  // the storage node as any other. Not stored in profile files; smartoff sets
  // it from the cache before each plan.
  bool held_here = false;
  // With held_here: this node's CPU seconds to take the file out of its
  // cache (the checksum and the copy; a read from local disk), charged to
  // the training node at RAW instead of the link. Not stored in profile files.
  double held_read_seconds = 0;
};

// How a profile's op times were obtained.
enum class TimesSource {
  kMeasured,  // thread CPU time of the real ops
  kModel,     // predicted from sizes by a TimesModel (times_model.h)
};
const char* TimesSourceName(TimesSource source);  // "measured", "model"

struct DatasetProfile {
  std::string dataset;       // dataset name (last path component of its root)
  uint64_t fingerprint = 0;  // SampleSource::fingerprint() of the manifest; 0 = unknown
  int crop_size = 224;       // S: the stage sizes hold for this crop size only
  // Server CPU seconds per client CPU second for the same op, as the server
  // measured it (storage and training nodes often have different CPUs). > 0.
  double server_speed_factor = 1.0;
  TimesSource times_source = TimesSource::kMeasured;
  // Where the times come from, in words, for reports (not stored in files).
  std::string times_detail;
  // The stages planners may choose for these samples: those the profile
  // measured (a published SOPHON profile has no JPEG_CROP; FEATURES and
  // PREDICTIONS only when a model was profiled, hence not by default), less
  // any an operator removed (smartoff --stages). Always holds RAW.
  StageSet stages = StageSet::BeforeFeatures();
  // The job's last stage (LoaderOptions.target): the ops after it run on the
  // training node's device, not on either CPU, and cost the plan nothing.
  // No stage past it is in `stages`. Not stored in files.
  Stage target = kLastStage;
  // samples[i].id == i: a profile covers the whole manifest, in order.
  std::vector<SampleProfile> samples;

  // The one place a profile is checked: ids dense and in order, sizes > 0 at
  // the stages offered, times finite and >= 0, crop size and speed factor
  // positive. Errors name the sample.
  absl::Status Validate() const;
};

// Sets the payload size of every sized stage (stage.h) for crop size s; the
// opaque ones (RAW) are the caller's.
void SetSizedStageBytes(int crop_size, SampleProfile* sample);

// The lossless crop's payload, and the time of every op whose work depends on the
// crop (the lossless crop, the decode of the file's crop, the decode of the lossless
// crop), depend on the crop drawn, which every epoch draws again. A profile holds the
// crops of the epoch it was measured in. A planner that read them would pick, for work
// on this node, the samples whose crops came out small and cheap, and underestimate
// any other epoch (a second draw regresses to the mean); in the profiled epoch itself
// it would send the storage node the samples whose crops are large. This sets each
// sample's JPEG_CROP bytes to its file's size times the dataset's ratio of cropped to
// whole bytes, and each of those ops' times to a fit over the profile's samples
// (t = a + b * file bytes + c * file bytes * the part of the file its crop kept)
// taken at the dataset's average part: the expected values for an epoch of fresh crops,
// which still differ by the file. A profile of fewer than 20 such samples keeps its
// times but the region decode's, which becomes the file's decode times the dataset's
// ratio of the two. Samples whose crop was declined (JPEG_CROP as large as the file:
// sent whole) keep their bytes and stay out of the ratios. Nothing changes when the
// profile has no JPEG_CROP or no sample was cropped.
void UseExpectedJpegCrops(DatasetProfile* profile);

// CPU time as whole nanoseconds. The cost model and the planners add up work
// in these units, so totals are exact and zero work is exactly zero.
int64_t CpuNanos(double seconds);

// 0, 1, ..., profile.samples.size() - 1: an epoch over the whole dataset.
std::vector<uint64_t> AllSampleIds(const DatasetProfile& profile);

// Checks that every id names a sample of `profile` (OutOfRange naming the
// first that does not).
absl::Status CheckSampleIds(const DatasetProfile& profile, absl::Span<const uint64_t> ids);

}  // namespace sophon

#endif  // SOPHON_PLANNING_PROFILE_H_
