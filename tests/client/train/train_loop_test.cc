#include "client/train/train_loop.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>

#include "client/train/synthetic_run.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"
#include "tests/client/train/tiny_emulated_trainer.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

EpochReport SampleReport() {
  EpochReport r;
  r.epoch = 3;
  r.wall_seconds = 10;
  r.images_per_second = 100;
  r.data_wait_seconds = 2.5;
  r.compute_seconds = 7;
  r.copy_seconds = 0.5;
  r.mean_loss = 1.25;
  r.top1 = 0.5;
  r.loader.samples = 1000;
  r.loader.skipped = 2;
  r.loader.batches = 16;
  r.loader.samples_by_stage[StageIndex(Stage::kRaw)] = 600;
  r.loader.samples_by_stage[StageIndex(Stage::kCropped)] = 400;
  r.loader.bytes_by_stage[StageIndex(Stage::kRaw)] = 60'000'000;
  r.loader.bytes_by_stage[StageIndex(Stage::kCropped)] = 20'000'000;
  r.loader.local_cpu_seconds = 4;
  r.server_prep_busy_seconds = 5;
  r.server_prep_workers = 1;
  return r;
}

google::protobuf::Struct ParseJson(const std::string& text) {
  google::protobuf::Struct doc;
  const auto status = google::protobuf::util::JsonStringToMessage(text, &doc);
  EXPECT_TRUE(status.ok()) << status.ToString() << "\n" << text;
  return doc;
}

double Field(const google::protobuf::Struct& s, const std::string& key) {
  return s.fields().at(key).number_value();
}

TEST(EpochReportTest, TextLineHasTheFiguresAndOnlyTheStagesReceived) {
  EpochReport r = SampleReport();
  const std::string line = FormatEpochReport(r);
  EXPECT_THAT(line, HasSubstr("epoch 3: 10.00s, 1000 images, 100.0 img/s, 80.0 MB received"));
  EXPECT_THAT(line, HasSubstr("80.0 KB/image"));
  EXPECT_THAT(line, HasSubstr("raw 600 samples 60.0 MB, cropped 400 samples 20.0 MB"));
  EXPECT_THAT(line, Not(HasSubstr("tensor")));
  EXPECT_THAT(line, HasSubstr("data wait 2.50s (25%)"));
  EXPECT_THAT(line, HasSubstr("skipped 2"));
  EXPECT_THAT(line, HasSubstr("server prep 5.00 CPU-s on 1 workers (50% busy)"));
  EXPECT_THAT(line, Not(HasSubstr("re-opened")));
  EXPECT_THAT(line, Not(HasSubstr("predicted")));

  r.loader.reconnects = 1;
  r.loader.resent = 7;
  r.predicted_seconds = 8;
  const std::string more = FormatEpochReport(r);
  EXPECT_THAT(more, HasSubstr("stream re-opened 1 times, 7 requests resent"));
  EXPECT_THAT(more, HasSubstr("planner predicted 8.00s (measured/predicted 1.25)"));
}

TEST(EpochReportTest, JsonParsesAndCarriesEveryEpoch) {
  TrainLoopOptions options;
  options.mode_name = "smartoff";
  options.arch = "resnet18";
  options.device = "emulated v100 x1";
  options.emulated = true;
  WarmupReport warmup;
  warmup.batches = 6;
  warmup.seconds = 1.5;
  warmup.bytes_received = 12345;
  EpochReport second = SampleReport();
  second.epoch = 4;
  second.predicted_seconds = 9.5;
  const google::protobuf::Struct doc =
      ParseJson(EpochReportsToJson({SampleReport(), second}, options, warmup));
  EXPECT_EQ(doc.fields().at("mode").string_value(), "smartoff");
  EXPECT_EQ(doc.fields().at("device").string_value(), "emulated v100 x1");
  EXPECT_TRUE(doc.fields().at("emulated").bool_value());
  const google::protobuf::Struct& w = doc.fields().at("warmup").struct_value();
  EXPECT_EQ(Field(w, "batches"), 6);
  EXPECT_EQ(Field(w, "bytes_received"), 12345);
  const auto& epochs = doc.fields().at("epochs").list_value().values();
  ASSERT_EQ(epochs.size(), 2);
  const google::protobuf::Struct& e = epochs[1].struct_value();
  EXPECT_EQ(Field(e, "epoch"), 4);
  EXPECT_EQ(Field(e, "images"), 1000);
  EXPECT_EQ(Field(e, "bytes_received"), 80'000'000);
  EXPECT_DOUBLE_EQ(Field(e, "bytes_per_image"), 80000);
  EXPECT_DOUBLE_EQ(Field(e, "predicted_seconds"), 9.5);
  EXPECT_DOUBLE_EQ(Field(e, "data_wait_seconds"), 2.5);
  // One key per stage of the stage table, received or not.
  const google::protobuf::Struct& by_stage = e.fields().at("samples_by_stage").struct_value();
  ASSERT_EQ(by_stage.fields().size(), static_cast<size_t>(kNumStages));
  EXPECT_EQ(Field(by_stage, "raw"), 600);
  EXPECT_EQ(Field(by_stage, "tensor"), 0);
}

