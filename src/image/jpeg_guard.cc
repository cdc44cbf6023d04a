#include "src/image/jpeg_guard.h"

// clang-format off
#include <jerror.h>
// clang-format on

#include <algorithm>
#include <cstring>

namespace sophon::jpeg_internal {
namespace {

// The message of a failed decode, with the limit it hit where it hit one.
void ErrorExit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  char text[JMSG_LENGTH_MAX];
  (*cinfo->err->format_message)(cinfo, text);
  const int code = cinfo->err->msg_code;
  if (code == JERR_NO_BACKING_STORE || code == JERR_OUT_OF_MEMORY) {
    // libjpeg asks for a backing store once its arrays exceed max_memory_to_use.
    err->code = absl::StatusCode::kResourceExhausted;
    std::snprintf(err->message, sizeof(err->message),
                  "the decode needs more than DecodeLimits.max_memory_bytes (%lld) of memory "
                  "(libjpeg: %s)",
                  static_cast<long long>(err->max_memory_bytes), text);
  } else {
    err->code = absl::StatusCode::kInvalidArgument;
    std::snprintf(err->message, sizeof(err->message), "invalid JPEG: %s", text);
  }
  longjmp(err->jump, 1);
}

// Warnings that say nothing about the pixels: never fatal.
bool IsMetadataWarning(int code) {
  return code == JWRN_ADOBE_XFORM || code == JWRN_JFIF_MAJOR || code == JWRN_BOGUS_ICC;
}

// A warning (msg_level -1) is corrupt data: under strict decoding it ends the
// decode at once (DataLoss); lenient decoding ignores it, except that a
// premature end of file is remembered (libjpeg would hand back a gray-padded
// image). Trace messages (msg_level >= 0) are dropped.
void EmitMessage(j_common_ptr cinfo, int msg_level) {
  if (msg_level >= 0) return;
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  if (err->data_cut) return;
  cinfo->err->num_warnings++;
  const int code = cinfo->err->msg_code;
  if (code == JWRN_JPEG_EOF) err->premature_eof = true;
  if (IsMetadataWarning(code)) return;
  ++err->corrupt_warnings;
  if (!err->strict) return;
  char text[JMSG_LENGTH_MAX];
  (*cinfo->err->format_message)(cinfo, text);
  err->code = absl::StatusCode::kDataLoss;
  std::snprintf(err->message, sizeof(err->message),
                "corrupt JPEG data (libjpeg: %s; strict decoding, DecodeLimits.lenient "
                "accepts it)",
                text);
  longjmp(err->jump, 1);
}


void MonitorScans(j_common_ptr cinfo) {
  if (!cinfo->is_decompressor) return;
  auto* d = reinterpret_cast<j_decompress_ptr>(cinfo);
  auto* monitor = reinterpret_cast<ScanMonitor*>(cinfo->progress);
  if (d->input_scan_number == monitor->counted_scan) return;
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  if (d->input_scan_number > monitor->max_scans) {
    err->code = absl::StatusCode::kResourceExhausted;
    std::snprintf(err->message, sizeof(err->message),
                  "the image has more than DecodeLimits.max_scans (%d) scans", monitor->max_scans);
    longjmp(err->jump, 1);
  }
  monitor->counted_scan = d->input_scan_number;
  for (int i = 0; i < d->comps_in_scan && i < MAX_COMPS_IN_SCAN; ++i) {
    const jpeg_component_info* c = d->cur_comp_info[i];
    if (c == nullptr) continue;
    monitor->scan_samples += static_cast<int64_t>(c->width_in_blocks) * c->height_in_blocks * DCTSIZE2;
  }
  if (monitor->scan_samples > monitor->max_scan_samples) {
    err->code = absl::StatusCode::kResourceExhausted;
    std::snprintf(err->message, sizeof(err->message),
                  "the image's first %d scans decode more than DecodeLimits.max_scan_samples "
                  "(%lld) samples",
                  d->input_scan_number, static_cast<long long>(monitor->max_scan_samples));
    longjmp(err->jump, 1);
  }
}

// libjpeg-turbo's SIMD kernels work on whole vectors (32 samples with AVX2):
// its upsamplers and colour converters load, compute and drop the samples past
// the last column a decode writes, up to the rounding of libjpeg's sample rows
// (64 samples). Nothing ever writes those bytes: they are malloc'd padding, and
// past a cropped region's last iMCU column also the columns it never decodes.
// Their values never reach a pixel (a decode gives the same bytes whether the
// rows start as 0x00, 0x80 or 0xFF), but memcheck models some of those kernels'
// instructions (PMADDWD) over 64 bits, so a real pixel packed beside a dropped
// one is reported as undefined: the last column of a 4:2:0 image or region whose
// width is 14 mod 16, for one, and then the bytes the server sends. So the rows
// are zeroed when libjpeg allocates them, padding that must be defined for a
// memory checker to find nothing. It costs one memset of the decoder's row
// buffers (tens of KiB) per decode; the rows are reused for every iMCU row.
constexpr JDIMENSION kSampleRowRounding = 64;  // libjpeg-turbo's: 2 x 32-byte SIMD alignment

JSAMPARRAY AllocDefinedSampleRows(j_common_ptr cinfo, int pool_id, JDIMENSION samplesperrow,
                                  JDIMENSION numrows) {
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  // Ask for the rounded width, so that every byte of each row is one we zero.
  JDIMENSION width = (samplesperrow + kSampleRowRounding - 1) / kSampleRowRounding *
                     kSampleRowRounding;
  if (width < samplesperrow) width = samplesperrow;  // wrapped: libjpeg refuses it
  JSAMPARRAY rows = err->alloc_sarray(cinfo, pool_id, width, numrows);
  for (JDIMENSION r = 0; r < numrows; ++r) std::memset(rows[r], 0, width * sizeof(JSAMPLE));
  return rows;
}

}  // namespace

