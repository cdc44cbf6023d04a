// libFuzzer target: untrusted request bytes through everything the storage
// server does with a Fetch request message before and after admission:
// parsing with the size limit, the whole-message checks (crop size, ids,
// augmentation parameters), the per-sample checks and output-size estimate,
// and the preparation of the first samples on a real ImageFolder dataset.
// Built only with -DSOPHON_FUZZ=ON and clang (tools/fuzz.sh request); the
// seeds are in fuzz/corpus/request (made by tests/server/fetch_request_test).
//
// Besides crashes and sanitizer reports, it aborts when results disagree: an
// accepted sample must be inside the manifest with an estimate that fits the
// stream budget, and a prepared sample must have exactly that many bytes.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "server/fetch_request.h"
#include "server/service_impl.h"
#include "sophon/data/image_folder.h"
#include "spdlog/spdlog.h"
#include "tests/test_util.h"

namespace {

void Check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "request_fuzzer: invariant violated: %s\n", what);
  std::abort();
}

struct World {
  std::unique_ptr<sophon::ImageFolderSource> source;
  sophon::ServiceOptions options;
  std::unique_ptr<sophon::SampleServiceImpl> service;
};

World& GetWorld() {
  static World* world = [] {
    spdlog::set_level(spdlog::level::off);
    auto* w = new World();
    sophon::testing::TestDatasetOptions d;
    d.classes = 2;
    d.per_class = 2;
    d.min_side = 16;
    d.max_side = 48;
    w->source = *sophon::ImageFolderSource::Open(sophon::testing::MakeTestDataset("fuzz_req", d));
    w->options.prep_workers = 1;
    w->options.max_ids_per_request = 64;
    w->options.max_request_bytes = 4096;
    w->options.max_crop_size = 64;
    w->options.max_stream_inflight_bytes = 32 << 10;
    w->options.limits.max_pixels = 1 << 16;
    w->service = std::make_unique<sophon::SampleServiceImpl>(w->source.get(), w->options);
    return w;
  }();
  return *world;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  World& w = GetWorld();
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  sophon::v1::FetchRequest request;
  sophon::Limit limit = sophon::Limit::kInvalidRequest;
  if (!sophon::ParseFetchRequest(bytes, w.options, &request, &limit).ok()) return 0;
  absl::StatusOr<sophon::CheckedRequest> checked =
      sophon::CheckFetchRequest(request, *w.source, w.options, &limit);
  if (!checked.ok()) return 0;
  Check(static_cast<int>(checked->samples.size()) == request.samples_size(), "samples dropped");
  int prepared = 0;
  for (const sophon::CheckedSample& s : checked->samples) {
    if (s.refusal != sophon::SampleRefusal::kNone) continue;
    Check(s.id < w.source->size(), "accepted an id outside the manifest");
    Check(s.bytes >= 0 && s.bytes <= w.options.max_stream_inflight_bytes,
          "accepted a sample larger than a stream may hold");
    if (prepared++ >= 2) continue;  // keep each input cheap
    sophon::v1::Sample out;
    w.service->ProcessSample(s.stage, s.id,
                             sophon::SampleKey{checked->seed, checked->epoch, checked->key_offset + s.id},
                             *checked->pipeline, s.bytes, &out);
    if (out.error_code() == 0) {
      Check(static_cast<int64_t>(out.payload().size()) == s.bytes,
            "prepared sample size differs from its estimate");
    }
  }
  return 0;
}
