#include "src/image/cut_source.h"

// clang-format off
#include <jerror.h>
// clang-format on

#include <algorithm>

namespace sophon::jpeg_internal {
namespace {

// Bytes handed to libjpeg at a time: the cut lands at most this far past
// the last row wanted.
constexpr size_t kChunk = 4096;

const JOCTET kEoi[2] = {0xFF, JPEG_EOI};

void InitSource(j_decompress_ptr) {}

boolean FillInputBuffer(j_decompress_ptr cinfo) {
  auto* source = reinterpret_cast<CutSource*>(cinfo->src);
  // The decoder asks for more only inside the scan's data or its markers:
  // here the rows read so far are counted in input_iMCU_row.
  if (!source->cut && source->stop_after_rows > 0 &&
      cinfo->input_iMCU_row >= source->stop_after_rows) {
    source->cut = true;
    source->err->data_cut = true;
  }
  if (source->cut || source->next >= source->size) {
    if (!source->cut) WARNMS(cinfo, JWRN_JPEG_EOF);
    source->pub.next_input_byte = kEoi;
    source->pub.bytes_in_buffer = sizeof(kEoi);
    return TRUE;
  }
  const size_t n = std::min(kChunk, source->size - source->next);
  source->pub.next_input_byte = source->data + source->next;
  source->pub.bytes_in_buffer = n;
  source->next += n;
  return TRUE;
}

void SkipInputData(j_decompress_ptr cinfo, long num_bytes) {
  if (num_bytes <= 0) return;
  jpeg_source_mgr* src = cinfo->src;
  while (num_bytes > static_cast<long>(src->bytes_in_buffer)) {
    num_bytes -= static_cast<long>(src->bytes_in_buffer);
    FillInputBuffer(cinfo);  // never suspends
  }
  src->next_input_byte += num_bytes;
  src->bytes_in_buffer -= static_cast<size_t>(num_bytes);
}

void TermSource(j_decompress_ptr) {}

}  // namespace

void UseCutSource(j_decompress_ptr cinfo, absl::string_view bytes, ErrorManager* err,
                  CutSource* source) {
  source->pub.init_source = InitSource;
  source->pub.fill_input_buffer = FillInputBuffer;
  source->pub.skip_input_data = SkipInputData;
  source->pub.resync_to_restart = jpeg_resync_to_restart;
  source->pub.term_source = TermSource;
  source->pub.next_input_byte = nullptr;
  source->pub.bytes_in_buffer = 0;
  source->data = reinterpret_cast<const JOCTET*>(bytes.data());
  source->size = bytes.size();
  source->next = 0;
  source->stop_after_rows = 0;
  source->cut = false;
  source->err = err;
  cinfo->src = &source->pub;
}

void StopAfterRows(j_decompress_ptr cinfo, JDIMENSION rows) {
  auto* source = reinterpret_cast<CutSource*>(cinfo->src);
  // Progressive files refine every row in later scans, a non-interleaved
  // file sends the other components in later scans, and the arithmetic
  // decoder is left alone: only one Huffman scan of everything is cut.
  if (cinfo->progressive_mode || cinfo->arith_code || cinfo->comps_in_scan != cinfo->num_components) {
    return;
  }
  source->stop_after_rows = rows;
}

}  // namespace sophon::jpeg_internal
