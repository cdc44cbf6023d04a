#include "sophon/base/csv.h"

#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace sophon::csv {
namespace {

TEST(CsvTest, SplitLinesNumbersAndSkipsBlankLines) {
  const std::vector<Line> lines = SplitLines("a,b\r\n\n  \nc\n");
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].number, 1);
  EXPECT_EQ(lines[0].text, "a,b");
  EXPECT_EQ(lines[1].number, 4);
  EXPECT_EQ(lines[1].text, "c");
}

TEST(CsvTest, QuotedFieldsRoundTrip) {
  const std::string label = "a, \"quoted\" label";
  const std::string line = QuoteField(label) + ", 2 ," + QuoteField("plain");
  absl::StatusOr<std::vector<std::string>> f = SplitQuotedFields(line, ',');
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(*f, (std::vector<std::string>{label, "2", "plain"}));
  EXPECT_EQ(QuoteField("two\nlines"), "\"two lines\"");
  EXPECT_FALSE(SplitQuotedFields("\"open,1", ',').ok());
}

TEST(CsvTest, PlainFieldsListsAndNumbers) {
  EXPECT_EQ(SplitFields(" 1 ; 2;", ';'), (std::vector<absl::string_view>{"1", "2"}));
  EXPECT_EQ(SplitList(" a, ,b,"), (std::vector<std::string>{"a", "b"}));
  uint64_t u = 0;
  EXPECT_TRUE(ParseUint("42", &u));
  EXPECT_EQ(u, 42u);
  EXPECT_FALSE(ParseUint("-1", &u));
  double d = 0;
  EXPECT_TRUE(ParseDouble("2.5", &d));
  EXPECT_FALSE(ParseDouble("inf", &d));
  EXPECT_EQ(LineError("f.csv", 3, "bad").message(), "f.csv:3: bad");
}

TEST(CsvTest, ReadFileNamesThePath) {
  const std::string dir = testing::MakeTempDir("csv_read");
  testing::WriteFile(dir + "/a.csv", "x\n");
  EXPECT_EQ(*ReadFile(dir + "/a.csv"), "x\n");
  const absl::Status missing = ReadFile(dir + "/missing.csv").status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.message().find(dir + "/missing.csv"), std::string::npos);
}

}  // namespace
}  // namespace sophon::csv
