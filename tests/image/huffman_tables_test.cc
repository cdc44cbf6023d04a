#include "src/image/huffman_tables.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "sophon/image/jpeg_crop.h"
#include "tests/test_util.h"

namespace sophon::jpeg_internal {
namespace {

// Each symbol's code length in `table` (0: no code).
std::array<int, 256> CodeLengths(const HuffmanTable& table) {
  std::array<int, 256> lengths{};
  int i = 0;
  for (int len = 1; len <= 16; ++len) {
    for (int k = 0; k < table.bits[len]; ++k) lengths[table.values[i++]] = len;
  }
  return lengths;
}

// A valid JPEG table for `counts`: every counted symbol, and only those, has
// a code of at most 16 bits; the lengths leave the all-1 code point free
// (Kraft sum below 1); a more frequent symbol never has a longer code.
void ExpectValidTable(const SymbolCounts& counts, const HuffmanTable& table) {
  int total = 0;
  uint64_t kraft = 0;  // in units of 2^-16
  for (int len = 1; len <= 16; ++len) {
    total += table.bits[len];
    kraft += static_cast<uint64_t>(table.bits[len]) << (16 - len);
  }
  EXPECT_EQ(total, table.num_values);
  EXPECT_LT(kraft, uint64_t{1} << 16);
  const std::array<int, 256> lengths = CodeLengths(table);
  for (int s = 0; s < 256; ++s) {
    EXPECT_EQ(lengths[s] > 0, counts[s] > 0) << "symbol " << s;
  }
  for (int a = 0; a < 256; ++a) {
    for (int b = 0; b < 256; ++b) {
      if (counts[a] > counts[b] && counts[b] > 0) {
        EXPECT_LE(lengths[a], lengths[b]) << "symbols " << a << " and " << b;
      }
    }
  }
}

TEST(HuffmanTablesTest, OptimalTablesAreValidPrefixCodes) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    SymbolCounts counts{};
    const int symbols = 1 + static_cast<int>(rng() % 256);
    for (int i = 0; i < symbols; ++i) counts[rng() % 256] = 1 + static_cast<int64_t>(rng() % 100000);
    SCOPED_TRACE(absl::StrCat("trial ", trial));
    ExpectValidTable(counts, OptimalHuffmanTable(counts));
  }
}

TEST(HuffmanTablesTest, LengthsOverSixteenBitsAreLimited) {
  // Fibonacci counts make a Huffman tree as deep as there are symbols.
  SymbolCounts counts{};
  int64_t a = 1, b = 1;
  for (int s = 0; s < 40; ++s) {
    counts[s] = a;
    const int64_t c = a + b;
    a = b;
    b = c;
  }
  const HuffmanTable table = OptimalHuffmanTable(counts);
  ExpectValidTable(counts, table);
  EXPECT_EQ(table.num_values, 40);
  EXPECT_GT(table.bits[16], 0);  // limited, not dropped
}

TEST(HuffmanTablesTest, TheAllOnesCodePointStaysFree) {
  SymbolCounts counts{};
  counts[3] = 10;
  counts[7] = 5;
  const HuffmanTable table = OptimalHuffmanTable(counts);
  ExpectValidTable(counts, table);
  const std::array<int, 256> lengths = CodeLengths(table);
  EXPECT_EQ(lengths[3], 1);
  EXPECT_EQ(lengths[7], 2);  // the dummy symbol takes the all-1 code point
}

TEST(HuffmanTablesTest, CoverEverySymbolCoversTheEncodersAlphabet) {
  SymbolCounts dc{}, ac{};
  CoverEverySymbol(&dc, &ac);
  for (int size = 0; size <= 11; ++size) EXPECT_EQ(dc[size], 1);
  for (int size = 12; size < 256; ++size) EXPECT_EQ(dc[size], 0);
  int ac_symbols = 0;
  for (int s = 0; s < 256; ++s) ac_symbols += ac[s] > 0;
  EXPECT_EQ(ac_symbols, 162);  // 16 runs x 10 sizes, EOB, ZRL
  EXPECT_EQ(ac[0x00], 1);
  EXPECT_EQ(ac[0xF0], 1);
  EXPECT_EQ(ac[0x0B], 0);  // size 11 and more: not for 8-bit samples
}

// The coefficients of a JPEG, read, and an encoder set up with its
// parameters, as the crop sets up its own.
struct Transcoder {
  jpeg_decompress_struct src;
  jpeg_compress_struct dst;
  jpeg_error_mgr src_err, dst_err;
  jvirt_barray_ptr* arrays = nullptr;

  explicit Transcoder(const std::string& jpeg) {
    src.err = jpeg_std_error(&src_err);
    dst.err = jpeg_std_error(&dst_err);
    jpeg_create_decompress(&src);
    jpeg_create_compress(&dst);
    jpeg_mem_src(&src, reinterpret_cast<const unsigned char*>(jpeg.data()),
                 static_cast<unsigned long>(jpeg.size()));
    jpeg_read_header(&src, TRUE);
    arrays = jpeg_read_coefficients(&src);
    jpeg_copy_critical_parameters(&src, &dst);
    if (src.num_components == 4) dst.write_Adobe_marker = src.saw_Adobe_marker;
  }
  ~Transcoder() {
    jpeg_destroy_compress(&dst);
    jpeg_destroy_decompress(&src);
  }
};

