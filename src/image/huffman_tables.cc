#include "src/image/huffman_tables.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <queue>
#include <utility>
#include <vector>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

namespace sophon::jpeg_internal {
namespace {

// The zigzag order: kZigzag[k] is the natural (row-major) index of the k-th
// coefficient in the order they are coded.
constexpr int kZigzag[64] = {
    0,  1,  8,  16, 9,  2,  3,  10, 17, 24, 32, 25, 18, 11, 4,  5,  12, 19, 26, 33, 40, 48,
    41, 34, 27, 20, 13, 6,  7,  14, 21, 28, 35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23,
    30, 37, 44, 51, 58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63};

constexpr int kMaxDcBits = 11;  // 8-bit samples: DC differences fit in 11 bits
constexpr int kMaxAcBits = 10;  // and AC coefficients in 10

// Bits of |v| (0 for 0).
inline int Magnitude(int v) {
  const unsigned a = static_cast<unsigned>(std::abs(v));
  return a == 0 ? 0 : 32 - __builtin_clz(a);
}

// kToZigzag[r][b]: the zigzag positions, as bits, of the coefficients of
// natural row r whose columns are the set bits of b.
struct ZigzagMasks {
  uint64_t rows[8][256];
  ZigzagMasks() {
    int position[64];
    for (int k = 0; k < 64; ++k) position[kZigzag[k]] = k;
    for (int r = 0; r < 8; ++r) {
      for (int b = 0; b < 256; ++b) {
        uint64_t m = 0;
        for (int col = 0; col < 8; ++col) {
          if (b & (1 << col)) m |= uint64_t{1} << position[r * 8 + col];
        }
        rows[r][b] = m;
      }
    }
  }
};
const ZigzagMasks& ToZigzag() {
  static const ZigzagMasks* masks = new ZigzagMasks();
  return *masks;
}

// Bit k set where coefficient k (natural order) is not zero.
inline uint64_t NonZeroNatural(const JCOEF* block) {
#ifdef __SSE2__
  static_assert(sizeof(JCOEF) == 2, "JCOEF is 16 bits");
  const __m128i zero = _mm_setzero_si128();
  uint64_t zeros = 0;
  for (int i = 0; i < 4; ++i) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 16 * i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 16 * i + 8));
    const __m128i eq = _mm_packs_epi16(_mm_cmpeq_epi16(a, zero), _mm_cmpeq_epi16(b, zero));
    zeros |= static_cast<uint64_t>(static_cast<uint16_t>(_mm_movemask_epi8(eq))) << (16 * i);
  }
  return ~zeros;
#else
  uint64_t nonzero = 0;
  for (int k = 0; k < DCTSIZE2; ++k) nonzero |= static_cast<uint64_t>(block[k] != 0) << k;
  return nonzero;
#endif
}

// The symbols of one block's AC coefficients: run/size pairs, a ZRL for
// every 16 zeros before a non-zero one, an EOB when the block ends in zeros.
// False when a coefficient does not fit in kMaxAcBits.
inline bool CountAc(const JCOEF* block, const ZigzagMasks& to_zigzag, SymbolCounts* ac) {
  const uint64_t natural = NonZeroNatural(block);
  uint64_t nonzero = 0;
  for (int r = 0; r < 8; ++r) nonzero |= to_zigzag.rows[r][(natural >> (8 * r)) & 0xFF];
  nonzero &= ~uint64_t{1};  // the DC is coded apart
  int last = 0;
  while (nonzero != 0) {
    const int k = __builtin_ctzll(nonzero);
    nonzero &= nonzero - 1;
    int run = k - last - 1;
    for (; run > 15; run -= 16) ++(*ac)[0xF0];
    const int size = Magnitude(block[kZigzag[k]]);
    if (size > kMaxAcBits) return false;
    ++(*ac)[(run << 4) | size];
    last = k;
  }
  if (last < DCTSIZE2 - 1) ++(*ac)[0x00];
  return true;
}

}  // namespace

