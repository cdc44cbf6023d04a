#include "client/loader/manifest_reader.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "sophon/ops/pipeline.h"
#include "absl/strings/str_format.h"

namespace sophon {
namespace {

// Sample slots reserved from the header's count before any page arrives: a
// header claiming billions of samples must not reserve memory for them.
constexpr uint64_t kMaxReserve = uint64_t{1} << 26;

// Appends samples [want, start + n) of a page holding [start, start + n).
absl::Status Append(absl::string_view address, uint64_t start,
                    const google::protobuf::RepeatedField<uint32_t>& labels,
                    const google::protobuf::RepeatedField<uint64_t>& raw_sizes,
                    const google::protobuf::RepeatedField<uint32_t>& versions,
                    uint64_t num_samples, ServerManifest* m) {
  const uint64_t want = m->labels.size();
  const uint64_t n = static_cast<uint64_t>(labels.size());
  if (raw_sizes.size() != labels.size()) {
    return absl::DataLossError(absl::StrCat("storage server ", address,
                                            " sent a manifest page of ", labels.size(),
                                            " labels and ", raw_sizes.size(), " sizes"));
  }
  // Versions: one per sample, or none (a server before them: unknown).
  if (!versions.empty() && versions.size() != labels.size()) {
    return absl::DataLossError(absl::StrCat("storage server ", address,
                                            " sent a manifest page of ", labels.size(),
                                            " labels and ", versions.size(), " versions"));
  }
  if (start > want || start + n <= want || start + n > num_samples) {
    return absl::DataLossError(absl::StrCat(
        "storage server ", address, " sent a manifest page of samples [", start, ", ", start + n,
        ") when sample ", want, " of ", num_samples, " was asked for"));
  }
  const uint32_t classes = static_cast<uint32_t>(m->class_names.size());
  for (uint64_t i = want - start; i < n; ++i) {
    const uint32_t label = labels[static_cast<int>(i)];
    if (label >= classes) {
      return absl::DataLossError(absl::StrCat("storage server ", address,
                                              " sent a manifest with label ", label, " of ",
                                              classes, " classes (sample ", start + i, ")"));
    }
    m->labels.push_back(label);
    m->raw_sizes.push_back(SaturatedSize(raw_sizes[static_cast<int>(i)]));
    m->versions.push_back(versions.empty() ? 0 : versions[static_cast<int>(i)]);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ServerManifest> ReadManifest(ManifestRpcs& rpcs, absl::string_view address) {
  v1::Manifest header;
  if (absl::Status s = rpcs.GetManifest(&header); !s.ok()) return s;
  ServerManifest m;
  m.dataset_name = header.dataset_name();
  m.fingerprint = header.fingerprint();
  m.class_names.assign(header.class_names().begin(), header.class_names().end());
  m.prep_workers = header.prep_workers();
  m.cpu_limit = header.cpu_limit();
  m.lenient_jpeg = header.lenient_jpeg();
  m.backbone = header.backbone();
  m.feature_size = header.feature_size();
  m.backbone_fingerprint = header.backbone_fingerprint();
  m.head_fingerprint = header.head_fingerprint();
  m.head_classes = header.head_classes();
  m.group_size = std::max<uint32_t>(1, header.group_size());
  if ((m.feature_size == 0) != m.backbone.empty() ||
      m.feature_size > static_cast<uint32_t>(kMaxVectorElements) ||
      m.head_classes > static_cast<uint32_t>(kMaxVectorElements)) {
    return absl::InvalidArgumentError(
        absl::StrCat("storage server ", address, " announces backbone '", m.backbone,
                     "' with feature size ", m.feature_size, " and ", m.head_classes,
                     " classes (expected a backbone and a feature size or neither, and at most ",
                     kMaxVectorElements, ")"));
  }
  const uint64_t num_samples = header.num_samples();
  m.labels.reserve(std::min(num_samples, kMaxReserve));
  m.raw_sizes.reserve(std::min(num_samples, kMaxReserve));
  m.versions.reserve(std::min(num_samples, kMaxReserve));
  if (header.labels_size() > 0 || header.raw_sizes_size() > 0) {
    if (absl::Status s = Append(address, 0, header.labels(), header.raw_sizes(), header.versions(),
                                num_samples, &m);
        !s.ok()) {
      return s;
    }
  }
  header.Clear();  // the first page is copied: free it before the others come
  v1::GetManifestPageRequest request;
  request.set_fingerprint(m.fingerprint);
  v1::ManifestPage page;
  while (m.labels.size() < num_samples) {
    request.set_start(m.labels.size());
    page.Clear();
    if (absl::Status s = rpcs.GetManifestPage(request, &page); !s.ok()) return s;
    if (page.fingerprint() != m.fingerprint) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "storage server %s sent a manifest page of fingerprint %016x while this client read "
          "the manifest of fingerprint %016x: its dataset changed (it restarted with other "
          "data); connect again",
          address, page.fingerprint(), m.fingerprint));
    }
    if (absl::Status s =
            Append(address, page.start(), page.labels(), page.raw_sizes(), page.versions(),
                   num_samples, &m);
        !s.ok()) {
      return s;
    }
  }
  return m;
}

}  // namespace sophon
