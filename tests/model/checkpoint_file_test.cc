// Sophon's checkpoint files (torch.save's format) and the module archives of
// earlier versions: written, read, and anything else refused by name.
#include "model/checkpoint_file.h"

#include <caffe2/serialize/inline_container.h>
#include <sys/stat.h>
#include <torch/torch.h>

#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/models.h"
#include "model/module_archive.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

using ::testing::HasSubstr;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

class CheckpointFileTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::MakeTempDir("checkpoint_file"); }
  std::string dir_;
};

TEST_F(CheckpointFileTest, WritesAndReadsEveryKindOfEntry) {
  c10::impl::GenericDict root = NewCheckpointRoot("test");
  root.insert("int", int64_t{-7});
  root.insert("string", std::string("resnet18"));
  root.insert("bool", true);
  root.insert("tensor", torch::arange(6, torch::kFloat).reshape({2, 3}));
  c10::impl::GenericList list(c10::AnyType::get());
  list.push_back(int64_t{1});
  list.push_back(torch::ones({2}, torch::kHalf));
  root.insert("list", list);
  c10::impl::GenericDict inner = NewCheckpointDict();
  inner.insert("epoch", int64_t{3});
  root.insert("dict", inner);
  const std::string path = dir_ + "/all.pt";
  ASSERT_TRUE(WriteCheckpointFile(path, root).ok());

  absl::StatusOr<CheckpointFormat> format = DetectCheckpointFormat(path);
  ASSERT_TRUE(format.ok()) << format.status();
  EXPECT_EQ(*format, CheckpointFormat::kPickled);
  absl::StatusOr<c10::impl::GenericDict> read = ReadCheckpointFile(path, "test");
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*IntEntry(*read, "int", "x"), -7);
  EXPECT_EQ(*StringEntry(*read, "string", "x"), "resnet18");
  EXPECT_TRUE(*BoolEntry(*read, "bool", "x"));
  EXPECT_TRUE(torch::equal(*TensorEntry(*read, "tensor", "x"),
                           torch::arange(6, torch::kFloat).reshape({2, 3})));
  EXPECT_EQ(read->at("list").toList().size(), 2u);
  EXPECT_EQ(*IntEntry(*DictEntry(*read, "dict", "x"), "epoch", "x"), 3);

  absl::StatusOr<int64_t> wrong = IntEntry(*read, "string", "checkpoint 'x'");
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(wrong.status().message(), HasSubstr("\"string\""));
  EXPECT_THAT(IntEntry(*read, "missing", "x").status().message(), HasSubstr("\"missing\""));
}

// Not the temporary file's 0600: a server running as another user reads a
// backbone.
TEST_F(CheckpointFileTest, AFileGetsTheModeTheUmaskGives) {
  const mode_t previous = umask(027);
  const absl::Status written = WriteCheckpointFile(dir_ + "/mode.pt", NewCheckpointRoot("test"));
  umask(previous);
  ASSERT_TRUE(written.ok()) << written;
  struct stat info;
  ASSERT_EQ(stat((dir_ + "/mode.pt").c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0640u);
}

TEST_F(CheckpointFileTest, TruncatedFilesAreRefusedByNameAtEveryLength) {
  const std::string path = dir_ + "/whole.pt";
  c10::impl::GenericDict root = NewCheckpointRoot("test");
  root.insert("tensor", torch::randn({64, 64}));
  ASSERT_TRUE(WriteCheckpointFile(path, root).ok());
  const std::string bytes = ReadAll(path);
  for (size_t n = 0; n < bytes.size(); n += bytes.size() / 29 + 1) {
    const std::string cut = dir_ + "/cut.pt";
    testing::WriteFile(cut, bytes.substr(0, n));
    absl::StatusOr<c10::impl::GenericDict> read = ReadCheckpointFile(cut, "test");
    ASSERT_FALSE(read.ok()) << n << " bytes";
    EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument) << n;
    EXPECT_THAT(read.status().message(), HasSubstr(cut)) << n;
  }
}

