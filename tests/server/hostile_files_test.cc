// Issue 11, classes 3 to 7, end to end: a real sophon-server (gRPC on
// 127.0.0.1, port 0) over a dataset of real hostile files. The manifest must
// serialise whatever the names, every hostile sample must fail alone with an
// error naming its file and the limit, and the good samples must arrive.
#include <unistd.h>

#include <filesystem>
#include <map>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "client/loader/sample_client.h"
#include "server/storage_server.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

struct Result {
  int code = 0;
  std::string message;
  std::string payload;
  int stage = -1;  // the wire value the server answered with
};

// Fetches every id of the manifest at `stage` on one stream.
std::map<uint64_t, Result> FetchAll(SampleClient* client, v1::Stage stage) {
  std::unique_ptr<FetchCall> call = client->OpenFetch();
  v1::FetchRequest request;
  request.set_seed(3);
  request.mutable_augment()->set_crop_size(32);
  request.mutable_augment()->set_scale_min(0.08);
  request.mutable_augment()->set_scale_max(1.0);
  request.mutable_augment()->set_ratio_min(0.75);
  request.mutable_augment()->set_ratio_max(4.0 / 3.0);
  request.mutable_augment()->set_flip_probability(0.5);
  for (uint64_t id = 0; id < client->manifest().num_samples(); ++id) {
    v1::SampleRequest* s = request.add_samples();
    s->set_id(id);
    s->set_target_stage(stage);
  }
  std::map<uint64_t, Result> results;
  EXPECT_TRUE(call->Write(request));
  EXPECT_TRUE(call->WritesDone());
  v1::FetchResponse response;
  while (call->Read(&response)) {
    for (const v1::Sample& s : response.samples()) {
      results[s.id()] = Result{s.error_code(), s.error_message(), s.payload(), s.stage()};
    }
  }
  EXPECT_TRUE(call->Finish().ok());
  return results;
}