TEST(EpochReportTest, JsonEscapesStrings) {
  TrainLoopOptions options;
  options.mode_name = "odd \"mode\"\\\n";
  options.arch = "tab\there";
  const google::protobuf::Struct doc = ParseJson(EpochReportsToJson({}, options));
  EXPECT_EQ(doc.fields().at("mode").string_value(), "odd \"mode\"\\\n");
  EXPECT_EQ(doc.fields().at("arch").string_value(), "tab\there");
  EXPECT_EQ(doc.fields().at("epochs").list_value().values_size(), 0);
}

TEST(EpochReportTest, WriteReportJsonWritesTheFileOrNamesIt) {
  TrainLoopOptions options;
  options.mode_name = "nooff";
  EXPECT_TRUE(WriteReportJson({SampleReport()}, options).ok());  // no path: nothing to do
  options.report_json = testing::MakeTempDir("report_json") + "/r.json";
  ASSERT_TRUE(WriteReportJson({SampleReport()}, options).ok());
  EXPECT_EQ(testing::ReadFile(options.report_json), EpochReportsToJson({SampleReport()}, options));
  options.report_json = "/nonexistent-dir/r.json";
  const absl::Status bad = WriteReportJson({SampleReport()}, options);
  EXPECT_FALSE(bad.ok());
  EXPECT_THAT(bad.message(), HasSubstr("/nonexistent-dir/r.json"));
}

TEST(EpochTallyTest, SumsStepsIntoRates) {
  EpochTally tally;
  EpochReport r;
  StepResult a;
  a.loss = 2;
  a.correct = 10;
  a.count = 20;
  a.copy_seconds = 0.1;
  StepResult b = a;
  b.loss = 1;
  b.correct = 20;
  tally.AddStep(a, 0.5, &r);
  tally.AddStep(b, 1.5, &r);
  r.wall_seconds = 4;
  tally.Finish(&r);
  EXPECT_EQ(tally.seen(), 40);
  EXPECT_DOUBLE_EQ(r.compute_seconds, 2.0);
  EXPECT_DOUBLE_EQ(r.copy_seconds, 0.2);
  EXPECT_DOUBLE_EQ(r.images_per_second, 10);
  EXPECT_DOUBLE_EQ(r.mean_loss, 1.5);
  EXPECT_DOUBLE_EQ(r.top1, 0.75);
}

TEST(EpochTallyTest, FusedArrayGetsEachModelsFiguresAndTheirMeans) {
  EpochTally tally;
  EpochReport r;
  StepResult a;
  a.count = 10;
  a.models = {{2.0, 5}, {1.0, 10}};
  a.loss = 1.5;
  StepResult b = a;
  b.models = {{1.0, 5}, {0.5, 0}};
  b.loss = 0.75;
  tally.AddStep(a, 1, &r);
  tally.AddStep(b, 1, &r);
  r.wall_seconds = 2;
  tally.Finish(&r);
  ASSERT_EQ(r.models.size(), 2u);
  EXPECT_DOUBLE_EQ(r.models[0].mean_loss, 1.5);
  EXPECT_DOUBLE_EQ(r.models[0].top1, 0.5);
  EXPECT_DOUBLE_EQ(r.models[1].mean_loss, 0.75);
  EXPECT_DOUBLE_EQ(r.models[1].top1, 0.5);
  EXPECT_DOUBLE_EQ(r.mean_loss, (1.5 + 0.75) / 2);
  EXPECT_DOUBLE_EQ(r.top1, 0.5);
  EXPECT_DOUBLE_EQ(r.images_per_second, 10);

  const std::string text = FormatEpochReport(r, {"lr=0.1", "lr=0.01"});
  EXPECT_THAT(text, HasSubstr("2 fused models, 20.0 model-images/s"));
  EXPECT_THAT(text, HasSubstr("\n  model 0 lr=0.1: loss 1.5000, top-1 0.500"));
  EXPECT_THAT(text, HasSubstr("\n  model 1 lr=0.01: loss 0.7500, top-1 0.500"));
  EXPECT_THAT(FormatEpochReport(SampleReport()), Not(HasSubstr("model")));

  TrainLoopOptions options;
  options.optimizer = "sgd";
  options.model_labels = {"lr=0.1", "lr=0.01"};
  const google::protobuf::Struct doc = ParseJson(EpochReportsToJson({r}, options));
  EXPECT_EQ(Field(doc, "fused_models"), 2);
  EXPECT_EQ(doc.fields().at("model_hyperparameters").list_value().values(1).string_value(),
            "lr=0.01");
  const google::protobuf::Struct& e =
      doc.fields().at("epochs").list_value().values(0).struct_value();
  EXPECT_DOUBLE_EQ(Field(e, "model_images_per_second"), 20);
  const auto& models = e.fields().at("models").list_value().values();
  ASSERT_EQ(models.size(), 2);
  EXPECT_DOUBLE_EQ(Field(models[1].struct_value(), "mean_loss"), 0.75);
  EXPECT_DOUBLE_EQ(Field(models[0].struct_value(), "top1"), 0.5);
}

