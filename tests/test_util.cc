#include "tests/test_util.h"

// clang-format off
#include <cstdio>
#include <jpeglib.h>
// clang-format on

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "sophon/ops/augment.h"

namespace sophon::testing {

Image8 MakeTestImage(int height, int width, uint64_t seed) {
  CounterRng rng(SampleKey{seed, 0, 0}, 7);
  const double fx = rng.Uniform(1, 4), fy = rng.Uniform(1, 4);
  const double cx = rng.Uniform(0, width), cy = rng.Uniform(0, height);
  const double radius = rng.Uniform(0.1, 0.4) * std::min(height, width);
  const int base_r = static_cast<int>(rng.RandInt(0, 200));
  const int base_g = static_cast<int>(rng.RandInt(0, 200));
  const int base_b = static_cast<int>(rng.RandInt(0, 200));
  Image8 img;
  img.height = height;
  img.width = width;
  img.pixels.resize(static_cast<size_t>(height) * width * 3);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      const double u = static_cast<double>(x) / width, v = static_cast<double>(y) / height;
      const bool in_disc = (x - cx) * (x - cx) + (y - cy) * (y - cy) < radius * radius;
      const double noise = rng.Uniform(-8, 8);
      double r = base_r * (1 - u) + 255 * u * 0.5 + 30 * std::sin(fx * 6.28 * v) + noise;
      double g = base_g * v + 80 * (1 - v) + 25 * std::cos(fy * 6.28 * u) + noise;
      double b = base_b * 0.5 + 100 * u * v + noise;
      if (in_disc) {
        r = 255 - r;
        b = 255 - b;
      }
      uint8_t* p = img.pixels.data() + (static_cast<size_t>(y) * width + x) * 3;
      p[0] = static_cast<uint8_t>(std::clamp(r, 0.0, 255.0));
      p[1] = static_cast<uint8_t>(std::clamp(g, 0.0, 255.0));
      p[2] = static_cast<uint8_t>(std::clamp(b, 0.0, 255.0));
    }
  }
  return img;
}

