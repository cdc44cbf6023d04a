// libFuzzer target: untrusted file bytes through the storage node's lossless
// crop (CropJpegLossless, image/jpeg_crop.h), with small limits so that each
// input stays cheap, a crop box and a min_side drawn from the input's hash and
// the header's size. Built only with -DSOPHON_FUZZ=ON and clang (tools/fuzz.sh
// crop); the seeds are in fuzz/corpus/crop (made by
// tests/image/fuzz_corpus_test.cc).
//
// Besides crashes and sanitizer reports, it aborts when an invariant fails:
// - an error is one of the documented codes (InvalidArgument, DataLoss only
//   under strict decoding, ResourceExhausted, Unimplemented only for a file
//   whose header reads, or the box chooser's own error, returned as is);
// - the crop and ReadJpegInfo agree on whether the header is acceptable;
// - a region's JPEG has the region's size in its header, its offset lies in
//   the image on the 8-pixel grid and the region contains the box;
// - the region decodes (strictly) with the shifted box, and when the whole
//   file decodes with the box (DecodeJpegRegion), both give the same scale,
//   the same box geometry and the same pixels in the rows and columns the
//   box touches.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "sophon/image/jpeg_codec.h"
#include "sophon/image/jpeg_crop.h"

namespace {

uint64_t Fnv1a(const uint8_t* data, size_t size) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < size; ++i) h = (h ^ data[i]) * 0x100000001b3ULL;
  return h;
}

// A stream of values from the hash (splitmix64).
struct Rng {
  uint64_t state;
  uint64_t Next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  int Below(int n) { return n <= 1 ? 0 : static_cast<int>(Next() % static_cast<uint64_t>(n)); }
};

void Check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "crop_fuzzer: invariant violated: %s\n", what);
  std::abort();
}

// The box for a height x width image: mostly inside it, of every shape (the
// whole image, thin strips, single pixels, boxes on the right and bottom
// edges where iMCUs are partial); now and then outside it, or an error.
enum class BoxKind { kInside, kOutside, kChooserError };

sophon::CropBox DrawBox(Rng& rng, int height, int width, BoxKind* kind) {
  sophon::CropBox box;
  const int pick = rng.Below(64);
  *kind = BoxKind::kInside;
  if (pick == 0) {
    *kind = BoxKind::kChooserError;
    return box;
  }
  if (pick == 1) {  // one pixel too far right or down
    *kind = BoxKind::kOutside;
    box = {rng.Below(height), rng.Below(width), 1, 1};
    if (rng.Below(2) == 0) {
      box.height = height - box.top + 1;
    } else {
      box.width = width - box.left + 1;
    }
    return box;
  }
  if (pick < 8) return {0, 0, height, width};
  box.top = rng.Below(height);
  box.left = rng.Below(width);
  box.height = 1 + rng.Below(height - box.top);
  box.width = 1 + rng.Below(width - box.left);
  if (pick < 24) {  // against the bottom and/or right edge
    if (rng.Below(2) == 0) box.height = height - box.top;
    if (rng.Below(2) == 0) box.width = width - box.left;
  } else if (pick < 32) {  // small
    box.height = 1 + rng.Below(std::min(8, height - box.top));
    box.width = 1 + rng.Below(std::min(8, width - box.left));
  }
  return box;
}

bool DocumentedError(absl::StatusCode code, bool lenient) {
  switch (code) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kUnimplemented:
      return true;
    case absl::StatusCode::kDataLoss:
      return !lenient;
    default:
      return false;
  }
}

// The rows and columns [floor(x0), ceil(x1)) x [floor(y0), ceil(y1)) of a
// decoded box are compared; they must lie in the decoded image.
struct Touched {
  int c0, c1, r0, r1;
};

