#include "client/loader/manifest_reader.h"

#include <functional>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace sophon {
namespace {

// A server's manifest as data: the header's first `first_page` samples and
// pages of `page` samples after them, answered from wherever start falls.
struct FakeManifest {
  uint64_t fingerprint = 77;
  std::vector<std::string> classes = {"a", "b", "c"};
  std::vector<uint32_t> labels;
  std::vector<uint64_t> sizes;

  static FakeManifest Make(int n, uint64_t fingerprint = 77) {
    FakeManifest m;
    m.fingerprint = fingerprint;
    for (int i = 0; i < n; ++i) {
      m.labels.push_back(static_cast<uint32_t>((i + fingerprint) % 3));
      m.sizes.push_back(1000 + i + fingerprint);
    }
    return m;
  }
};

class FakeRpcs : public ManifestRpcs {
 public:
  FakeRpcs(FakeManifest m, int first_page, int page)
      : m_(std::move(m)), first_page_(first_page), page_(page) {}

  absl::Status GetManifest(v1::Manifest* header) override {
    header->set_dataset_name("ds");
    header->set_fingerprint(m_.fingerprint);
    header->set_num_samples(static_cast<uint32_t>(m_.labels.size()));
    header->set_prep_workers(3);
    header->set_cpu_limit(1.5);
    header->set_lenient_jpeg(true);
    for (const std::string& c : m_.classes) header->add_class_names(c);
    for (int i = 0; i < first_page_ && i < static_cast<int>(m_.labels.size()); ++i) {
      header->add_labels(m_.labels[i]);
      header->add_raw_sizes(m_.sizes[i]);
    }
    return absl::OkStatus();
  }

  absl::Status GetManifestPage(const v1::GetManifestPageRequest& request,
                               v1::ManifestPage* page) override {
    requests.push_back(request);
    if (before_page) before_page(this);
    // Pages start at first_page_ + k * page_.
    const uint64_t start =
        request.start() < static_cast<uint64_t>(first_page_)
            ? 0
            : first_page_ + (request.start() - first_page_) / page_ * page_;
    const uint64_t end = start == 0 && first_page_ > 0 ? first_page_ : start + page_;
    const uint64_t begin = start >= overlap ? start - overlap : 0;
    page->set_fingerprint(m_.fingerprint);
    page->set_start(begin);
    for (uint64_t i = begin; i < end && i < m_.labels.size(); ++i) {
      page->add_labels(m_.labels[i]);
      page->add_raw_sizes(m_.sizes[i]);
    }
    if (edit_page) edit_page(page);
    return absl::OkStatus();
  }

  FakeManifest m_;
  int first_page_;
  int page_;
  uint64_t overlap = 0;  // pages begin this many samples early
  std::vector<v1::GetManifestPageRequest> requests;
  std::function<void(FakeRpcs*)> before_page;
  std::function<void(v1::ManifestPage*)> edit_page;
};

void ExpectSame(const ServerManifest& got, const FakeManifest& want) {
  ASSERT_EQ(got.num_samples(), want.labels.size());
  ASSERT_EQ(got.raw_sizes.size(), want.labels.size());
  for (size_t i = 0; i < want.labels.size(); ++i) {
    EXPECT_EQ(got.labels[i], want.labels[i]) << i;
    EXPECT_EQ(got.raw_sizes[i], want.sizes[i]) << i;
  }
  EXPECT_EQ(got.fingerprint, want.fingerprint);
}

TEST(ManifestReaderTest, AssemblesTheHeaderAndEveryPage) {
  const FakeManifest m = FakeManifest::Make(100);
  FakeRpcs rpcs(m, 10, 7);
  absl::StatusOr<ServerManifest> got = ReadManifest(rpcs, "h:1");
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectSame(*got, m);
  EXPECT_EQ(got->dataset_name, "ds");
  EXPECT_EQ(got->class_names, m.classes);
  EXPECT_EQ(got->prep_workers, 3u);
  EXPECT_EQ(got->cpu_limit, 1.5);
  EXPECT_TRUE(got->lenient_jpeg);
  // 90 samples after the first page, 7 a page: 13 pages, each asked from
  // where the last ended, with the header's fingerprint.
  ASSERT_EQ(rpcs.requests.size(), 13u);
  for (size_t k = 0; k < rpcs.requests.size(); ++k) {
    EXPECT_EQ(rpcs.requests[k].start(), 10 + 7 * k);
    EXPECT_EQ(rpcs.requests[k].fingerprint(), 77u);
  }
}

// A server before pages sends everything with the header; a manifest that
// fits the first page needs no other call either.
TEST(ManifestReaderTest, AWholeManifestInTheHeaderNeedsNoPage) {
  const FakeManifest m = FakeManifest::Make(5);
  FakeRpcs rpcs(m, 5, 1);
  absl::StatusOr<ServerManifest> got = ReadManifest(rpcs, "h:1");
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectSame(*got, m);
  EXPECT_TRUE(rpcs.requests.empty());
  // A header without a first page: everything comes in pages.
  FakeRpcs paged(m, 0, 2);
  got = ReadManifest(paged, "h:1");
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectSame(*got, m);
  EXPECT_EQ(paged.requests.size(), 3u);
}

// The server restarts with other data after the second page and (unlike a
// real server, which refuses the request) answers with pages of its new
// manifest: the client sees the other fingerprint and refuses the mix.
TEST(ManifestReaderTest, ARestartWithOtherDataMidDownloadIsDetected) {
  FakeRpcs rpcs(FakeManifest::Make(50), 10, 10);
  rpcs.before_page = [](FakeRpcs* r) {
    if (r->requests.size() == 3) r->m_ = FakeManifest::Make(50, 78);
  };
  absl::StatusOr<ServerManifest> got = ReadManifest(rpcs, "h:1");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kFailedPrecondition) << got.status();
  EXPECT_NE(got.status().message().find("h:1"), std::string::npos) << got.status();
  EXPECT_NE(got.status().message().find("000000000000004e"), std::string::npos) << got.status();
  EXPECT_EQ(rpcs.requests.size(), 3u);  // it stopped there
}

