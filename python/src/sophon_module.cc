// The Python extension module sophon._sophon: the C++ loader behind a small
// class, batches handed to Python as NumPy arrays over the loader's own
// buffers (no copy). python/sophon/__init__.py wraps them as torch tensors;
// this module needs no LibTorch.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/job/job.h"
#include "client/loader/loader.h"
#include "client/offload/smartoff_policy.h"
#include "sophon/net/credentials.h"
#include "sophon/data/batch.h"
#include "sophon/image/image_ops.h"
#include "sophon/planning/planner.h"
#include "sophon/planning/what_if.h"
#include "server/storage_server.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace py = pybind11;

namespace sophon {
namespace {

// A failed status as the Python exception of its kind, its message kept.
[[noreturn]] void Raise(const absl::Status& status) {
  const std::string message(status.message());
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      throw py::value_error(message);
    case absl::StatusCode::kNotFound:
      PyErr_SetString(PyExc_FileNotFoundError, message.c_str());
      throw py::error_already_set();
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
      PyErr_SetString(PyExc_ConnectionError, message.c_str());
      throw py::error_already_set();
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnauthenticated:
      PyErr_SetString(PyExc_PermissionError, message.c_str());
      throw py::error_already_set();
    case absl::StatusCode::kUnimplemented:
      PyErr_SetString(PyExc_NotImplementedError, message.c_str());
      throw py::error_already_set();
    default:
      throw std::runtime_error(
          absl::StrCat(absl::StatusCodeToString(status.code()), ": ", message));
  }
}

void Check(const absl::Status& status) {
  if (!status.ok()) Raise(status);
}

// `status` with the library's option fields replaced by the Python arguments
// that set them ("Resources.net_bytes_per_s" -> "net_bw").
using ArgumentNames = std::initializer_list<std::pair<const char*, const char*>>;
absl::Status WithArgumentNames(const absl::Status& status, ArgumentNames names) {
  std::string message(status.message());
  for (const auto& [field, arg] : names) {
    for (size_t at; (at = message.find(field)) != std::string::npos;) {
      message.replace(at, std::strlen(field), arg);
    }
  }
  return absl::Status(status.code(), message);
}

// The options of a Python Loader, as its constructor takes them.
struct PyLoaderOptions {
  std::vector<std::string> servers;
  int batch_size = 256;
  std::string mode = "smartoff";
  int crop_size = 224;
  uint64_t seed = 0;
  int shuffle_window = 0;
  int workers = 2;
  int prefetch_batches = 3;
  int rank = 0;
  int world_size = 1;
  bool drop_last = false;
  std::pair<double, double> scale{0.08, 1.0};  // RandomResizedCrop area range
  std::pair<double, double> ratio{3.0 / 4.0, 4.0 / 3.0};  // ... aspect ratio range
  bool lenient_jpeg = false;
  std::string on_bad_sample = "skip";
  std::string augment = "random";  // or none: the evaluation transform
  int eval_resize = 0;
  std::string output = "float32";  // or uint8 (N x S x S x 3, flipped, not normalized)
  double connect_timeout = 30;  // seconds
  std::string profile_folder;
  // smartoff, as sophon-train's flags of the same names.
  std::string planner = "optimal";
  double net_bw = 0;              // Mbit/s; 0 = measure
  double remote_cpus = 0;         // 0 = the server's prep workers (or CPU limit)
  double gpu_batch_seconds = -1;  // < 0 = measure (the gaps between batches)
  double replan_threshold = 0.25;
  std::string stages = "all";
  std::string tls_ca, tls_cert, tls_key, tls_server_name, auth_token_file;
  // This node's sample cache, as sophon-train's --local-cache-* flags.
  int64_t local_cache_bytes = 0;
  std::string local_cache_policy = "noevict";
  std::string local_cache_dir;
  int64_t local_cache_dir_bytes = 0;
  // Batches shared with the node's other jobs, as sophon-train's
  // --share-batches-dir and --share-batches-window-bytes.
  std::string share_batches_dir;
  int64_t share_batches_window_bytes = int64_t{256} << 20;
  int local_world_size = 1;  // the job's ranks on this node (smartoff's shares)
};

// Batches whose arrays Python has dropped, kept for the loader to reuse their
// buffers: a fresh buffer per batch costs its page faults and zeroing every
// time, about half the loader's throughput on a 2-core machine. A batch
// comes back only when the last array over it is gone, so no buffer is
// reused while a tensor still uses it.
class BatchPool {
 public:
  std::unique_ptr<Batch> Take() {
    std::lock_guard<std::mutex> lock(mu_);
    if (free_.empty()) return std::make_unique<Batch>();
    std::unique_ptr<Batch> batch = std::move(free_.back());
    free_.pop_back();
    return batch;
  }
  void Give(std::unique_ptr<Batch> batch) {
    std::lock_guard<std::mutex> lock(mu_);
    if (free_.size() < kMaxFree) free_.push_back(std::move(batch));
  }