Touched TouchedBy(const sophon::DecodedRegion& r) {
  Touched t{static_cast<int>(std::floor(r.x0)), static_cast<int>(std::ceil(r.x1)),
            static_cast<int>(std::floor(r.y0)), static_cast<int>(std::ceil(r.y1))};
  Check(t.c0 >= 0 && t.c0 < t.c1 && t.c1 <= r.image.width && t.r0 >= 0 && t.r0 < t.r1 &&
            t.r1 <= r.image.height,
        "the decoded box lies outside its decoded image");
  Check(r.image.channels == 4 &&
            r.image.pixels.size() == static_cast<size_t>(r.image.width) * r.image.height * 4,
        "decoded region buffer size");
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  Rng rng{Fnv1a(data, size)};
  sophon::DecodeLimits limits;
  limits.max_pixels = 1 << 20;
  limits.max_memory_bytes = 32 << 20;
  limits.max_scans = 64;
  limits.lenient = rng.Below(2) != 0;
  const int min_side = 1 + rng.Below(64);

  bool asked = false;
  sophon::ImageInfo header;
  sophon::CropBox box;
  BoxKind kind = BoxKind::kInside;
  const absl::StatusOr<sophon::JpegRegion> region = sophon::CropJpegLossless(
      bytes, min_side, limits,
      [&](const sophon::ImageInfo& info) -> absl::StatusOr<sophon::CropBox> {
        Check(!asked, "the box chooser was asked twice");
        asked = true;
        header = info;
        box = DrawBox(rng, info.height, info.width, &kind);
        if (kind == BoxKind::kChooserError) return absl::CancelledError("chooser says no");
        return box;
      });
  const absl::StatusOr<sophon::ImageInfo> info = sophon::ReadJpegInfo(bytes, limits);

  if (!region.ok()) {
    const absl::StatusCode code = region.status().code();
    if (asked && kind == BoxKind::kChooserError) {
      Check(code == absl::StatusCode::kCancelled, "the chooser's error was not returned as is");
      return 0;
    }
    Check(DocumentedError(code, limits.lenient), "an undocumented error code");
    if (asked && kind == BoxKind::kOutside) {
      Check(code == absl::StatusCode::kInvalidArgument, "a box outside the image was not refused");
    }
    if (code == absl::StatusCode::kUnimplemented) {
      Check(info.ok(), "Unimplemented for a file that ReadJpegInfo refuses");
    }
    if (asked) Check(info.ok(), "the box chooser was asked for a header ReadJpegInfo refuses");
    return 0;
  }

  // A crop.
  Check(asked, "a crop without asking for the box");
  Check(kind == BoxKind::kInside, "a crop for a box outside the image or a chooser's error");
  Check(info.ok(), "a crop of a file that ReadJpegInfo refuses");
  Check(info->height == header.height && info->width == header.width &&
            info->components == header.components && info->progressive == header.progressive,
        "the chooser saw another header than ReadJpegInfo");
  const sophon::JpegRegion& r = *region;
  Check(r.image_height == header.height && r.image_width == header.width,
        "the region's image size differs from the header");
  Check(r.top >= 0 && r.left >= 0 && r.height > 0 && r.width > 0 &&
            r.top + r.height <= r.image_height && r.left + r.width <= r.image_width,
        "the region lies outside the image");
  Check(r.top % 8 == 0 && r.left % 8 == 0, "the region's offset is not on the block grid");
  Check(r.top <= box.top && r.left <= box.left && r.top + r.height >= box.top + box.height &&
            r.left + r.width >= box.left + box.width,
        "the region does not contain the box");
  sophon::DecodeLimits strict = limits;
  strict.lenient = false;
  const absl::StatusOr<sophon::ImageInfo> region_info = sophon::ReadJpegInfo(r.jpeg, strict);
  Check(region_info.ok(), "the region's header does not read");
  Check(region_info->height == r.height && region_info->width == r.width,
        "the region's header differs from its size");
  Check(region_info->components == header.components, "the region has other components");
  Check(!region_info->progressive, "the region is progressive");

  // The region decodes, strictly: it is a file of our own making.
  const sophon::CropBox shifted{box.top - r.top, box.left - r.left, box.height, box.width};
  const absl::StatusOr<sophon::DecodedRegion> part =
      sophon::DecodeJpegRegion(r.jpeg, shifted, min_side, strict);
  if (!part.ok()) {
    std::fprintf(stderr, "crop_fuzzer: region decode: %s\n", part.status().ToString().c_str());
  }
  Check(part.ok(), "the region does not decode");
  const absl::StatusOr<sophon::DecodedRegion> whole =
      sophon::DecodeJpegRegion(bytes, box, min_side, limits);
  if (!whole.ok()) return 0;  // e.g. a corrupt row the crop's box does not need

  Check(part->scale_num == whole->scale_num, "the region decodes at another scale");
  Check(part->x1 - part->x0 == whole->x1 - whole->x0 &&
            part->y1 - part->y0 == whole->y1 - whole->y0,
        "the box has another size in the region's decode");
  Check(part->x0 - std::floor(part->x0) == whole->x0 - std::floor(whole->x0) &&
            part->y0 - std::floor(part->y0) == whole->y0 - std::floor(whole->y0),
        "the box has another phase in the region's decode");
  const Touched a = TouchedBy(*part), b = TouchedBy(*whole);
  Check(a.c1 - a.c0 == b.c1 - b.c0 && a.r1 - a.r0 == b.r1 - b.r0,
        "the box touches another number of rows or columns");
  for (int y = 0; y < a.r1 - a.r0; ++y) {
    for (int x = 0; x < a.c1 - a.c0; ++x) {
      const uint8_t* p =
          part->image.pixels.data() + (static_cast<size_t>(a.r0 + y) * part->image.width + a.c0 + x) * 4;
      const uint8_t* q =
          whole->image.pixels.data() + (static_cast<size_t>(b.r0 + y) * whole->image.width + b.c0 + x) * 4;
      if (std::memcmp(p, q, 3) != 0) {
        std::fprintf(stderr,
                     "crop_fuzzer: %dx%d image (%d components%s), box top %d left %d %dx%d, "
                     "min_side %d, scale %d/8, region top %d left %d %dx%d: pixel (row %d, "
                     "col %d of the box's) is %d,%d,%d in the region's decode and %d,%d,%d "
                     "in the whole file's\n",
                     header.height, header.width, header.components,
                     header.progressive ? ", progressive" : "", box.top, box.left, box.height,
                     box.width, min_side, whole->scale_num, r.top, r.left, r.height, r.width, y,
                     x, p[0], p[1], p[2], q[0], q[1], q[2]);
        Check(false, "the region's pixels differ from the whole file's inside the box");
      }
    }
  }
  return 0;
}
