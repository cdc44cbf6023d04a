#include "client/train/inference.h"

#include <algorithm>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/train/csv_log.h"
#include "spdlog/spdlog.h"

namespace sophon {
namespace {

// A CSV field: quoted when it holds a comma, a quote or a line break.
std::string CsvField(const std::string& text) {
  if (text.find_first_of(",\"\n\r") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

// The relative path of every sample of `ids` (global), asked of one server of
// its shard, 16 at a time; "" where the server cannot say.
std::vector<std::string> PathsOf(const ServerSet& servers, const std::vector<uint64_t>& ids) {
  const GlobalManifest& manifest = servers.manifest();
  std::map<int, std::vector<size_t>> by_shard;  // shard -> positions in ids
  for (size_t i = 0; i < ids.size(); ++i) by_shard[manifest.ShardOf(ids[i])].push_back(i);
  std::vector<std::string> paths(ids.size());
  for (const auto& [shard, positions] : by_shard) {
    SampleClient* client = servers.client(manifest.shards()[shard].servers.front());
    for (size_t start = 0; start < positions.size(); start += 16) {
      std::vector<uint64_t> local;
      for (size_t k = start; k < std::min(positions.size(), start + 16); ++k) {
        local.push_back(manifest.LocalId(ids[positions[k]]));
      }
      absl::StatusOr<std::vector<std::string>> got = client->RelativePaths(local);
      if (!got.ok() || got->size() != local.size()) continue;
      for (size_t k = 0; k < local.size(); ++k) paths[positions[start + k]] = (*got)[k];
    }
  }
  return paths;
}

}  // namespace

absl::StatusOr<std::vector<Prediction>> ReadPredictions(const Batch& batch, int k, int classes) {
  if (batch.stage != Stage::kPredictions || batch.c != 2 * k || batch.h != 1 || batch.w != 1 ||
      batch.images.size() != static_cast<size_t>(batch.n) * 2 * k) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch ", batch.index, " is ", StageName(batch.stage), " of ", batch.n, " x ", batch.c,
        "x", batch.h, "x", batch.w, " in ", batch.images.size(), " floats, expected ",
        StageName(Stage::kPredictions), " of ", k, " (class, probability) pairs per sample"));
  }
  std::vector<Prediction> out(static_cast<size_t>(batch.n));
  for (int i = 0; i < batch.n; ++i) {
    const float* pairs = batch.images.data() + static_cast<size_t>(i) * 2 * k;
    for (int j = 0; j < k; ++j) {
      const float c = pairs[2 * j];
      if (!(c >= 0 && c < classes) || c != static_cast<float>(static_cast<int>(c))) {
        return absl::InvalidArgumentError(absl::StrCat("batch ", batch.index, ", sample ",
                                                       batch.ids[i], ": class ", c,
                                                       " is not one of the model's ", classes));
      }
      out[i].labels.push_back(static_cast<int>(c));
      out[i].probabilities.push_back(pairs[2 * j + 1]);
    }
  }
  return out;
}

absl::StatusOr<InferenceReport> RunInference(Loader* loader, const ServerSet& servers,
                                             const InferenceOptions& options) {
  if (options.model_classes < 1 || options.top_k < 1 || options.top_k > options.model_classes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "InferenceOptions.top_k must be in [1, model_classes] and model_classes >= 1 (got top_k ",
        options.top_k, ", model_classes ", options.model_classes, ")"));
  }
  const GlobalManifest& manifest = servers.manifest();
  const std::vector<std::string>& classes = manifest.class_names();
  InferenceReport report;
  report.labels_comparable = options.model_classes == static_cast<int>(classes.size());
  std::string header = "id,path,label,class";
  for (int k = 1; k <= options.top_k; ++k) {
    absl::StrAppend(&header, ",pred_", k, ",class_", k, ",prob_", k);
  }
  absl::StatusOr<std::unique_ptr<CsvLog>> csv =
      CsvLog::Create(options.out, header, "predictions");
  if (!csv.ok()) return csv.status();
  const absl::Time start = absl::Now();
  absl::Time next_progress = start + absl::Seconds(5);
  if (absl::Status s = loader->StartEpoch(0); !s.ok()) return s;
  Batch batch;
  while (true) {
    absl::StatusOr<bool> more = loader->Next(&batch);
    if (!more.ok()) return more.status();
    if (!*more) break;
    absl::StatusOr<std::vector<Prediction>> predictions =
        ReadPredictions(batch, options.top_k, options.model_classes);
    if (!predictions.ok()) return predictions.status();
    if (*csv != nullptr) {
      const std::vector<std::string> paths = PathsOf(servers, batch.ids);
      std::ostream& out = (*csv)->out();
      for (int i = 0; i < batch.n; ++i) {
        const int64_t label = batch.labels[i];
        out << batch.ids[i] << ',' << CsvField(paths[i]) << ',' << label << ','
            << CsvField(classes[label]);
        const Prediction& p = (*predictions)[i];
        for (size_t k = 0; k < p.labels.size(); ++k) {
          const int c = p.labels[k];
          out << ',' << c << ','
              << (report.labels_comparable ? CsvField(classes[c]) : std::string()) << ','
              << absl::StrFormat("%.6f", p.probabilities[k]);
        }
        out << '\n';
      }
    }
    for (int i = 0; i < batch.n; ++i) {
      if (report.labels_comparable && (*predictions)[i].labels.front() == batch.labels[i]) {
        ++report.top1_correct;
      }
    }
    report.samples += batch.n;
    if (options.progress && absl::Now() >= next_progress) {
      next_progress = absl::Now() + absl::Seconds(5);
      const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
      spdlog::info("inference: {}/{} samples, {:.1f} images/s", report.samples,
                   manifest.num_samples(), report.samples / std::max(1e-9, seconds));
    }
  }
  report.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  report.loader = loader->stats();
  report.skipped = static_cast<int64_t>(report.loader.skipped);
  for (uint64_t b : report.loader.bytes_by_stage) report.bytes += b;
  if (*csv != nullptr) {
    if (absl::Status s = (*csv)->Close(); !s.ok()) return s;
  }
  return report;
}

std::string FormatInferenceReport(const InferenceReport& r) {
  std::string by_stage;
  for (Stage stage : AllStages()) {
    const uint64_t n = r.loader.samples_by_stage[StageIndex(stage)];
    if (n > 0) absl::StrAppend(&by_stage, by_stage.empty() ? "" : ", ", StageName(stage), " ", n);
  }
  std::string out = absl::StrFormat(
      "%d images in %.2f s: %.1f images/s, %.3f MB received (%.0f bytes/image; %s), skipped %d",
      r.samples, r.seconds, r.samples / std::max(1e-9, r.seconds), r.bytes / 1e6,
      r.samples > 0 ? static_cast<double>(r.bytes) / r.samples : 0.0, by_stage, r.skipped);
  if (r.labels_comparable && r.samples > 0) {
    absl::StrAppendFormat(&out, ", top-1 against the folders' labels %.3f",
                          static_cast<double>(r.top1_correct) / r.samples);
  }
  return out;
}

}  // namespace sophon