TEST_F(CheckpointFileTest, ForeignFilesAreRefusedByName) {
  EXPECT_EQ(ReadCheckpointFile(dir_ + "/missing.pt", "test").status().code(),
            absl::StatusCode::kNotFound);

  testing::WriteFile(dir_ + "/text.pt", "not a checkpoint at all");
  absl::StatusOr<c10::impl::GenericDict> text = ReadCheckpointFile(dir_ + "/text.pt", "test");
  EXPECT_THAT(text.status().message(), HasSubstr("not a zip archive"));
  EXPECT_THAT(text.status().message(), HasSubstr(dir_ + "/text.pt"));

  {  // A zip of another program.
    caffe2::serialize::PyTorchStreamWriter zip(dir_ + "/other.zip");
    zip.writeRecord("notes.txt", "hello", 5);
    zip.writeEndOfFile();
  }
  absl::StatusOr<c10::impl::GenericDict> other = ReadCheckpointFile(dir_ + "/other.zip", "test");
  EXPECT_EQ(other.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(other.status().message(), HasSubstr("without data.pkl"));

  // torch.save's format, but not Sophon's: no format entry, another version, another kind.
  c10::impl::GenericDict plain = NewCheckpointDict();
  plain.insert("weights", torch::ones({2}));
  ASSERT_TRUE(WriteCheckpointFile(dir_ + "/plain.pt", plain).ok());
  EXPECT_THAT(ReadCheckpointFile(dir_ + "/plain.pt", "test").status().message(),
              HasSubstr("is not a Sophon checkpoint"));
  c10::impl::GenericDict future = NewCheckpointRoot("test");
  future.insert_or_assign("version", int64_t{99});
  ASSERT_TRUE(WriteCheckpointFile(dir_ + "/future.pt", future).ok());
  EXPECT_THAT(ReadCheckpointFile(dir_ + "/future.pt", "test").status().message(),
              HasSubstr("format version 99"));
  ASSERT_TRUE(WriteCheckpointFile(dir_ + "/model.pt", NewCheckpointRoot("model")).ok());
  EXPECT_THAT(ReadCheckpointFile(dir_ + "/model.pt", "training").status().message(),
              HasSubstr("is not a training checkpoint: it is a model checkpoint"));
}

TEST_F(CheckpointFileTest, AStateDictLoadsOnlyIntoTheSameNamesAndShapes) {
  absl::StatusOr<Classifier> a = MakeModel("tinycnn", 4);
  absl::StatusOr<Classifier> b = MakeModel("tinycnn", 4);
  absl::StatusOr<Classifier> other = MakeModel("tinycnn", 5);
  ASSERT_TRUE(a.ok() && b.ok() && other.ok());
  const c10::impl::GenericDict state = StateDict(**a);
  ASSERT_TRUE(LoadStateDict(state, **b, "here").ok());
  for (const auto& item : (*a)->named_parameters()) {
    EXPECT_TRUE(torch::equal(item.value(), *(*b)->named_parameters().find(item.key())))
        << item.key();
  }
  absl::Status shape = LoadStateDict(state, **other, "checkpoint 'c'");
  EXPECT_EQ(shape.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(shape.message(), HasSubstr("checkpoint 'c': tensor '"));

  c10::impl::GenericDict missing = state.copy();
  const std::string first = missing.begin()->key().toStringRef();
  (void)missing.erase(first);
  EXPECT_THAT(LoadStateDict(missing, **b, "c").message(), HasSubstr("no tensor '" + first + "'"));
  c10::impl::GenericDict extra = state.copy();
  extra.insert("stray.weight", torch::ones({1}));
  EXPECT_THAT(LoadStateDict(extra, **b, "c").message(), HasSubstr("stray.weight"));
}

// Model checkpoints of earlier versions (LibTorch's module archive) still load.
TEST_F(CheckpointFileTest, ModuleArchivesOfEarlierVersionsAreRead) {
  torch::manual_seed(3);
  absl::StatusOr<Classifier> saved = MakeModel("tinycnn", 4);
  ASSERT_TRUE(saved.ok());
  const std::string old_file = dir_ + "/old.pt";
  ASSERT_TRUE(WriteModuleArchive(*saved, "tinycnn", 4, old_file).ok());
  absl::StatusOr<CheckpointFormat> format = DetectCheckpointFormat(old_file);
  ASSERT_TRUE(format.ok()) << format.status();
  EXPECT_EQ(*format, CheckpointFormat::kModuleArchive);

  absl::StatusOr<CheckpointInfo> info = ReadCheckpointInfo(old_file);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->arch, "tinycnn");
  EXPECT_EQ(info->num_classes, 4);
  absl::StatusOr<FrozenModel> old = LoadFrozenModel(old_file);
  ASSERT_TRUE(old.ok()) << old.status();

  const std::string new_file = dir_ + "/new.pt";
  ASSERT_TRUE(SaveModel(*saved, "tinycnn", 4, new_file).ok());
  absl::StatusOr<FrozenModel> now = LoadFrozenModel(new_file);
  ASSERT_TRUE(now.ok()) << now.status();
  const torch::Tensor input = torch::randn({2, 3, 32, 32});
  EXPECT_TRUE(torch::equal(old->net->forward(input), now->net->forward(input)));

  absl::Status wrong = LoadModel(new_file, "tinycnn", 5, *MakeModel("tinycnn", 5));
  EXPECT_THAT(wrong.message(), HasSubstr("holds tinycnn with 4 classes, not tinycnn with 5"));
}

}  // namespace
}  // namespace sophon