HuffmanTable OptimalHuffmanTable(const SymbolCounts& counts) {
  // Annex K.2: code lengths of a Huffman code for the counts, with a dummy
  // symbol (entry 256, count 1) so that no real code is all 1 bits; then
  // lengths over 16 bits moved up the tree, and the dummy's code dropped.
  // The tree is built with a heap: nodes 0..256 are the symbols, the merged
  // ones follow, each with its parent.
  constexpr int kEntries = 257;
  std::vector<int> parent(2 * kEntries, -1);
  // Least count first; among equal counts the larger node, as K.2 picks
  // them: the dummy symbol ends up with one of the longest codes.
  using Item = std::pair<int64_t, int>;  // count, -node
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> heap;
  for (int i = 0; i < kEntries; ++i) {
    const int64_t count = i < 256 ? counts[i] : 1;
    if (count > 0) heap.push({count, -i});
  }
  int nodes = kEntries;
  while (heap.size() > 1) {
    const Item a = heap.top();
    heap.pop();
    const Item b = heap.top();
    heap.pop();
    parent[-a.second] = parent[-b.second] = nodes;
    heap.push({a.first + b.first, -nodes++});
  }
  // Depths from the root down: a parent is made after its children.
  std::vector<int> depth(static_cast<size_t>(nodes), 0);
  for (int node = nodes - 2; node >= 0; --node) {
    if (parent[node] >= 0) depth[node] = depth[parent[node]] + 1;
  }
  int code_size[kEntries] = {};
  for (int i = 0; i < kEntries; ++i) {
    if (parent[i] >= 0) code_size[i] = depth[i];
  }
  // Lengths over 16 bits moved up the tree (Adjust_BITS).
  int bits[kEntries + 1] = {};
  for (int i = 0; i < kEntries; ++i) {
    if (code_size[i] > 0) ++bits[code_size[i]];
  }
  for (int i = kEntries; i > 16; --i) {
    while (bits[i] > 0) {
      int j = i - 2;
      while (bits[j] == 0) --j;
      bits[i] -= 2;
      ++bits[i - 1];
      bits[j + 1] += 2;
      --bits[j];
    }
  }
  int longest = 16;
  while (longest > 0 && bits[longest] == 0) --longest;
  if (longest > 0) --bits[longest];  // the dummy symbol's code point stays free

  HuffmanTable table;
  for (int i = 1; i <= 16; ++i) table.bits[i] = static_cast<uint8_t>(bits[i]);
  // The symbols by code length, as K.2 orders them before the adjustment.
  for (int len = 1; len <= kEntries; ++len) {
    for (int s = 0; s < 256; ++s) {
      if (code_size[s] == len) table.values[table.num_values++] = static_cast<uint8_t>(s);
    }
  }
  return table;
}

bool CountSymbols(j_compress_ptr cinfo, j_common_ptr array_owner, jvirt_barray_ptr* arrays,
                  std::array<SymbolCounts, NUM_HUFF_TBLS>* dc,
                  std::array<SymbolCounts, NUM_HUFF_TBLS>* ac) {
  const ZigzagMasks& zz = ToZigzag();
  const int n = cinfo->num_components;
  int max_h = 1, max_v = 1;
  for (int c = 0; c < n; ++c) {
    max_h = std::max(max_h, cinfo->comp_info[c].h_samp_factor);
    max_v = std::max(max_v, cinfo->comp_info[c].v_samp_factor);
  }
  auto div_up = [](int64_t a, int64_t b) { return static_cast<int>((a + b - 1) / b); };
  int width_blocks[MAX_COMPONENTS], height_blocks[MAX_COMPONENTS];
  for (int c = 0; c < n; ++c) {
    const jpeg_component_info& comp = cinfo->comp_info[c];
    width_blocks[c] = div_up(static_cast<int64_t>(cinfo->image_width) * comp.h_samp_factor,
                             static_cast<int64_t>(max_h) * DCTSIZE);
    height_blocks[c] = div_up(static_cast<int64_t>(cinfo->image_height) * comp.v_samp_factor,
                              static_cast<int64_t>(max_v) * DCTSIZE);
  }
  auto count_dc = [](int diff, SymbolCounts* counts) {
    const int size = Magnitude(diff);
    if (size > kMaxDcBits) return false;
    ++(*counts)[size];
    return true;
  };

  if (n == 1) {  // not interleaved: one block per MCU, the component's own size
    const jpeg_component_info& comp = cinfo->comp_info[0];
    SymbolCounts* dcc = &(*dc)[comp.dc_tbl_no];
    SymbolCounts* acc = &(*ac)[comp.ac_tbl_no];
    int last_dc = 0;
    for (int row = 0; row < height_blocks[0]; ++row) {
      JBLOCKARRAY buffer = (*array_owner->mem->access_virt_barray)(
          array_owner, arrays[0], static_cast<JDIMENSION>(row), 1, FALSE);
      for (int col = 0; col < width_blocks[0]; ++col) {
        const JCOEF* block = buffer[0][col];
        if (!count_dc(block[0] - last_dc, dcc) || !CountAc(block, zz, acc)) return false;
        last_dc = block[0];
      }
    }
    return true;
  }

  const int mcus_per_row = div_up(cinfo->image_width, static_cast<int64_t>(max_h) * DCTSIZE);
  const int mcu_rows = div_up(cinfo->image_height, static_cast<int64_t>(max_v) * DCTSIZE);
  int last_dc[MAX_COMPONENTS] = {};
  JBLOCKARRAY buffer[MAX_COMPONENTS];
  for (int mcu_row = 0; mcu_row < mcu_rows; ++mcu_row) {
    for (int c = 0; c < n; ++c) {
      const int v = cinfo->comp_info[c].v_samp_factor;
      buffer[c] = (*array_owner->mem->access_virt_barray)(
          array_owner, arrays[c], static_cast<JDIMENSION>(mcu_row * v),
          static_cast<JDIMENSION>(v), FALSE);
    }
    for (int mcu_col = 0; mcu_col < mcus_per_row; ++mcu_col) {
      for (int c = 0; c < n; ++c) {
        const jpeg_component_info& comp = cinfo->comp_info[c];
        SymbolCounts* dcc = &(*dc)[comp.dc_tbl_no];
        SymbolCounts* acc = &(*ac)[comp.ac_tbl_no];
        int previous = 0;  // the DC of the block before, in this MCU
        for (int y = 0; y < comp.v_samp_factor; ++y) {
          const int row = mcu_row * comp.v_samp_factor + y;
          for (int x = 0; x < comp.h_samp_factor; ++x) {
            const int col = mcu_col * comp.h_samp_factor + x;
            int value;
            if (row < height_blocks[c] && col < width_blocks[c]) {
              const JCOEF* block = buffer[c][y][col];
              value = block[0];
              if (!CountAc(block, zz, acc)) return false;
            } else {  // a dummy block: AC zero, DC repeated
              value = previous;
              ++(*acc)[0x00];
            }
            if (!count_dc(value - last_dc[c], dcc)) return false;
            last_dc[c] = previous = value;
          }
        }
      }
    }
  }
  return true;
}