// A page that begins before the sample asked for (a server restarted with
// another page size) is taken from that sample on.
TEST(ManifestReaderTest, AnOverlappingPageIsTakenFromTheSampleAskedFor) {
  const FakeManifest m = FakeManifest::Make(30);
  FakeRpcs rpcs(m, 10, 10);
  rpcs.overlap = 3;
  absl::StatusOr<ServerManifest> got = ReadManifest(rpcs, "h:1");
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectSame(*got, m);
  EXPECT_EQ(rpcs.requests.size(), 2u);
}

TEST(ManifestReaderTest, MalformedPagesAreDataLossNamingTheServer) {
  const FakeManifest m = FakeManifest::Make(30);
  const std::vector<std::pair<std::string, std::function<void(v1::ManifestPage*)>>> cases = {
      {"a gap", [](v1::ManifestPage* p) { p->set_start(p->start() + 1); }},
      {"an empty page",
       [](v1::ManifestPage* p) {
         p->clear_labels();
         p->clear_raw_sizes();
       }},
      {"fewer sizes than labels", [](v1::ManifestPage* p) { p->mutable_raw_sizes()->RemoveLast(); }},
      {"a label of no class", [](v1::ManifestPage* p) { p->set_labels(0, 3); }},
      {"samples past num_samples",
       [](v1::ManifestPage* p) {
         for (int i = 0; i < 30; ++i) {
           p->add_labels(0);
           p->add_raw_sizes(1);
         }
       }},
  };
  for (const auto& [what, edit] : cases) {
    FakeRpcs rpcs(m, 10, 10);
    rpcs.edit_page = edit;
    absl::StatusOr<ServerManifest> got = ReadManifest(rpcs, "h:9");
    ASSERT_FALSE(got.ok()) << what;
    EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << what << ": " << got.status();
    EXPECT_NE(got.status().message().find("h:9"), std::string::npos) << got.status();
  }
}

// A header with more samples in its first page than it announces.
TEST(ManifestReaderTest, AHeaderLongerThanItsCountIsDataLoss) {
  class LongHeader : public FakeRpcs {
   public:
    using FakeRpcs::FakeRpcs;
    absl::Status GetManifest(v1::Manifest* header) override {
      absl::Status s = FakeRpcs::GetManifest(header);
      header->set_num_samples(3);
      return s;
    }
  };
  LongHeader rpcs(FakeManifest::Make(5), 5, 5);
  EXPECT_EQ(ReadManifest(rpcs, "h:1").status().code(), absl::StatusCode::kDataLoss);
}

TEST(ManifestReaderTest, AnRpcErrorIsReturnedAsItCame) {
  class Failing : public FakeRpcs {
   public:
    using FakeRpcs::FakeRpcs;
    absl::Status GetManifestPage(const v1::GetManifestPageRequest&, v1::ManifestPage*) override {
      return absl::UnavailableError("GetManifestPage from storage server h:1: gone");
    }
  };
  Failing rpcs(FakeManifest::Make(20), 10, 10);
  const absl::Status s = ReadManifest(rpcs, "h:1").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "GetManifestPage from storage server h:1: gone");
}

TEST(ManifestReaderTest, SizesOver4GiBSaturate) {
  FakeManifest m = FakeManifest::Make(2);
  m.sizes[1] = uint64_t{5} << 32;
  FakeRpcs rpcs(m, 2, 2);
  absl::StatusOr<ServerManifest> got = ReadManifest(rpcs, "h:1");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->raw_sizes[1], UINT32_MAX);
  EXPECT_EQ(got->raw_sizes[0], m.sizes[0]);
}

}  // namespace
}  // namespace sophon
