// Internal to src/image: Huffman tables fitted to the coefficients the lossless
// crop writes. libjpeg can fit them itself (optimize_coding), but it does so
// with a second pass of its encoder over every block that costs three times
// the encoding pass. Here the symbols are counted straight from the blocks
// (a 64-bit mask of each block's non-zero coefficients) and the tables built
// as JPEG's Annex K.2 describes.
//
// Every symbol the encoder could emit gets a code, the ones counted zero times
// too (with the longest lengths): a count that missed a symbol costs a few
// bits, never a code missing from the table (libjpeg would write a corrupt
// file without an error).
#ifndef SOPHON_SRC_IMAGE_HUFFMAN_TABLES_H_
#define SOPHON_SRC_IMAGE_HUFFMAN_TABLES_H_

// clang-format off
#include <cstdio>
#include <jpeglib.h>
// clang-format on

#include <array>
#include <cstdint>

namespace sophon::jpeg_internal {

// How often each symbol of one Huffman table is used.
using SymbolCounts = std::array<int64_t, 256>;

// A Huffman table in the form JPEG stores it: bits[k] codes of length k
// (k = 1..16; bits[0] unused), then the symbols in order of code length.
struct HuffmanTable {
  std::array<uint8_t, 17> bits{};
  std::array<uint8_t, 256> values{};
  int num_values = 0;
};

// The length-limited (16 bits) optimal table for `counts` (Annex K.2), with
// one code point kept free (no code of all 1 bits). Symbols counted 0 times
// have no code.
HuffmanTable OptimalHuffmanTable(const SymbolCounts& counts);

// Adds up the DC and AC symbols, per table number, that a sequential,
// single-scan Huffman encoding of `arrays` emits: one virtual array per
// component of `cinfo` (whose size, sampling factors and table numbers are
// set as jpeg_write_coefficients will use them, with no restart interval),
// accessed through `array_owner`, the object that made them. Follows
// libjpeg's encoder: components interleaved in MCUs (one block per MCU for a
// single component), dummy blocks past the right and bottom edges (AC zero,
// DC the previous block's), DC differences per component, runs of zeros as
// ZRL and EOB symbols. False when a coefficient is out of range for 8-bit
// samples (a DC difference over 11 bits, an AC value over 10), which the
// encoder cannot code.
bool CountSymbols(j_compress_ptr cinfo, j_common_ptr array_owner, jvirt_barray_ptr* arrays,
                  std::array<SymbolCounts, NUM_HUFF_TBLS>* dc,
                  std::array<SymbolCounts, NUM_HUFF_TBLS>* ac);

// Adds one use of every symbol the encoder can emit for 8-bit samples (DC
// sizes 0..11; AC run/size pairs with sizes 1..10, EOB, ZRL), so that a table
// made from the counts has a code for each.
void CoverEverySymbol(SymbolCounts* dc, SymbolCounts* ac);

// Fits the Huffman tables of `cinfo` to `arrays` (CountSymbols, CoverEverySymbol,
// OptimalHuffmanTable) and installs them; call after the parameters are set
// and before jpeg_write_coefficients, with optimize_coding off. False, with
// nothing installed, where CountSymbols finds a coefficient out of range.
bool InstallFittedHuffmanTables(j_compress_ptr cinfo, j_common_ptr array_owner,
                                jvirt_barray_ptr* arrays);

}  // namespace sophon::jpeg_internal

#endif  // SOPHON_SRC_IMAGE_HUFFMAN_TABLES_H_