 private:
  static constexpr size_t kMaxFree = 2;
  std::mutex mu_;
  std::vector<std::unique_ptr<Batch>> free_;
};

// What a capsule owns: the batch its arrays point into, and where it goes
// back (the pool outlives the loader if arrays do).
struct HandedBatch {
  std::unique_ptr<Batch> batch;
  std::shared_ptr<BatchPool> pool;
};

class PyLoader {
 public:
  explicit PyLoader(const PyLoaderOptions& o) {
    if (o.servers.empty()) throw py::value_error("servers: give at least one address host:port");
    options_.batch_size = o.batch_size;
    options_.workers = o.workers;
    options_.prefetch_batches = o.prefetch_batches;
    options_.seed = o.seed;
    options_.shuffle_window = o.shuffle_window;
    options_.rank = o.rank;
    options_.world = o.world_size;
    options_.drop_last = o.drop_last;
    options_.pipeline.augment.crop_size = o.crop_size;
    options_.pipeline.augment.scale_min = o.scale.first;
    options_.pipeline.augment.scale_max = o.scale.second;
    options_.pipeline.augment.ratio_min = o.ratio.first;
    options_.pipeline.augment.ratio_max = o.ratio.second;
    options_.pipeline.limits.lenient = o.lenient_jpeg;
    if (absl::Status s = SetAugmentMode(o.augment, o.eval_resize, &options_.pipeline.augment);
        !s.ok()) {
      throw py::value_error(absl::StrCat("augment: ", s.message()));
    }
    absl::StatusOr<BadSamplePolicy> bad = ParseBadSamplePolicy(o.on_bad_sample);
    if (!bad.ok()) throw py::value_error(absl::StrCat("on_bad_sample: ", bad.status().message()));
    options_.on_bad_sample = *bad;
    if (o.output == "float32") {
      options_.target = Stage::kTensor;
    } else if (o.output == "uint8") {
      options_.target = Stage::kFlipped;
    } else {
      throw py::value_error(
          absl::StrCat("output must be float32 or uint8, got '", o.output, "'"));
    }
    // The library names its option fields; the Python arguments set them.
    Check(WithArgumentNames(options_.Validate(),
                            {{"LoaderOptions.pipeline.augment: crop size", "crop_size"},
                             {"LoaderOptions.pipeline.augment: crop scale range", "scale"},
                             {"LoaderOptions.pipeline.augment: crop ratio range", "ratio"},
                             {"LoaderOptions.pipeline.augment: evaluation resize",
                              "eval_resize"},
                             {"[0, world)", "[0, world_size)"},
                             {"LoaderOptions.", ""}}));
    absl::StatusOr<PlannerKind> planner = ParsePlannerKind(o.planner);
    if (!planner.ok()) throw py::value_error(absl::StrCat("planner: ", planner.status().message()));
    absl::StatusOr<PlannerKind> mode = ParseMode(o.mode, *planner);
    if (!mode.ok()) throw py::value_error(absl::StrCat("mode: ", mode.status().message()));
    JobSpec spec;
    spec.servers.addresses = o.servers;
    spec.servers.connect_timeout = absl::Seconds(o.connect_timeout);
    spec.servers.credentials.tls_ca = o.tls_ca;
    spec.servers.credentials.tls_cert = o.tls_cert;
    spec.servers.credentials.tls_key = o.tls_key;
    spec.servers.credentials.tls_server_name = o.tls_server_name;
    spec.servers.credentials.auth_token_file = o.auth_token_file;
    spec.loader = options_;
    spec.cache = CacheOptions(o);
    spec.share.dir = o.share_batches_dir;
    spec.share.window_bytes = o.share_batches_window_bytes;
    spec.mode = *mode;
    spec.smartoff = SmartoffFrom(o);
    Check(WithArgumentNames(spec.Validate(),
                            {{"SmartoffOptions.net_bw_mbit", "net_bw"},
                             {"SmartoffOptions.local_world_size", "local_world_size"},
                             {"SmartoffOptions.", ""},
                             {"LocalCacheOptions.memory_bytes", "local_cache_bytes"},
                             {"LocalCacheOptions.dir_bytes", "local_cache_dir_bytes"},
                             {"LocalCacheOptions.dir", "local_cache_dir"},
                             {"BatchShareOptions.window_bytes", "share_batches_window_bytes"},
                             {"BatchShareOptions.dir", "share_batches_dir"},
                             {"CredentialsOptions.", ""},
                             {"ClientOptions.connect_timeout", "connect_timeout"}}));
    absl::StatusOr<std::unique_ptr<Job>> job;
    {
      py::gil_scoped_release release;
      job = Job::Assemble(std::move(spec));
    }
    if (!job.ok()) Raise(job.status());
    job_ = *std::move(job);
    loader_ = job_->shared_loader();
  }