TEST(HostileFilesTest, ServerServesTheGoodAndFailsEachHostileFileAlone) {
  const std::string outside = testing::MakeTempDir("hostile_outside");
  testing::WriteFile(outside + "/secret.jpg", "SECRET=1");
  const std::string root = testing::MakeTempDir("hostile_dataset");
  const std::string good = testing::EncodeJpeg(testing::MakeTestImage(96, 128, 41));
  const std::string dir = root + "/c/";
  testing::WriteFile(dir + "a_good.jpg", good);
  testing::WriteFile(dir + "b_latin1_caf\xe9.jpg", good);
  testing::WriteFile(dir + "c_newline\n[info] forged.jpg", good);
  testing::WriteFile(dir + "d_truncated.jpg", testing::TruncateScanKeepEoi(good));
  testing::WriteFile(
      dir + "e_progressive_10000.jpg",
      testing::PatchDimensions(
          testing::EncodeJpeg(testing::MakeTestImage(16, 16, 42), {.progressive = true}), 10000,
          10000));
  testing::WriteFile(dir + "f_many_scans.jpg",
                     testing::EncodeJpeg(testing::MakeTestImage(32, 32, 43),
                                         {.scan_per_coefficient = true}));
  testing::WriteFile(dir + "g_sparse_3gib.jpg", "");
  ASSERT_EQ(::truncate((dir + "g_sparse_3gib.jpg").c_str(), int64_t{3} << 30), 0);
  std::filesystem::create_symlink(outside + "/secret.jpg", dir + "h_link_outside.jpg");
  testing::WriteFile(dir + "i_fifo_later.jpg", good);
  // A failing sample whose name would forge a log line.
  testing::WriteFile(dir + "j_newline\n[info] forged.jpg", testing::TruncateScanKeepEoi(good));
  // A valid file that cannot be cropped losslessly: sent whole for JPEG_CROP.
  const std::string unrefined =
      testing::EncodeJpeg(testing::MakeTestImage(96, 128, 44), {.unrefined_progression = true});
  testing::WriteFile(dir + "k_unrefined.jpg", unrefined);
  std::ostringstream log;
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>(
      "capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(log)));

  StorageServerOptions options;
  options.data_dir = root;
  options.port = 0;
  options.service.prep_workers = 2;
  options.stats_interval = absl::ZeroDuration();
  absl::StatusOr<std::unique_ptr<StorageServer>> server = StorageServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  // Swapped for a FIFO after start-up: must fail, not block a prep worker.
  std::filesystem::remove(dir + "i_fifo_later.jpg");
  ASSERT_EQ(::mkfifo((dir + "i_fifo_later.jpg").c_str(), 0600), 0);

  ClientOptions copts;
  copts.address = (*server)->address();
  absl::StatusOr<std::unique_ptr<SampleClient>> client = SampleClient::Connect(copts);
  ASSERT_TRUE(client.ok()) << client.status();  // the manifest serialised
  ASSERT_EQ((*client)->manifest().num_samples(), 10u);  // the link outside is not in it
  // The ids by (escaped) path, from the server's own manifest: paths do not
  // cross the network.
  const SampleSource& source = (*server)->source();
  std::map<std::string, uint64_t> id;
  for (uint64_t i = 0; i < source.size(); ++i) id[source.entry(i).relative_path] = i;
  ASSERT_TRUE(id.count("c/b_latin1_caf\\xe9.jpg"));
  ASSERT_TRUE(id.count("c/c_newline\\n[info] forged.jpg"));
  EXPECT_FALSE(id.count("c/h_link_outside.jpg"));

  // Every stage, the lossless crop included: each answer, failed ones too,
  // carries the stage asked for as its wire value (never a pipeline index).
  for (v1::Stage stage :
       {v1::STAGE_RAW, v1::STAGE_JPEG_CROP, v1::STAGE_CROPPED, v1::STAGE_TENSOR}) {
    SCOPED_TRACE(v1::Stage_Name(stage));
    std::map<uint64_t, Result> results = FetchAll(client->get(), stage);
    ASSERT_EQ(results.size(), 10u);
    auto expect = [&](const std::string& name, absl::StatusCode code, const std::string& text) {
      const Result& r = results[id.at("c/" + name)];
      EXPECT_EQ(r.code, static_cast<int>(code)) << name << ": " << r.message;
      EXPECT_EQ(r.stage, stage) << name;
      EXPECT_NE(r.message.find(text), std::string::npos) << name << ": " << r.message;
      if (code != absl::StatusCode::kOk) {
        EXPECT_NE(r.message.find("c/" + name.substr(0, 2)), std::string::npos) << r.message;
      }
    };
    for (const char* name : {"a_good.jpg", "b_latin1_caf\\xe9.jpg", "c_newline\\n[info] forged.jpg"}) {
      expect(name, absl::StatusCode::kOk, "");
      EXPECT_FALSE(results[id.at(std::string("c/") + name)].payload.empty());
    }
    expect("g_sparse_3gib.jpg", absl::StatusCode::kResourceExhausted,
           "ImageFolderOptions.max_file_bytes");
    expect("i_fifo_later.jpg", absl::StatusCode::kFailedPrecondition, "FIFO");
    const Result& k = results[id.at("c/k_unrefined.jpg")];
    EXPECT_EQ(k.code, 0) << k.message;
    if (stage == v1::STAGE_JPEG_CROP) {
      // Sent whole, as RAW, and counted.
      EXPECT_EQ(k.stage, v1::STAGE_RAW);
      EXPECT_EQ(k.payload, unrefined);
      EXPECT_LT(results[id.at("c/a_good.jpg")].payload.size(), good.size());
    }
    if (stage == v1::STAGE_RAW) {
      EXPECT_EQ(results[id.at("c/a_good.jpg")].payload, good);
      continue;  // the decoder never sees the rest
    }
    expect("d_truncated.jpg", absl::StatusCode::kDataLoss, "premature end of data segment");
    expect("e_progressive_10000.jpg", absl::StatusCode::kResourceExhausted,
           "DecodeLimits.max_memory_bytes");
    expect("f_many_scans.jpg", absl::StatusCode::kResourceExhausted, "DecodeLimits.max_scans");
    expect("j_newline\\n[info] forged.jpg", absl::StatusCode::kDataLoss, "corrupt JPEG data");
  }
  absl::StatusOr<v1::ServerStats> stats = (*client)->GetStats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->declined_by_stage().at("jpeg_crop"), 1u);
  (*server)->Shutdown();
  spdlog::set_default_logger(previous);
  // Logged escaped, on one line: no line of the log starts with the forged text.
  EXPECT_NE(log.str().find("j_newline\\n[info] forged.jpg"), std::string::npos) << log.str();
  EXPECT_EQ(log.str().find("\n[info] forged"), std::string::npos) << log.str();
  // The file sent whole is logged once, with its path and the reason.
  const std::string line = "c/k_unrefined.jpg): sent as raw instead of jpeg_crop";
  const size_t at = log.str().find(line);
  EXPECT_NE(at, std::string::npos) << log.str();
  EXPECT_EQ(log.str().find(line, at + 1), std::string::npos) << "logged twice: " << log.str();
  EXPECT_NE(log.str().find("unrefined"), std::string::npos) << log.str();
}

}  // namespace
}  // namespace sophon