TEST(DivergenceWatchTest, WarnsOncePerDivergedModel) {
  std::ostringstream log;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(log);
  spdlog::default_logger()->sinks().push_back(sink);
  DivergenceWatch watch({"lr=1", "lr=100"});
  StepResult step;
  step.models = {{1.5, 0}, {std::nan(""), 0}};
  watch.Check(step, 0, 3);
  watch.Check(step, 0, 4);  // already reported
  step.models[0].loss = std::numeric_limits<double>::infinity();
  watch.Check(step, 1, 0);
  DivergenceWatch single({});
  StepResult one;
  one.loss = 2;
  single.Check(one, 0, 0);  // finite: nothing
  one.loss = std::nan("");
  single.Check(one, 0, 1);
  spdlog::default_logger()->sinks().pop_back();
  const std::string text = log.str();
  EXPECT_THAT(text, HasSubstr("model 1 lr=100 diverged: its loss is nan at batch 3 of epoch 0"));
  EXPECT_THAT(text, HasSubstr("model 0 lr=1 diverged: its loss is inf at batch 0 of epoch 1"));
  EXPECT_THAT(text, HasSubstr("the model diverged: its loss is nan at batch 1 of epoch 0"));
  EXPECT_THAT(text, Not(HasSubstr("batch 4")));
}

TEST(SyntheticRunTest, RunsEveryEpochOnAnEmulatedTrainerAndWritesItsReports) {
  absl::StatusOr<std::unique_ptr<EmulatedTrainer>> trainer = testing::TinyEmulatedTrainer(8);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  SyntheticRunOptions synthetic;
  synthetic.batch_size = 8;
  synthetic.crop_size = 4;
  synthetic.num_classes = 3;
  synthetic.samples = 20;  // 8 + 8 + a short batch of 4
  TrainLoopOptions loop;
  loop.epochs = 2;
  loop.mode_name = "synthetic";
  loop.emulated = true;
  const std::string dir = testing::MakeTempDir("synthetic_run");
  loop.report_json = dir + "/r.json";
  loop.batch_timings = dir + "/t.csv";
  absl::StatusOr<std::vector<EpochReport>> reports =
      RunSyntheticTraining(trainer->get(), synthetic, loop);
  ASSERT_TRUE(reports.ok()) << reports.status();
  ASSERT_EQ(reports->size(), 2u);
  for (const EpochReport& r : *reports) {
    EXPECT_TRUE(r.emulated);
    EXPECT_GE(r.compute_seconds, 3 * 0.002);  // each step sleeps at least its compute time
    EXPECT_GT(r.images_per_second, 0);
  }
  EXPECT_EQ((*reports)[1].epoch, 1);
  const google::protobuf::Struct doc = ParseJson(testing::ReadFile(loop.report_json));
  EXPECT_EQ(doc.fields().at("epochs").list_value().values_size(), 2);
  std::ifstream timings(loop.batch_timings);
  int lines = 0;
  for (std::string line; std::getline(timings, line);) ++lines;
  EXPECT_EQ(lines, 1 + 2 * 3);  // header + 3 batches per epoch
}

}  // namespace
}  // namespace sophon