  ~PyLoader() { Close(); }

  // Every method may be called from any Python thread (the Loader's threads
  // contract, client/loader/loader.h): each call holds its own reference to
  // the C++ loader while the GIL is released, so a close() in another thread
  // stops it (a waiting next() raises "CANCELLED: loader stopped") without
  // destroying it under that call.

  // Starts `epoch` (from global position `start_position` of its order;
  // only its first `max_batches` batches when > 0). Ends what is left of the
  // previous one; RuntimeError (FAILED_PRECONDITION) while another thread
  // waits in next().
  void StartEpoch(uint64_t epoch, int64_t start_position, int64_t max_batches) {
    std::shared_ptr<Loader> loader = OpenLoader();
    if (max_batches < 0) throw py::value_error("max_batches must be >= 0 (0: every batch)");
    absl::Status s;
    {
      py::gil_scoped_release release;
      s = loader->StartEpoch(epoch, max_batches, start_position);
    }
    Check(s);
    std::lock_guard<std::mutex> lock(mu_);
    returned_at_ = absl::InfinitePast();
  }

  // The next batch as (images, labels int64 N, ids uint64 N, cursor), or None
  // at the end of the epoch. images: float32 N x 3 x S x S, or uint8
  // N x S x S x 3 (output="uint8"). The arrays share one heap object holding
  // the batch; it lives as long as any of them. Waits in slices, checking for
  // signals between them, so Ctrl-C interrupts a wait promptly.
  py::object Next() {
    std::shared_ptr<Loader> loader = OpenLoader();
    // The caller's time since the previous batch is its training step: what
    // smartoff plans the GPU's share with (sophon-train's loop reports it too).
    // Taken once: a second thread's next() does not count the same step.
    absl::Time returned_at;
    {
      std::lock_guard<std::mutex> lock(mu_);
      returned_at = std::exchange(returned_at_, absl::InfinitePast());
    }
    if (returned_at != absl::InfinitePast()) {
      job_->policy()->OnStep(absl::ToDoubleSeconds(absl::Now() - returned_at));  // the policy locks
    }
    const absl::Time wait_start = absl::Now();
    std::unique_ptr<Batch> batch = pool_->Take();
    absl::StatusOr<bool> more;
    while (true) {
      bool ready;
      {
        py::gil_scoped_release release;
        ready = loader->WaitForNext(absl::Milliseconds(50));
      }
      if (ready) break;
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    }
    {
      py::gil_scoped_release release;
      more = loader->Next(batch.get());
    }
    if (!more.ok()) Raise(more.status());
    if (!*more) return py::none();
    const absl::Time now = absl::Now();
    {
      std::lock_guard<std::mutex> lock(mu_);
      returned_at_ = now;
    }
    job_->policy()->OnDataWait(absl::ToDoubleSeconds(now - wait_start));
    Batch* b = batch.get();
    auto* handed = new HandedBatch{std::move(batch), pool_};
    py::capsule owner(handed, [](void* p) {
      std::unique_ptr<HandedBatch> h(static_cast<HandedBatch*>(p));
      h->pool->Give(std::move(h->batch));
    });
    const py::ssize_t n = b->n, c = b->c, h = b->h, w = b->w;
    py::array images;
    if (b->stage == Stage::kTensor) {
      constexpr py::ssize_t f = sizeof(float);
      images = py::array_t<float>({n, c, h, w}, {c * h * w * f, h * w * f, w * f, f},
                                  b->images.data(), owner);
    } else {
      images = py::array_t<uint8_t>({n, h, w, c}, {h * w * c, w * c, c, py::ssize_t{1}},
                                    b->pixels.data(), owner);
    }
    py::array_t<int64_t> labels({n}, {static_cast<py::ssize_t>(sizeof(int64_t))},
                                b->labels.data(), owner);
    py::array_t<uint64_t> ids({n}, {static_cast<py::ssize_t>(sizeof(uint64_t))}, b->ids.data(),
                              owner);
    return py::make_tuple(images, labels, ids, b->cursor);
  }