void DefineSampleRows(j_decompress_ptr cinfo) {
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  err->alloc_sarray = cinfo->mem->alloc_sarray;
  cinfo->mem->alloc_sarray = AllocDefinedSampleRows;
}

void InitGuard(const DecodeLimits& limits, ErrorManager* err, ScanMonitor* monitor) {
  jpeg_std_error(&err->pub);
  err->pub.error_exit = ErrorExit;
  err->pub.emit_message = EmitMessage;
  err->premature_eof = false;
  err->strict = !limits.lenient;
  err->data_cut = false;
  err->corrupt_warnings = 0;
  err->max_memory_bytes = limits.max_memory_bytes;
  err->alloc_sarray = nullptr;
  err->code = absl::StatusCode::kInvalidArgument;
  err->message[0] = '\0';
  monitor->pub.progress_monitor = MonitorScans;
  monitor->max_scans = limits.max_scans;
  monitor->max_scan_samples = limits.max_scan_samples;
  monitor->counted_scan = 0;
  monitor->scan_samples = 0;
}

int64_t CoefficientBytes(const jpeg_decompress_struct& cinfo) {
  int64_t bytes = 0;
  for (int ci = 0; ci < cinfo.num_components; ++ci) {
    const jpeg_component_info& c = cinfo.comp_info[ci];
    const int64_t h = std::max(1, c.h_samp_factor), v = std::max(1, c.v_samp_factor);
    const int64_t w_blocks = (static_cast<int64_t>(c.width_in_blocks) + h - 1) / h * h;
    const int64_t h_blocks = (static_cast<int64_t>(c.height_in_blocks) + v - 1) / v * v;
    bytes += w_blocks * h_blocks * DCTSIZE2 * static_cast<int64_t>(sizeof(JCOEF));
  }
  return bytes;
}

absl::Status CheckMarkers(absl::string_view bytes) {
  if (bytes.empty()) return absl::InvalidArgumentError("empty file");
  if (bytes.size() < 4 || static_cast<uint8_t>(bytes[0]) != 0xFF ||
      static_cast<uint8_t>(bytes[1]) != 0xD8) {
    return absl::InvalidArgumentError("not a JPEG file (no SOI marker)");
  }
  const size_t tail = std::min<size_t>(bytes.size(), 64 * 1024);
  for (size_t i = bytes.size() - 1; i + tail > bytes.size() && i > 0; --i) {
    if (static_cast<uint8_t>(bytes[i]) == 0xD9 && static_cast<uint8_t>(bytes[i - 1]) == 0xFF) {
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError("truncated JPEG file (no EOI marker)");
}

}  // namespace sophon::jpeg_internal