// libjpeg's own fitted tables (optimize_coding) for the coefficients of `jpeg`.
std::string RewriteWithLibjpegTables(const std::string& jpeg) {
  Transcoder t(jpeg);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&t.dst, &buffer, &size);
  t.dst.optimize_coding = TRUE;
  jpeg_write_coefficients(&t.dst, t.arrays);
  jpeg_finish_compress(&t.dst);
  std::string out(reinterpret_cast<const char*>(buffer), size);
  std::free(buffer);
  return out;
}

// The symbols of each Huffman table of `jpeg` (as libjpeg's optimize_coding
// writes them: the symbols used, no others), by table number.
struct TableSymbols {
  std::array<std::set<int>, NUM_HUFF_TBLS> dc, ac;
};
TableSymbols SymbolsInTables(const std::string& jpeg) {
  jpeg_decompress_struct cinfo;
  jpeg_error_mgr err;
  cinfo.err = jpeg_std_error(&err);
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, reinterpret_cast<const unsigned char*>(jpeg.data()),
               static_cast<unsigned long>(jpeg.size()));
  jpeg_read_header(&cinfo, TRUE);
  TableSymbols out;
  auto symbols = [](const JHUFF_TBL* t, std::set<int>* into) {
    if (t == nullptr) return;
    int n = 0;
    for (int len = 1; len <= 16; ++len) n += t->bits[len];
    for (int i = 0; i < n; ++i) into->insert(t->huffval[i]);
  };
  for (int t = 0; t < NUM_HUFF_TBLS; ++t) {
    symbols(cinfo.dc_huff_tbl_ptrs[t], &out.dc[t]);
    symbols(cinfo.ac_huff_tbl_ptrs[t], &out.ac[t]);
  }
  jpeg_destroy_decompress(&cinfo);
  return out;
}

// CountSymbols over the coefficients of `jpeg`, set up as the crop sets up
// its encoder.
TableSymbols CountedSymbols(const std::string& jpeg) {
  Transcoder t(jpeg);
  std::array<SymbolCounts, NUM_HUFF_TBLS> dc{}, ac{};
  EXPECT_TRUE(CountSymbols(&t.dst, reinterpret_cast<j_common_ptr>(&t.src), t.arrays, &dc, &ac));
  TableSymbols out;
  for (int table = 0; table < NUM_HUFF_TBLS; ++table) {
    for (int s = 0; s < 256; ++s) {
      if (dc[table][s] > 0) out.dc[table].insert(s);
      if (ac[table][s] > 0) out.ac[table].insert(s);
    }
  }
  return out;
}

// The symbols counted from the blocks are exactly those libjpeg's encoder
// emits (its optimize_coding pass lists them in its tables), over every
// encoding and regions with partial MCUs at their edges (dummy blocks); and
// the region codes about as tightly as with libjpeg's fitted tables (the
// symbols it never uses cost at most a few hundred bytes of table).
TEST(HuffmanTablesTest, CountsMatchLibjpegsEncoderAndRegionsAreAsSmall) {
  const Image8 img = testing::MakeTestImage(477, 631, 3);
  const CropBox boxes[] = {{0, 0, 477, 631}, {37, 41, 200, 301}, {400, 500, 77, 131}};
  for (const testing::NamedEncoding& e : testing::AllJpegEncodings()) {
    const std::string jpeg = testing::EncodeJpeg(img, e.options);
    for (const CropBox& box : boxes) {
      SCOPED_TRACE(absl::StrCat(e.name, " box top ", box.top, " left ", box.left));
      absl::StatusOr<JpegRegion> region = CropJpegLossless(
          jpeg, 48, DecodeLimits(), [&](const ImageInfo&) -> absl::StatusOr<CropBox> {
            return box;
          });
      if (!region.ok()) {  // the whole image is no smaller than the file
        EXPECT_EQ(region.status().code(), absl::StatusCode::kUnimplemented) << region.status();
        continue;
      }
      const std::string libjpeg = RewriteWithLibjpegTables(region->jpeg);
      const TableSymbols emitted = SymbolsInTables(libjpeg);
      const TableSymbols counted = CountedSymbols(region->jpeg);
      for (int t = 0; t < NUM_HUFF_TBLS; ++t) {
        EXPECT_EQ(counted.dc[t], emitted.dc[t]) << "DC table " << t;
        EXPECT_EQ(counted.ac[t], emitted.ac[t]) << "AC table " << t;
      }
      EXPECT_LE(region->jpeg.size(), libjpeg.size() + libjpeg.size() / 100 + 400)
          << region->jpeg.size() << " bytes against libjpeg's " << libjpeg.size();
    }
  }
}

}  // namespace
}  // namespace sophon::jpeg_internal