  int64_t num_batches() const {
    std::shared_ptr<Loader> loader;
    {
      std::lock_guard<std::mutex> lock(mu_);
      loader = loader_;
    }
    return loader ? loader->num_batches() : 0;
  }
  uint64_t num_samples() const { return job_->servers()->manifest().num_samples(); }
  uint64_t dataset_fingerprint() const { return job_->servers()->manifest().fingerprint(); }
  std::vector<std::string> class_names() const {
    return job_->servers()->manifest().class_names();
  }
  std::string policy_name() const { return job_->policy()->name(); }

  py::dict Report() const {
    const LoaderEpochStats s = OpenLoader()->stats();
    py::dict d;
    d["samples"] = s.samples;
    d["skipped"] = s.skipped;
    d["batches"] = s.batches;
    uint64_t bytes = 0;
    py::dict by_stage, bytes_by_stage;
    for (int i = 0; i < kNumStages; ++i) {
      const std::string name(StageName(StageAt(i)));
      by_stage[py::str(name)] = s.samples_by_stage[i];
      bytes_by_stage[py::str(name)] = s.bytes_by_stage[i];
      bytes += s.bytes_by_stage[i];
    }
    d["bytes_received"] = bytes;
    d["samples_by_stage"] = by_stage;
    d["bytes_by_stage"] = bytes_by_stage;
    d["local_cpu_seconds"] = s.local_cpu_seconds;
    d["server_cpu_seconds"] = s.server_cpu_seconds;
    d["stream_breaks"] = s.stream_breaks;
    d["requested"] = s.requested;
    d["sample_cache_hits"] = s.sample_cache_hits;
    d["sample_cache_hit_bytes"] = s.sample_cache_hit_bytes;
    d["sample_cache_misses"] = s.sample_cache_misses;
    d["sample_cache_inserted"] = s.sample_cache_inserted;
    d["sample_cache_entries"] = s.sample_cache_entries;
    d["sample_cache_bytes"] = s.sample_cache_bytes;
    d["shared_batches_read"] = s.shared_batches_read;
    d["shared_batches_published"] = s.shared_batches_published;
    d["shared_take_seconds"] = s.shared_take_seconds;
    // smartoff's prediction of the epoch (0 for the fixed modes): its plan's,
    // made again from the first timed steps when it knew no step time.
    d["predicted_seconds"] = job_->policy()->PredictedEpochSeconds();
    return d;
  }

  // Idempotent. A call in progress in another thread keeps the stopped
  // loader alive until it returns; the last reference destroys it.
  void Close() {
    std::shared_ptr<Loader> loader;
    {
      std::lock_guard<std::mutex> lock(mu_);
      loader = std::move(loader_);
    }
    if (!loader) return;
    py::gil_scoped_release release;
    job_->Close();  // stops it; only the first close() gets here
    loader.reset();
  }

 private:
  // The loader, for one call; RuntimeError once closed.
  std::shared_ptr<Loader> OpenLoader() const {
    std::lock_guard<std::mutex> lock(mu_);
    if (!loader_) throw std::runtime_error("the loader is closed");
    return loader_;
  }

  // local_cache_*: this node's sample cache (checked by JobSpec::Validate).
  static LocalCacheOptions CacheOptions(const PyLoaderOptions& o) {
    LocalCacheOptions cache;
    cache.memory_bytes = o.local_cache_bytes;
    absl::StatusOr<CachePolicy> policy = ParseCachePolicy(o.local_cache_policy);
    if (!policy.ok()) {
      throw py::value_error(absl::StrCat("local_cache_policy: ", policy.status().message()));
    }
    cache.policy = *policy;
    cache.dir = o.local_cache_dir;
    cache.dir_bytes = o.local_cache_dir_bytes;
    return cache;
  }

