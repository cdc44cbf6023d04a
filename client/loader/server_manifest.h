// What a training node keeps of one storage server's manifest: its header,
// and per sample a label and a size (8 bytes a sample). Relative paths stay
// on the server, whose errors name them.
#ifndef SOPHON_CLIENT_LOADER_SERVER_MANIFEST_H_
#define SOPHON_CLIENT_LOADER_SERVER_MANIFEST_H_

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace sophon {

// A sample's size as ServerManifest keeps it: a larger one saturates at
// UINT32_MAX, and cannot be served anyway (a sample travels in one message
// of at most 2 GiB).
inline uint32_t SaturatedSize(uint64_t bytes) {
  return static_cast<uint32_t>(std::min<uint64_t>(bytes, UINT32_MAX));
}

struct ServerManifest {
  std::string dataset_name;
  uint64_t fingerprint = 0;              // identifies the samples (see sophon.proto)
  std::vector<std::string> class_names;  // index = label
  uint32_t prep_workers = 0;             // the server's --prep-workers
  double cpu_limit = 0;                  // CPUs of time the server may use; 0 = unknown
  bool lenient_jpeg = false;             // the server's --lenient-jpeg
  // The server's frozen model (--backbone) for the FEATURES and PREDICTIONS
  // stages: what it is in words, its feature size, the fingerprints of its
  // backbone's and its head's tensors, its head's classes; empty / 0 without
  // one.
  std::string backbone;
  uint32_t feature_size = 0;
  uint64_t backbone_fingerprint = 0;
  uint64_t head_fingerprint = 0;
  uint32_t head_classes = 0;
  // Samples [k * g, (k + 1) * g) are read together by the server (a pack);
  // 1 = one by one.
  uint32_t group_size = 1;
  std::vector<uint32_t> labels;          // by sample id
  std::vector<uint32_t> raw_sizes;       // by sample id: encoded bytes, SaturatedSize
  // By sample id: what changes when its file is edited (Manifest.versions);
  // 0 = unknown (a server before versions).
  std::vector<uint32_t> versions;

  uint64_t num_samples() const { return labels.size(); }
};

}  // namespace sophon

#endif  // SOPHON_CLIENT_LOADER_SERVER_MANIFEST_H_
