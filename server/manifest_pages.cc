#include "server/manifest_pages.h"

#include <algorithm>

#include <google/protobuf/io/coded_stream.h>

#include "absl/strings/str_format.h"

namespace sophon {
namespace {

using google::protobuf::io::CodedOutputStream;

absl::Status OtherFingerprint(absl::string_view method, uint64_t asked, uint64_t served) {
  return absl::FailedPreconditionError(absl::StrFormat(
      "%s: the manifest being read has fingerprint %016x, but this server now serves "
      "fingerprint %016x (it restarted with other data); read the manifest again",
      method, asked, served));
}

}  // namespace

ManifestPages::ManifestPages(const SampleSource& source, const v1::Manifest& settings,
                             int64_t page_bytes)
    : fingerprint_(source.fingerprint()), num_samples_(source.size()) {
  const ManifestTable& table = source.manifest();
  const int64_t budget = page_bytes - kManifestPageOverheadBytes;
  // First the cuts (the samples that fit each page's budget, at least one),
  // so that the buffer is made at its size.
  size_t total = 0;
  for (uint64_t start = 0; start < num_samples_;) {
    uint64_t end = start;
    int64_t bytes = 0;
    while (end < num_samples_) {
      const int64_t sample = CodedOutputStream::VarintSize32(table.label(end)) +
                             CodedOutputStream::VarintSize64(table.raw_size(end)) +
                             static_cast<int64_t>(sizeof(uint32_t));
      if (end > start && bytes + sample > budget) break;
      bytes += sample;
      ++end;
    }
    page_starts_.push_back(start);
    total += static_cast<size_t>(bytes + kManifestPageOverheadBytes);
    start = end;
  }
  pages_.reserve(total);
  page_ends_.reserve(page_starts_.size());
  std::string encoded;
  v1::ManifestPage page;
  page.set_fingerprint(fingerprint_);
  for (size_t k = 0; k < page_starts_.size(); ++k) {
    const uint64_t start = page_starts_[k];
    const uint64_t end = k + 1 < page_starts_.size() ? page_starts_[k + 1] : num_samples_;
    page.set_start(start);
    page.clear_labels();
    page.clear_raw_sizes();
    page.clear_versions();
    page.mutable_labels()->Reserve(static_cast<int>(end - start));
    page.mutable_raw_sizes()->Reserve(static_cast<int>(end - start));
    page.mutable_versions()->Reserve(static_cast<int>(end - start));
    for (uint64_t id = start; id < end; ++id) {
      page.add_labels(table.label(id));
      page.add_raw_sizes(table.raw_size(id));
      page.add_versions(table.version(id));
    }
    if (start == 0) {
      v1::Manifest header = settings;
      header.set_dataset_name(source.name());
      header.set_fingerprint(fingerprint_);
      header.set_group_size(source.group_size());
      header.set_num_samples(static_cast<uint32_t>(num_samples_));
      for (const std::string& c : source.class_names()) header.add_class_names(c);
      *header.mutable_labels() = page.labels();
      *header.mutable_raw_sizes() = page.raw_sizes();
      *header.mutable_versions() = page.versions();
      header.SerializeToString(&header_);
    }
    page.SerializeToString(&encoded);
    pages_ += encoded;
    page_ends_.push_back(pages_.size());
  }
}

absl::StatusOr<absl::string_view> ManifestPages::Page(
    const v1::GetManifestPageRequest& request) const {
  if (request.fingerprint() != fingerprint_) {
    return OtherFingerprint("GetManifestPage", request.fingerprint(), fingerprint_);
  }
  if (request.start() >= num_samples_) {
    return absl::OutOfRangeError(
        absl::StrFormat("GetManifestPage: start %d is outside the manifest of %d samples",
                        request.start(), num_samples_));
  }
  const size_t k = static_cast<size_t>(
      std::upper_bound(page_starts_.begin(), page_starts_.end(), request.start()) -
      page_starts_.begin() - 1);
  const size_t begin = k == 0 ? 0 : page_ends_[k - 1];
  return absl::string_view(pages_.data() + begin, page_ends_[k] - begin);
}

size_t ManifestPages::memory_bytes() const {
  return header_.capacity() + pages_.capacity() +
         page_starts_.capacity() * sizeof(uint64_t) + page_ends_.capacity() * sizeof(size_t);
}

absl::Status RelativePathsOf(const SampleSource& source,
                             const v1::GetRelativePathsRequest& request,
                             v1::RelativePaths* response) {
  if (request.fingerprint() != source.fingerprint()) {
    return OtherFingerprint("GetRelativePaths", request.fingerprint(), source.fingerprint());
  }
  if (request.ids_size() > kMaxRelativePathsPerRequest) {
    return absl::InvalidArgumentError(
        absl::StrFormat("GetRelativePaths: %d ids in one request, more than %d",
                        request.ids_size(), kMaxRelativePathsPerRequest));
  }
  for (uint64_t id : request.ids()) {
    if (id >= source.size()) {
      return absl::OutOfRangeError(absl::StrFormat(
          "GetRelativePaths: sample %d is outside the manifest of %d samples", id, source.size()));
    }
  }
  response->set_fingerprint(source.fingerprint());
  for (uint64_t id : request.ids()) {
    const absl::string_view path = source.manifest().relative_path(id);
    response->add_relative_paths(path.data(), path.size());
  }
  return absl::OkStatus();
}

}  // namespace sophon