  // smartoff's options, as sophon-train's flags of the same names.
  static SmartoffOptions SmartoffFrom(const PyLoaderOptions& o) {
    SmartoffOptions smart;
    smart.profile_folder = o.profile_folder;
    smart.net_bw_mbit = o.net_bw;
    smart.remote_cpus = o.remote_cpus;
    smart.gpu_batch_seconds = o.gpu_batch_seconds;
    smart.replan_threshold = o.replan_threshold;
    smart.local_world_size = o.local_world_size;
    absl::StatusOr<StageSet> stages = ParseStageSet(o.stages);
    if (!stages.ok()) throw py::value_error(absl::StrCat("stages: ", stages.status().message()));
    smart.stages = *stages;
    return smart;
  }

  LoaderOptions options_;
  // The servers, the policy and the loader (client/job/job.h); the servers
  // and the policy stay after close().
  std::unique_ptr<Job> job_;
  const std::shared_ptr<BatchPool> pool_ = std::make_shared<BatchPool>();
  // Guards loader_ and returned_at_; held for no call that blocks, and never
  // while taking the GIL.
  mutable std::mutex mu_;
  std::shared_ptr<Loader> loader_;  // null once closed
  absl::Time returned_at_ = absl::InfinitePast();  // when Next last returned a batch
};

// sophon.Server: a storage server inside this process, for tests and
// notebooks (sophon-server is the program for storage nodes).
class PyServer {
 public:
  explicit PyServer(const StorageServerOptions& options) {
    absl::StatusOr<std::unique_ptr<StorageServer>> server;
    {
      py::gil_scoped_release release;
      server = StorageServer::Start(options);
    }
    if (!server.ok()) {
      Raise(WithArgumentNames(server.status(),
                              {{"StorageServerOptions.data_dir", "data"},
                               {"StorageServerOptions.host", "host"},
                               {"StorageServerOptions.port", "port"},
                               {"ServiceOptions.prep_workers", "prep_workers"},
                               {"DecodeLimits.lenient", "lenient_jpeg"},
                               {"CredentialsOptions.", ""}}));
    }
    server_ = *std::move(server);
  }
  ~PyServer() { Stop(0); }

  std::string address() const {
    if (!server_) throw std::runtime_error("the server is stopped");
    return server_->address();
  }
  int port() const { return server_ ? server_->port() : 0; }
  uint64_t num_samples() const { return server_ ? server_->source().size() : 0; }

  // Stops accepting calls, lets streams end for up to `grace` seconds, joins
  // the threads. Idempotent.
  void Stop(double grace) {
    if (!server_) return;
    py::gil_scoped_release release;
    server_->Shutdown(absl::Seconds(grace));
    server_.reset();
  }

 private:
  std::unique_ptr<StorageServer> server_;
};

// sophon.plan: what sophon-plan --json prints for the same options. Errors
// name the Python argument (the library names its option fields).
std::string PlanJson(const WhatIfOptions& options, const std::string& stages) {
  WhatIfOptions o = options;
  absl::StatusOr<StageSet> parsed = ParseStageSet(stages);
  if (!parsed.ok()) throw py::value_error(absl::StrCat("stages: ", parsed.status().message()));
  o.stages = *parsed;
  absl::StatusOr<WhatIf> what_if;
  {
    py::gil_scoped_release release;
    what_if = PlanWhatIf(o);
  }
  if (!what_if.ok()) {
    Raise(WithArgumentNames(what_if.status(), {
        {"Resources.net_bytes_per_s", "net_bw"},
        {"Resources.remote_cpus", "remote_cpus"},
        {"Resources.remote_speed", "remote_speed"},
        {"Resources.local_cpus", "workers"},
        {"Resources.gpu_seconds_per_batch", "gpu_batch_seconds"},
        {"Resources.batch_size", "batch_size"},
        {"ClusterResources.ingress_bytes_per_s", "ingress_bw"},
        {"ProfileSource.times_profile", "times_profile"},
        {"ProfileSource.times_path", "times"},
        {"WhatIfOptions.source.path", "profile"},
        {"WhatIfOptions.server_net_mbit", "server_net_bw"},
        {"WhatIfOptions.server_remote_cpus", "server_remote_cpus"},
        {"WhatIfOptions.ingress_mbit", "ingress_bw"},
        {"WhatIfOptions.", ""},
    }));
  }
  return FormatWhatIf(*what_if, /*json=*/true);
}

}  // namespace
}  // namespace sophon