void CoverEverySymbol(SymbolCounts* dc, SymbolCounts* ac) {
  for (int size = 0; size <= kMaxDcBits; ++size) ++(*dc)[size];
  for (int run = 0; run < 16; ++run) {
    for (int size = 1; size <= kMaxAcBits; ++size) ++(*ac)[(run << 4) | size];
  }
  ++(*ac)[0x00];  // EOB
  ++(*ac)[0xF0];  // ZRL
}

bool InstallFittedHuffmanTables(j_compress_ptr cinfo, j_common_ptr array_owner,
                                jvirt_barray_ptr* arrays) {
  std::array<SymbolCounts, NUM_HUFF_TBLS> dc{}, ac{};
  if (!CountSymbols(cinfo, array_owner, arrays, &dc, &ac)) return false;
  bool dc_used[NUM_HUFF_TBLS] = {}, ac_used[NUM_HUFF_TBLS] = {};
  for (int c = 0; c < cinfo->num_components; ++c) {
    dc_used[cinfo->comp_info[c].dc_tbl_no] = true;
    ac_used[cinfo->comp_info[c].ac_tbl_no] = true;
  }
  auto install = [cinfo](JHUFF_TBL** slot, const HuffmanTable& table) {
    if (*slot == nullptr) *slot = jpeg_alloc_huff_table(reinterpret_cast<j_common_ptr>(cinfo));
    std::memcpy((*slot)->bits, table.bits.data(), sizeof((*slot)->bits));
    std::memset((*slot)->huffval, 0, sizeof((*slot)->huffval));
    std::memcpy((*slot)->huffval, table.values.data(), static_cast<size_t>(table.num_values));
    (*slot)->sent_table = FALSE;
  };
  for (int t = 0; t < NUM_HUFF_TBLS; ++t) {
    if (dc_used[t]) {
      SymbolCounts no_ac{};
      CoverEverySymbol(&dc[t], &no_ac);
      install(&cinfo->dc_huff_tbl_ptrs[t], OptimalHuffmanTable(dc[t]));
    }
    if (ac_used[t]) {
      SymbolCounts no_dc{};
      CoverEverySymbol(&no_dc, &ac[t]);
      install(&cinfo->ac_huff_tbl_ptrs[t], OptimalHuffmanTable(ac[t]));
    }
  }
  return true;
}

}  // namespace sophon::jpeg_internal
