// Internal to src/image: how every libjpeg call of Sophon is guarded. Errors
// come back as a status (libjpeg's exit()-ing handler is replaced by a
// longjmp), corrupt-data warnings fail a strict decode, and the scan and
// memory caps of DecodeLimits are checked before the work they bound. The
// decoder (jpeg_codec.cc) and the lossless crop (jpeg_crop.cc) share it, so a
// hostile file meets the same defences in both.
#ifndef SOPHON_SRC_IMAGE_JPEG_GUARD_H_
#define SOPHON_SRC_IMAGE_JPEG_GUARD_H_

// clang-format off
#include <csetjmp>
#include <cstdio>
#include <jpeglib.h>
// clang-format on

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "sophon/image/jpeg_codec.h"

namespace sophon::jpeg_internal {

// Output rows in one iMCU row of the decoder (after scaling). libjpeg-turbo
// builds with either API: jpeg62 (Debian) has one min_DCT_scaled_size, the
// jpeg7/8 API (Ubuntu's libjpeg-turbo8) a horizontal and a vertical one.
inline int OutputRowsPerImcuRow(const jpeg_decompress_struct& cinfo) {
#if JPEG_LIB_VERSION >= 70
  return cinfo.max_v_samp_factor * cinfo.min_DCT_v_scaled_size;
#else
  return cinfo.max_v_samp_factor * cinfo.min_DCT_scaled_size;
#endif
}

// libjpeg's error manager with the jump target and the status of the error
// that jumped. Set up by InitGuard; `jump` by the caller's setjmp.
struct ErrorManager {
  jpeg_error_mgr pub;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX + 200];
  absl::StatusCode code;  // of the error that jumped
  bool premature_eof;
  bool strict;
  // Set by a data source that ended the data on purpose (CutSource): the
  // warnings that follow are about data never read, and are dropped.
  bool data_cut;
  // Corrupt-data warnings seen (those a lenient decode lets through).
  int corrupt_warnings;
  int64_t max_memory_bytes;
  // libjpeg's own alloc_sarray, which DefineSampleRows wraps (null until then).
  JSAMPARRAY (*alloc_sarray)(j_common_ptr cinfo, int pool_id, JDIMENSION samplesperrow,
                             JDIMENSION numrows);
};

// Counts the scans of an image as libjpeg reaches them, and the samples
// (64 per 8x8 block of each component in the scan) that each scan decodes;
// stops at either limit. libjpeg runs the monitor before each scan's data is
// consumed (and per row), so a refused scan costs nothing.
struct ScanMonitor {
  jpeg_progress_mgr pub;
  int max_scans;
  int64_t max_scan_samples;
  int counted_scan;      // the last scan whose samples are counted
  int64_t scan_samples;  // summed over the scans so far
};

// Fills both for `limits`; the caller then sets cinfo.err = &err->pub (via
// jpeg_std_error, done here) and cinfo.progress = &monitor->pub.
void InitGuard(const DecodeLimits& limits, ErrorManager* err, ScanMonitor* monitor);

// Makes every sample row that the decode of `cinfo` allocates (the decoder's
// component and upsampled rows) start zeroed, padding included. libjpeg-turbo's
// SIMD kernels read and compute past the last column a decode writes and drop
// what they computed there; see jpeg_guard.cc for why those bytes must still be
// defined. REQUIRES: cinfo->err is the ErrorManager of this decode; called
// after jpeg_create_decompress and before jpeg_start_decompress.
void DefineSampleRows(j_decompress_ptr cinfo);

// The status of the error that jumped.
inline absl::Status JumpedStatus(const ErrorManager& err) {
  return absl::Status(err.code, err.message);
}

// Bytes of the whole-image coefficient arrays that libjpeg allocates for a
// progressive or multi-scan image, or for any image read as coefficients
// (JCOEF per coefficient, 64 per block, each component padded to its
// sampling factors), from the header alone.
int64_t CoefficientBytes(const jpeg_decompress_struct& cinfo);

// Cheap checks before libjpeg sees the data: the SOI marker at the start and an
// EOI marker near the end (entropy-coded data cannot contain FF D9, so a file
// truncated inside its scan has none in its tail).
absl::Status CheckMarkers(absl::string_view bytes);

}  // namespace sophon::jpeg_internal

#endif  // SOPHON_SRC_IMAGE_JPEG_GUARD_H_