PYBIND11_MODULE(_sophon, m) {
  using sophon::PyLoader;
  using sophon::PyLoaderOptions;
  m.doc() = "Sophon's C++ loader (use the sophon package, not this module)";
  // The library's log lines go to stderr, as Python's own diagnostics do:
  // a program's stdout stays its own.
  spdlog::set_default_logger(spdlog::stderr_color_mt("sophon"));
  m.attr("IMAGENET_MEAN") =
      py::make_tuple(sophon::kImageNetMean[0], sophon::kImageNetMean[1], sophon::kImageNetMean[2]);
  m.attr("IMAGENET_STD") =
      py::make_tuple(sophon::kImageNetStd[0], sophon::kImageNetStd[1], sophon::kImageNetStd[2]);
  py::class_<PyLoader>(m, "Loader")
      .def(py::init([](std::vector<std::string> servers, int batch_size, std::string mode,
                       int crop_size, uint64_t seed, int workers, int prefetch_batches, int rank,
                       int world_size, bool drop_last, std::pair<double, double> scale,
                       std::pair<double, double> ratio, bool lenient_jpeg,
                       std::string on_bad_sample, std::string augment, int eval_resize,
                       std::string output, double connect_timeout,
                       std::string profile_folder, std::string planner, double net_bw,
                       double remote_cpus, double gpu_batch_seconds, double replan_threshold,
                       std::string stages, std::string tls_ca, std::string tls_cert,
                       std::string tls_key, std::string tls_server_name,
                       std::string auth_token_file, int shuffle_window,
                       int64_t local_cache_bytes, std::string local_cache_policy,
                       std::string local_cache_dir, int64_t local_cache_dir_bytes,
                       std::string share_batches_dir, int64_t share_batches_window_bytes,
                       int local_world_size) {
             PyLoaderOptions o;
             o.servers = std::move(servers);
             o.batch_size = batch_size;
             o.mode = std::move(mode);
             o.crop_size = crop_size;
             o.seed = seed;
             o.shuffle_window = shuffle_window;
             o.workers = workers;
             o.prefetch_batches = prefetch_batches;
             o.rank = rank;
             o.world_size = world_size;
             o.drop_last = drop_last;
             o.scale = scale;
             o.ratio = ratio;
             o.lenient_jpeg = lenient_jpeg;
             o.on_bad_sample = std::move(on_bad_sample);
             o.output = std::move(output);
             o.augment = std::move(augment);
             o.eval_resize = eval_resize;
             o.connect_timeout = connect_timeout;
             o.profile_folder = std::move(profile_folder);
             o.planner = std::move(planner);
             o.net_bw = net_bw;
             o.remote_cpus = remote_cpus;
             o.gpu_batch_seconds = gpu_batch_seconds;
             o.replan_threshold = replan_threshold;
             o.stages = std::move(stages);
             o.tls_ca = std::move(tls_ca);
             o.tls_cert = std::move(tls_cert);
             o.tls_key = std::move(tls_key);
             o.tls_server_name = std::move(tls_server_name);
             o.auth_token_file = std::move(auth_token_file);
             o.local_cache_bytes = local_cache_bytes;
             o.local_cache_policy = std::move(local_cache_policy);
             o.local_cache_dir = std::move(local_cache_dir);
             o.local_cache_dir_bytes = local_cache_dir_bytes;
             o.share_batches_dir = std::move(share_batches_dir);
             o.share_batches_window_bytes = share_batches_window_bytes;
             o.local_world_size = local_world_size;
             return std::make_unique<PyLoader>(o);
           }),
           py::arg("servers"), py::arg("batch_size"), py::arg("mode"), py::arg("crop_size"),
           py::arg("seed"), py::arg("workers"), py::arg("prefetch_batches"), py::arg("rank"),
           py::arg("world_size"), py::arg("drop_last"), py::arg("scale"), py::arg("ratio"),
           py::arg("lenient_jpeg"), py::arg("on_bad_sample"), py::arg("augment"),
           py::arg("eval_resize"), py::arg("output"),
           py::arg("connect_timeout"),
           py::arg("profile_folder"), py::arg("planner"), py::arg("net_bw"),
           py::arg("remote_cpus"), py::arg("gpu_batch_seconds"), py::arg("replan_threshold"),
           py::arg("stages"), py::arg("tls_ca"), py::arg("tls_cert"), py::arg("tls_key"),
           py::arg("tls_server_name"), py::arg("auth_token_file"), py::arg("shuffle_window"),
           py::arg("local_cache_bytes"), py::arg("local_cache_policy"),
           py::arg("local_cache_dir"), py::arg("local_cache_dir_bytes"),
           py::arg("share_batches_dir"), py::arg("share_batches_window_bytes"),
           py::arg("local_world_size"))
      .def("start_epoch", &PyLoader::StartEpoch, py::arg("epoch"), py::arg("start_position") = 0,
           py::arg("max_batches") = 0)
      .def("next", &PyLoader::Next)
      .def("num_batches", &PyLoader::num_batches)
      .def("num_samples", &PyLoader::num_samples)
      .def("dataset_fingerprint", &PyLoader::dataset_fingerprint)
      .def("class_names", &PyLoader::class_names)
      .def("policy_name", &PyLoader::policy_name)
      .def("report", &PyLoader::Report)
      .def("close", &PyLoader::Close);
  py::class_<sophon::PyServer>(m, "Server")
      .def(py::init([](std::string data, std::string host, int port, int prep_workers,
                       bool lenient_jpeg, std::string tls_cert, std::string tls_key,
                       std::string tls_client_ca, std::string auth_token_file) {
             sophon::StorageServerOptions o;
             o.data_dir = std::move(data);
             o.host = std::move(host);
             o.port = port;
             o.service.prep_workers = prep_workers;
             o.service.limits.lenient = lenient_jpeg;
             o.stats_interval = absl::ZeroDuration();
             o.credentials.tls_cert = std::move(tls_cert);
             o.credentials.tls_key = std::move(tls_key);
             o.credentials.tls_client_ca = std::move(tls_client_ca);
             o.credentials.auth_token_file = std::move(auth_token_file);
             o.credentials.kind = sophon::DefaultCredentialsKind(o.credentials);
             return std::make_unique<sophon::PyServer>(o);
           }),
           py::arg("data"), py::arg("host"), py::arg("port"), py::arg("prep_workers"),
           py::arg("lenient_jpeg"), py::arg("tls_cert"), py::arg("tls_key"),
           py::arg("tls_client_ca"), py::arg("auth_token_file"))
      .def("address", &sophon::PyServer::address)
      .def("port", &sophon::PyServer::port)
      .def("num_samples", &sophon::PyServer::num_samples)
      .def("stop", &sophon::PyServer::Stop, py::arg("grace") = 2.0);
  m.def(
      "plan_json",
      [](std::string profile, double net_bw, double remote_cpus, double workers,
         double gpu_batch_seconds, int batch_size, std::string stages, double remote_speed,
         double recv_ns_per_byte, double read_ns_per_byte, double send_ns_per_byte, int servers,
         std::string layout, std::vector<double> server_net_bw,
         std::vector<double> server_remote_cpus, double ingress_bw, std::string times,
         std::string times_profile, int crop_size) {
        sophon::WhatIfOptions o;
        o.source.path = std::move(profile);
        o.source.times_path = std::move(times);
        o.source.times_profile = std::move(times_profile);
        o.source.crop_size = crop_size;
        o.net_mbit = net_bw;
        o.remote_cpus = remote_cpus;
        o.workers = workers;
        o.gpu_batch_seconds = gpu_batch_seconds;
        o.batch_size = batch_size;
        o.remote_speed = remote_speed;
        o.recv_ns_per_byte = recv_ns_per_byte;
        o.read_ns_per_byte = read_ns_per_byte;
        o.send_ns_per_byte = send_ns_per_byte;
        o.servers = servers;
        o.layout = std::move(layout);
        o.server_net_mbit = std::move(server_net_bw);
        o.server_remote_cpus = std::move(server_remote_cpus);
        o.ingress_mbit = ingress_bw;
        return sophon::PlanJson(o, stages);
      },
      py::arg("profile"), py::arg("net_bw"), py::arg("remote_cpus"), py::arg("workers"),
      py::arg("gpu_batch_seconds"), py::arg("batch_size"), py::arg("stages"),
      py::arg("remote_speed"), py::arg("recv_ns_per_byte"), py::arg("read_ns_per_byte"),
      py::arg("send_ns_per_byte"), py::arg("servers"), py::arg("layout"),
      py::arg("server_net_bw"), py::arg("server_remote_cpus"), py::arg("ingress_bw"),
      py::arg("times"), py::arg("times_profile"), py::arg("crop_size"));
}
