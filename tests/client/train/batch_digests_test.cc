#include "client/train/batch_digests.h"

#include "client/train/csv_log.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

TEST(BatchDigestsTest, Sha256OfTheImageBufferOfEitherLayout) {
  Batch pixels;
  pixels.stage = Stage::kFlipped;
  pixels.pixels = {'a', 'b', 'c'};
  EXPECT_EQ(ImagesSha256(pixels),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");  // FIPS 180-2
  Batch floats;
  EXPECT_EQ(ImagesSha256(floats),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");  // empty
  floats.images = {1.0f};
  EXPECT_NE(ImagesSha256(floats), ImagesSha256(Batch()));
}

TEST(BatchDigestsTest, OneLinePerBatchWithItsIds) {
  const std::string path = testing::MakeTempDir("batch_digests") + "/d.csv";
  absl::StatusOr<std::unique_ptr<CsvLog>> log =
      CsvLog::Create(path, kBatchDigestsHeader, kBatchDigestsWhat);
  ASSERT_TRUE(log.ok()) << log.status();
  Batch b;
  b.index = 3;
  b.n = 2;
  b.ids = {17, 4};
  b.stage = Stage::kFlipped;
  b.pixels = {'a', 'b', 'c'};
  AddBatchDigest(log->get(), 1, b);
  ASSERT_TRUE((*log)->Close().ok());
  EXPECT_EQ(testing::ReadFile(path),
            "epoch,batch,samples,ids,images_sha256\n"
            "1,3,2,17 4,ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad\n");
}

}  // namespace
}  // namespace sophon
