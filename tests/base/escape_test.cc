#include "sophon/base/escape.h"

#include <string>

#include "gtest/gtest.h"

namespace sophon {
namespace {

TEST(EscapeNameTest, KeepsPrintableUtf8) {
  EXPECT_EQ(EscapeName("class_1/img 2.jpg"), "class_1/img 2.jpg");
  EXPECT_EQ(EscapeName("chats/\xc3\xa9t\xc3\xa9_\xe7\x8c\xab.jpg"), "chats/\xc3\xa9t\xc3\xa9_\xe7\x8c\xab.jpg");
  EXPECT_EQ(EscapeName("\xf0\x9f\x90\x88.jpg"), "\xf0\x9f\x90\x88.jpg");  // U+1F408
  EXPECT_EQ(EscapeName(""), "");
}

TEST(EscapeNameTest, EscapesControlsSoALogLineCannotBeForged) {
  const std::string forged = "a.jpg\n[2026-01-01 00:00:00.000] [info] all good";
  const std::string escaped = EscapeName(forged);
  EXPECT_EQ(escaped.find('\n'), std::string::npos);
  EXPECT_EQ(escaped, "a.jpg\\n[2026-01-01 00:00:00.000] [info] all good");
  EXPECT_EQ(EscapeName("a\tb\rc"), "a\\tb\\rc");
  EXPECT_EQ(EscapeName(std::string("a\0b", 3)), "a\\x00b");
  EXPECT_EQ(EscapeName("\x1b[31mred\x7f"), "\\x1b[31mred\\x7f");
  EXPECT_EQ(EscapeName("x\xc2\x85y"), "x\\u0085y");            // NEL (C1)
  EXPECT_EQ(EscapeName("x\xe2\x80\xa8y"), "x\\u2028y");        // line separator
  EXPECT_EQ(EscapeName("gpj.\xe2\x80\xae" "exe"), "gpj.\\u202eexe");  // right-to-left override
}

TEST(EscapeNameTest, InvalidUtf8BecomesHexBytes) {
  EXPECT_EQ(EscapeName("caf\xe9.jpg"), "caf\\xe9.jpg");        // Latin-1
  EXPECT_EQ(EscapeName("\xff\xfe"), "\\xff\\xfe");
  EXPECT_EQ(EscapeName("\xc0\xaf"), "\\xc0\\xaf");             // overlong '/'
  EXPECT_EQ(EscapeName("\xed\xa0\x80"), "\\xed\\xa0\\x80");    // surrogate U+D800
  EXPECT_EQ(EscapeName("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // past U+10FFFF
  EXPECT_EQ(EscapeName("\xe7\x8c"), "\\xe7\\x8c");             // cut short
}

// A literal backslash is doubled, so no name can pose as another's escape.
TEST(EscapeNameTest, IsInjective) {
  EXPECT_EQ(EscapeName("a\\b"), "a\\\\b");
  EXPECT_NE(EscapeName("\\xff"), EscapeName("\xff"));
  EXPECT_NE(EscapeName("\\n"), EscapeName("\n"));
}

// Every byte string escapes to valid UTF-8 without controls (what protobuf
// and a log line need), checked over all one- and two-byte strings.
TEST(EscapeNameTest, OutputIsAlwaysPrintableAscii) {
  for (int a = 0; a < 256; ++a) {
    for (int b = 0; b < 256; ++b) {
      const std::string in = {static_cast<char>(a), static_cast<char>(b)};
      const std::string out = EscapeName(in);
      const bool utf8_multibyte = static_cast<unsigned char>(out[0]) >= 0x80;
      if (utf8_multibyte) {
        EXPECT_EQ(out, in);  // a valid two-byte sequence, kept
        continue;
      }
      for (char c : out) {
        ASSERT_TRUE(c >= 0x20 && c < 0x7f) << "input " << a << "," << b << " -> " << out;
      }
    }
  }
}

}  // namespace
}  // namespace sophon
