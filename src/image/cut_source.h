// Internal to src/image: a libjpeg data source over bytes in memory that can
// end the data early. Once the decoder has read a given number of iMCU rows
// of a file with a single Huffman-coded scan holding every component, the
// source answers with an EOI marker instead of the rest of the file: the
// rows below are never entropy-decoded (libjpeg fills them with nothing and
// goes on to the end of the image at no cost). The lossless crop uses it to
// stop reading coefficients below its region.
#ifndef SOPHON_SRC_IMAGE_CUT_SOURCE_H_
#define SOPHON_SRC_IMAGE_CUT_SOURCE_H_

// clang-format off
#include <cstdio>
#include <jpeglib.h>
// clang-format on

#include <cstddef>

#include "absl/strings/string_view.h"
#include "src/image/jpeg_guard.h"

namespace sophon::jpeg_internal {

struct CutSource {
  jpeg_source_mgr pub;
  const JOCTET* data;
  size_t size;
  size_t next;                 // the first byte not yet handed to libjpeg
  JDIMENSION stop_after_rows;  // iMCU rows; 0: read everything
  bool cut;                    // the data was ended early
  ErrorManager* err;           // told of the cut (its warnings dropped)
};

// Installs `source` as cinfo's data source over `bytes` (which must outlive
// the decode), reading everything until StopAfterRows is called. Like
// jpeg_mem_src, it warns JWRN_JPEG_EOF (ErrorManager::premature_eof) and
// inserts an EOI marker if the bytes end before the image does.
void UseCutSource(j_decompress_ptr cinfo, absl::string_view bytes, ErrorManager* err,
                  CutSource* source);

// Ends the data once `rows` iMCU rows are read, if the file is sequential,
// Huffman-coded and has all its components in its one scan (known once the
// header is read); otherwise nothing changes. Call before
// jpeg_read_coefficients.
void StopAfterRows(j_decompress_ptr cinfo, JDIMENSION rows);

}  // namespace sophon::jpeg_internal

#endif  // SOPHON_SRC_IMAGE_CUT_SOURCE_H_
