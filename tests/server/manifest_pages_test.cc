#include "server/manifest_pages.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace sophon {
namespace {

// A source of `n` samples: labels i % 3, sizes growing so that their varints
// take 1, 2 and 3 bytes.
class FakeSource final : public SampleSource {
 public:
  explicit FakeSource(int n, uint64_t fingerprint = 42) : fingerprint_(fingerprint) {
    for (int i = 0; i < n; ++i) {
      table_.Add("c" + std::to_string(i % 3) + "/" + std::to_string(i) + ".jpg",
                 static_cast<uint32_t>(i % 3), static_cast<uint64_t>(i) * 997);
    }
  }
  std::string name() const override { return "fake"; }
  const ManifestTable& manifest() const override { return table_; }
  const std::vector<std::string>& class_names() const override { return classes_; }
  uint64_t fingerprint() const override { return fingerprint_; }
  absl::StatusOr<std::string> Read(uint64_t) const override { return std::string(); }
  std::vector<std::string> FilePaths() const override { return {}; }

 private:
  uint64_t fingerprint_;
  ManifestTable table_;
  std::vector<std::string> classes_ = {"c0", "c1", "c2"};
};

v1::GetManifestPageRequest PageAt(uint64_t fingerprint, uint64_t start) {
  v1::GetManifestPageRequest r;
  r.set_fingerprint(fingerprint);
  r.set_start(start);
  return r;
}

// Tiny pages: every page fits its byte bound, the pages cover every sample
// once and in order, and the header carries the settings and the first page.
TEST(ManifestPagesTest, PagesAreBoundedByBytesAndCoverTheManifest) {
  const FakeSource source(1000);
  v1::Manifest settings;
  settings.set_prep_workers(7);
  settings.set_lenient_jpeg(true);
  const int64_t page_bytes = 100;
  const ManifestPages pages(source, settings, page_bytes);
  EXPECT_GT(pages.num_pages(), 20u);

  v1::Manifest header;
  ASSERT_TRUE(header.ParseFromString(pages.header()));
  EXPECT_EQ(header.dataset_name(), "fake");
  EXPECT_EQ(header.fingerprint(), 42u);
  EXPECT_EQ(header.num_samples(), 1000u);
  EXPECT_EQ(header.class_names_size(), 3);
  EXPECT_EQ(header.prep_workers(), 7u);
  EXPECT_TRUE(header.lenient_jpeg());
  // No paths (field 8, which servers before pages filled).
  EXPECT_EQ(header.GetReflection()->FieldSize(
                header, v1::Manifest::descriptor()->FindFieldByNumber(8)),
            0);
  ASSERT_GT(header.labels_size(), 0);
  ASSERT_EQ(header.raw_sizes_size(), header.labels_size());

  uint64_t next = 0;
  size_t count = 0;
  while (next < 1000) {
    absl::StatusOr<absl::string_view> bytes = pages.Page(PageAt(42, next));
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    EXPECT_LE(static_cast<int64_t>(bytes->size()), page_bytes);
    v1::ManifestPage page;
    ASSERT_TRUE(page.ParseFromString(std::string(*bytes)));
    EXPECT_EQ(page.fingerprint(), 42u);
    ASSERT_EQ(page.start(), next);
    ASSERT_GT(page.labels_size(), 0);
    ASSERT_EQ(page.raw_sizes_size(), page.labels_size());
    if (next == 0) EXPECT_EQ(page.labels_size(), header.labels_size());
    for (int i = 0; i < page.labels_size(); ++i) {
      EXPECT_EQ(page.labels(i), source.manifest().label(next + i));
      EXPECT_EQ(page.raw_sizes(i), source.manifest().raw_size(next + i));
    }
    next += page.labels_size();
    ++count;
  }
  EXPECT_EQ(count, pages.num_pages());
  EXPECT_EQ(next, 1000u);
}

// A start inside a page gets the page that holds it (a client that asks
// from where it is, after a server restarted with another page size).
TEST(ManifestPagesTest, AStartInsideAPageGetsThatPage) {
  const FakeSource source(200);
  const ManifestPages pages(source, v1::Manifest(), kMinManifestPageBytes);
  v1::ManifestPage first;
  ASSERT_TRUE(first.ParseFromString(std::string(*pages.Page(PageAt(42, 0)))));
  ASSERT_GT(first.labels_size(), 1);
  v1::ManifestPage again;
  ASSERT_TRUE(again.ParseFromString(std::string(*pages.Page(PageAt(42, 1)))));
  EXPECT_EQ(again.start(), 0u);
  EXPECT_EQ(again.labels_size(), first.labels_size());
  v1::ManifestPage last;
  ASSERT_TRUE(last.ParseFromString(std::string(*pages.Page(PageAt(42, 199)))));
  EXPECT_EQ(last.start() + last.labels_size(), 200u);
}

// Requests are checked before anything is looked up; the answers are the
// pages made at start-up, so no request makes the server allocate.
TEST(ManifestPagesTest, RefusesAnotherFingerprintAndAStartOutsideTheManifest) {
  const FakeSource source(10);
  const ManifestPages pages(source, v1::Manifest(), 1 << 20);
  EXPECT_EQ(pages.num_pages(), 1u);
  const absl::Status other = pages.Page(PageAt(43, 0)).status();
  EXPECT_EQ(other.code(), absl::StatusCode::kFailedPrecondition) << other;
  EXPECT_NE(other.message().find("000000000000002b"), std::string::npos) << other;
  EXPECT_NE(other.message().find("000000000000002a"), std::string::npos) << other;
  for (uint64_t start : {uint64_t{10}, uint64_t{1} << 40, ~uint64_t{0}}) {
    const absl::Status outside = pages.Page(PageAt(42, start)).status();
    EXPECT_EQ(outside.code(), absl::StatusCode::kOutOfRange) << outside;
    EXPECT_NE(outside.message().find("10 samples"), std::string::npos) << outside;
  }
}

TEST(ManifestPagesTest, RelativePathsAreAnsweredForAFewIdsOnly) {
  const FakeSource source(40);
  v1::GetRelativePathsRequest request;
  request.set_fingerprint(42);
  request.add_ids(5);
  request.add_ids(0);
  v1::RelativePaths paths;
  ASSERT_TRUE(RelativePathsOf(source, request, &paths).ok());
  EXPECT_EQ(paths.fingerprint(), 42u);
  ASSERT_EQ(paths.relative_paths_size(), 2);
  EXPECT_EQ(paths.relative_paths(0), "c2/5.jpg");
  EXPECT_EQ(paths.relative_paths(1), "c0/0.jpg");

  v1::GetRelativePathsRequest many = request;
  for (int i = 0; i < kMaxRelativePathsPerRequest; ++i) many.add_ids(1);
  v1::RelativePaths none;
  EXPECT_EQ(RelativePathsOf(source, many, &none).code(), absl::StatusCode::kInvalidArgument);
  v1::GetRelativePathsRequest outside = request;
  outside.add_ids(40);
  EXPECT_EQ(RelativePathsOf(source, outside, &none).code(), absl::StatusCode::kOutOfRange);
  v1::GetRelativePathsRequest other = request;
  other.set_fingerprint(7);
  EXPECT_EQ(RelativePathsOf(source, other, &none).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(none.relative_paths_size(), 0);
}

}  // namespace
}  // namespace sophon