std::string EncodeJpeg(const Image8& image, const EncodeOptions& options) {
  jpeg_compress_struct cinfo;
  jpeg_error_mgr jerr;
  cinfo.err = jpeg_std_error(&jerr);
  jpeg_create_compress(&cinfo);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &buffer, &size);
  cinfo.image_width = image.width;
  cinfo.image_height = image.height;
  int comps = 3;
  switch (options.color) {
    case JpegColor::kRgb:
      cinfo.input_components = 3;
      cinfo.in_color_space = JCS_RGB;
      break;
    case JpegColor::kGray:
      comps = 1;
      cinfo.input_components = 1;
      cinfo.in_color_space = JCS_GRAYSCALE;
      break;
    case JpegColor::kCmyk:
    case JpegColor::kPlainCmyk:
    case JpegColor::kCmykNoAdobe:
      comps = 4;
      cinfo.input_components = 4;
      cinfo.in_color_space = JCS_CMYK;
      break;
    case JpegColor::kRgbStored:
      cinfo.input_components = 3;
      cinfo.in_color_space = JCS_RGB;
      break;
  }
  jpeg_set_defaults(&cinfo);
  if (options.color == JpegColor::kCmyk) jpeg_set_colorspace(&cinfo, JCS_YCCK);
  if (options.color == JpegColor::kRgbStored) jpeg_set_colorspace(&cinfo, JCS_RGB);
  if (options.color == JpegColor::kCmykNoAdobe) cinfo.write_Adobe_marker = FALSE;
  if (comps > 1 && options.color != JpegColor::kRgbStored) {
    int h = 2, v = 2;
    switch (options.sampling) {
      case Sampling::k420: h = 2, v = 2; break;
      case Sampling::k422: h = 2, v = 1; break;
      case Sampling::k444: h = 1, v = 1; break;
      case Sampling::k440: h = 1, v = 2; break;
      case Sampling::k411: h = 4, v = 1; break;
      case Sampling::kMixed: h = 2, v = 2; break;
      case Sampling::kLumaSubsampled: h = 2, v = 2; break;
    }
    cinfo.comp_info[0].h_samp_factor = h;
    cinfo.comp_info[0].v_samp_factor = v;
    for (int c = 1; c < comps; ++c) {
      // YCCK's K is a full-resolution plane like Y.
      const bool full = comps == 4 && c == 3;
      cinfo.comp_info[c].h_samp_factor = full ? h : 1;
      cinfo.comp_info[c].v_samp_factor = full ? v : 1;
    }
    if (options.sampling == Sampling::kMixed) {
      cinfo.comp_info[1].h_samp_factor = 2;
      cinfo.comp_info[2].v_samp_factor = 2;
    }
    if (options.sampling == Sampling::kLumaSubsampled) cinfo.comp_info[1].v_samp_factor = 4;
  }
  jpeg_set_quality(&cinfo, options.quality, TRUE);
  cinfo.arith_code = options.arithmetic ? TRUE : FALSE;
  if (options.progressive || options.unrefined_progression) jpeg_simple_progression(&cinfo);
  std::vector<jpeg_scan_info> scans;
  if (options.scan_per_coefficient) {
    // DC first and refined (all components), then each AC coefficient of each
    // component alone, its first pass (Al 1) and then its refinement (Ah 1).
    jpeg_scan_info dc{};
    dc.comps_in_scan = cinfo.num_components;
    for (int c = 0; c < cinfo.num_components; ++c) dc.component_index[c] = c;
    dc.Al = 1;
    scans.push_back(dc);
    for (int pass = 0; pass < 2; ++pass) {
      for (int c = 0; c < cinfo.num_components; ++c) {
        for (int k = 1; k < 64; ++k) {
          jpeg_scan_info ac{};
          ac.comps_in_scan = 1;
          ac.component_index[0] = c;
          ac.Ss = ac.Se = k;
          ac.Ah = pass;
          ac.Al = 1 - pass;
          scans.push_back(ac);
        }
      }
      if (pass == 0) {
        dc.Ah = 1;
        dc.Al = 0;
        scans.push_back(dc);
      }
    }
    cinfo.scan_info = scans.data();
    cinfo.num_scans = static_cast<int>(scans.size());
  }
  if (options.unrefined_progression) {
    // DC in full, then each component's AC coefficients without their
    // lowest bit (Al 1), never refined.
    jpeg_scan_info dc{};
    dc.comps_in_scan = cinfo.num_components;
    for (int c = 0; c < cinfo.num_components; ++c) dc.component_index[c] = c;
    scans.push_back(dc);
    for (int c = 0; c < cinfo.num_components; ++c) {
      jpeg_scan_info ac{};
      ac.comps_in_scan = 1;
      ac.component_index[0] = c;
      ac.Ss = 1;
      ac.Se = 63;
      ac.Al = 1;
      scans.push_back(ac);
    }
    cinfo.scan_info = scans.data();
    cinfo.num_scans = static_cast<int>(scans.size());
  }
  if (options.restart_interval > 0) cinfo.restart_in_rows = options.restart_interval;
  jpeg_start_compress(&cinfo, TRUE);
  std::vector<uint8_t> row(static_cast<size_t>(image.width) * comps);
  while (cinfo.next_scanline < cinfo.image_height) {
    const uint8_t* src = image.pixels.data() + static_cast<size_t>(cinfo.next_scanline) *
                                                   image.width * 3;
    for (int x = 0; x < image.width; ++x) {
      const uint8_t r = src[3 * x], g = src[3 * x + 1], b = src[3 * x + 2];
      if (comps == 3) {
        row[3 * x] = r;
        row[3 * x + 1] = g;
        row[3 * x + 2] = b;
      } else if (comps == 1) {
        row[x] = static_cast<uint8_t>((299 * r + 587 * g + 114 * b + 500) / 1000);
      } else {
        // Adobe-style inverted CMYK with K = 0 ink: stored values = 255 - ink.
        row[4 * x] = r;
        row[4 * x + 1] = g;
        row[4 * x + 2] = b;
        row[4 * x + 3] = 255;
      }
    }
    JSAMPROW p = row.data();
    jpeg_write_scanlines(&cinfo, &p, 1);
  }
  jpeg_finish_compress(&cinfo);
  std::string out(reinterpret_cast<char*>(buffer), size);
  jpeg_destroy_compress(&cinfo);
  free(buffer);
  return out;
}

