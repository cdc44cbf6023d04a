#include "sophon/base/json.h"

#include <limits>

#include "gtest/gtest.h"

namespace sophon {
namespace {

TEST(JsonWriterTest, NestsAndSeparates) {
  JsonWriter w;
  w.BeginObject();
  w.Key("a").Int(-1);
  w.Key("b").BeginArray().Uint(1).Bool(true).String("x").EndArray();
  w.Key("c").BeginObject().EndObject();
  w.Key("d").Fixed(1.5, 3);
  w.Key("e").Number(0.25);
  w.EndObject();
  EXPECT_EQ(w.Take(), "{\"a\": -1, \"b\": [1, true, \"x\"], \"c\": {}, \"d\": 1.500, \"e\": 0.25}\n");
  // Take() leaves the writer empty for the next document.
  w.BeginArray().EndArray();
  EXPECT_EQ(w.Take(), "[]\n");
}

TEST(JsonWriterTest, EscapesStringsAndNullsNonFiniteNumbers) {
  EXPECT_EQ(JsonQuote("a\"b\\c\nd\x01"), "\"a\\\"b\\\\c\\u000ad\\u0001\"");
  JsonWriter w;
  w.BeginArray()
      .Number(std::numeric_limits<double>::infinity())
      .Fixed(std::numeric_limits<double>::quiet_NaN(), 2)
      .EndArray();
  EXPECT_EQ(w.Take(), "[null, null]\n");
}

}  // namespace
}  // namespace sophon