std::string TruncateScanKeepEoi(const std::string& jpeg) {
  const size_t sos = jpeg.find("\xff\xda");
  const size_t eoi = jpeg.rfind("\xff\xd9");
  if (sos == std::string::npos || eoi == std::string::npos || eoi < sos) return jpeg;
  return jpeg.substr(0, sos + (eoi - sos) / 2) + "\xff\xd9";
}

std::string PatchDimensions(const std::string& jpeg, int height, int width) {
  std::string out = jpeg;
  size_t sof = out.find("\xff\xc0");
  if (sof == std::string::npos) sof = out.find("\xff\xc2");
  if (sof == std::string::npos) return out;
  // FF Cn, length(2), precision(1), height(2), width(2).
  out[sof + 5] = static_cast<char>(height >> 8);
  out[sof + 6] = static_cast<char>(height & 0xff);
  out[sof + 7] = static_cast<char>(width >> 8);
  out[sof + 8] = static_cast<char>(width & 0xff);
  return out;
}

std::string SampleFileBytes(uint64_t id, size_t size) {
  std::string bytes(size, '\0');
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<char>((id * 131 + i * 7) & 0xff);
  return bytes;
}

std::string MakeTempDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::filesystem::path dir = std::filesystem::path(base ? base : ::testing::TempDir()) /
                              absl::StrCat("sophon_", name, "_", ::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

std::vector<std::pair<std::string, Sampling>> ChromaSamplings() {
  return {{"420", Sampling::k420},
          {"422", Sampling::k422},
          {"444", Sampling::k444},
          {"440", Sampling::k440},
          {"411", Sampling::k411}};
}

std::vector<NamedEncoding> AllJpegEncodings() {
  std::vector<NamedEncoding> v;
  for (const auto& [name, sampling] : ChromaSamplings()) {
    v.push_back({absl::StrCat("baseline_", name), {.sampling = sampling}});
    v.push_back({absl::StrCat("progressive_", name), {.progressive = true, .sampling = sampling}});
  }
  v.push_back({"mixed_sampling", {.sampling = Sampling::kMixed}});
  v.push_back({"restart_markers", {.restart_interval = 1}});
  v.push_back({"progressive_restart_markers", {.progressive = true, .restart_interval = 2}});
  v.push_back({"gray", {.color = JpegColor::kGray}});
  v.push_back({"gray_progressive", {.progressive = true, .color = JpegColor::kGray}});
  v.push_back({"ycck", {.color = JpegColor::kCmyk}});
  v.push_back({"ycck_progressive", {.progressive = true, .color = JpegColor::kCmyk}});
  v.push_back({"cmyk_adobe", {.color = JpegColor::kPlainCmyk, .sampling = Sampling::k444}});
  v.push_back({"cmyk_no_adobe", {.color = JpegColor::kCmykNoAdobe, .sampling = Sampling::k444}});
  v.push_back({"rgb_stored", {.color = JpegColor::kRgbStored}});
  v.push_back({"arithmetic", {.arithmetic = true}});
  v.push_back({"arithmetic_progressive_422",
               {.progressive = true, .sampling = Sampling::k422, .arithmetic = true}});
  return v;
}

std::string MakeTestDataset(const std::string& name, const TestDatasetOptions& options) {
  const std::string root = MakeTempDir(name);
  CounterRng rng(SampleKey{options.seed, 1, 1}, 3);
  for (int c = 0; c < options.classes; ++c) {
    for (int i = 0; i < options.per_class; ++i) {
      const int h = static_cast<int>(rng.RandInt(options.min_side, options.max_side + 1));
      const int w = static_cast<int>(rng.RandInt(options.min_side, options.max_side + 1));
      const Image8 img = MakeTestImage(h, w, options.seed * 1000 + c * 100 + i);
      const size_t k = static_cast<size_t>(c) * options.per_class + i;
      const EncodeOptions encoding =
          options.encodings.empty() ? EncodeOptions() : options.encodings[k % options.encodings.size()];
      WriteFile(absl::StrCat(root, "/class_", c, "/img_", i, ".jpg"), EncodeJpeg(img, encoding));
    }
  }
  return root;
}

}  // namespace sophon::testing
