#include "tools/bench/load_attacks.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <memory>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "sophon/data/image_folder.h"
#include "sophon/net/wire.h"
#include "tools/bench/h2_raw.h"

namespace sophon {
namespace {

constexpr absl::string_view kFetchPath = "/sophon.v1.SampleService/Fetch";
constexpr absl::string_view kGetStatsPath = "/sophon.v1.SampleService/GetStats";
// What a connection may have queued before the attack waits for the socket:
// bounds this process's memory when the server grants large windows.
constexpr size_t kMaxQueued = size_t{1} << 20;

const std::pair<AttackKind, const char*> kNames[] = {
    {AttackKind::kNone, "none"},           {AttackKind::kHog, "hog"},
    {AttackKind::kRotating, "rotating"},   {AttackKind::kHalfSent, "halfsent"},
    {AttackKind::kHalfUnary, "halfunary"}, {AttackKind::kUnreadUnary, "unreadunary"},
    {AttackKind::kSlots, "slots"},         {AttackKind::kGrowFile, "growfile"},
    {AttackKind::kChurn, "churn"},
};

double MB(double bytes) { return bytes / 1e6; }

int64_t FileSize(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : -1;
}

// A message on a stream, sent as the windows allow.
struct Outgoing {
  H2RawConnection* conn;
  uint32_t stream;
  absl::string_view data;  // points into a buffer that outlives the attack's run
  size_t sent = 0;
  bool end_stream = false;
};

}  // namespace

std::string AttackName(AttackKind kind) {
  for (const auto& [k, name] : kNames) {
    if (k == kind) return name;
  }
  return "?";
}

absl::StatusOr<AttackKind> ParseAttackKind(const std::string& name) {
  std::vector<std::string> all;
  for (const auto& [k, n] : kNames) {
    if (name == n) return k;
    all.push_back(n);
  }
  return absl::InvalidArgumentError(absl::StrCat("AttackOptions.kind must be one of ",
                                                 absl::StrJoin(all, ", "), " (got '", name, "')"));
}

int DefaultStreams(AttackKind kind) {
  switch (kind) {
    case AttackKind::kHog:
    case AttackKind::kRotating: return 8;
    case AttackKind::kHalfSent: return 2048;
    case AttackKind::kHalfUnary: return 1000;
    case AttackKind::kUnreadUnary: return 100'000;
    case AttackKind::kSlots: return 16 * 256;
    case AttackKind::kGrowFile: return 1;
    case AttackKind::kChurn: return 300'000;
    case AttackKind::kNone: return 0;
  }
  return 0;
}

int DefaultConnections(AttackKind kind) {
  switch (kind) {
    case AttackKind::kHalfSent:
    case AttackKind::kSlots: return 16;
    case AttackKind::kHalfUnary: return 8;
    case AttackKind::kChurn: return 4;
    default: return 1;
  }
}

absl::Status AttackOptions::Validate() const {
  auto bad = [](absl::string_view field, absl::string_view need, auto got) {
    return absl::InvalidArgumentError(
        absl::StrCat("AttackOptions.", field, " must be ", need, " (got ", got, ")"));
  };
  if (kind == AttackKind::kNone) return absl::OkStatus();
  if (port < 1 || port > 65535) return bad("port", "in [1, 65535]", port);
  if (time <= absl::ZeroDuration()) return bad("time", "> 0", absl::FormatDuration(time));
  if (sources < -1 || sources > 250) return bad("sources", "in [-1, 250]", sources);
  if (streams < 0) return bad("streams", ">= 0", streams);
  if (connections < 0) return bad("connections", ">= 0", connections);
  if (message_bytes < 2 || message_bytes > UINT32_MAX) {
    return bad("message_bytes", "in [2, 4294967295]", message_bytes);
  }
  if (crop_size < 1) return bad("crop_size", ">= 1", crop_size);
  if (samples_per_stream < 1) return bad("samples_per_stream", ">= 1", samples_per_stream);
  if (ids_per_request < 1) return bad("ids_per_request", ">= 1", ids_per_request);
  if (rotate_every <= absl::ZeroDuration()) {
    return bad("rotate_every", "> 0", absl::FormatDuration(rotate_every));
  }
  if (receive_window < -1 || receive_window > INT32_MAX) {
    return bad("receive_window", "in [-1, 2147483647]", receive_window);
  }
  if (kind == AttackKind::kGrowFile && grow_file.empty()) {
    return absl::InvalidArgumentError("AttackOptions.grow_file is required by the growfile attack");
  }
  if (grow_to_bytes < 1) return bad("grow_to_bytes", ">= 1", grow_to_bytes);
  if (grow_requests < 1) return bad("grow_requests", ">= 1", grow_requests);
  if (churn_inflight < 1) return bad("churn_inflight", ">= 1", churn_inflight);
  return absl::OkStatus();
}

std::string AttackResult::Brief() const {
  const std::string from = sources.size() > 2 ? absl::StrCat(sources.size(), " addresses")
                           : sources.empty()    ? std::string("-")
                                                : absl::StrJoin(sources, ",");
  std::string s = absl::StrFormat("%d conn from %s; %u streams", connections, from, streams_started);
  if (streams_reset_by_server > 0) absl::StrAppend(&s, ", ", streams_reset_by_server, " reset");
  if (streams_ended_by_server > 0) absl::StrAppend(&s, ", ", streams_ended_by_server, " ended");
  absl::StrAppend(&s, ", ", streams_open_at_end, " open at end");
  for (const auto& [k, v] : figures) {
    if (k.find("bytes") != std::string::npos) {
      absl::StrAppendFormat(&s, "; %s %.1f MB", k, MB(v));
    } else {
      absl::StrAppendFormat(&s, "; %s %.6g", k, v);
    }
  }
  if (connections_failed > 0) absl::StrAppend(&s, "; ", connections_failed, " conn failed");
  if (connections_lost > 0) absl::StrAppend(&s, "; ", connections_lost, " conn lost");
  if (goaways > 0) absl::StrAppend(&s, "; ", goaways, " GOAWAY");
  return s;
}

Attack::Attack(const AttackOptions& options, const ServerManifest* manifest)
    : options_(options), manifest_(manifest) {}

Attack::~Attack() { Stop(); }

void Attack::Start() {
  thread_ = std::thread([this] { Run(); });
}

void Attack::Stop() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (thread_.joinable()) thread_.join();
}

void Attack::Join() {
  if (thread_.joinable()) thread_.join();
}

bool Attack::WaitStarted(absl::Duration timeout) {
  return started_.WaitForNotificationWithTimeout(timeout);
}

AttackResult Attack::result() const {
  absl::MutexLock lock(&mu_);
  return result_;
}

namespace {

// The state of one attack's run: its connections and what they did.
class Runner {
 public:
  Runner(const AttackOptions& o, const ServerManifest* manifest, absl::Notification* stop,
         absl::Notification* started)
      : o_(o), manifest_(manifest), stop_(stop), started_(started),
        t0_(absl::Now()), deadline_(t0_ + o.time),
        streams_(o.streams > 0 ? o.streams : DefaultStreams(o.kind)),
        conns_wanted_(o.connections > 0 ? o.connections : DefaultConnections(o.kind)),
        sources_(o.sources >= 0 ? o.sources : (o.kind == AttackKind::kSlots ? 16 : 1)) {
    r_.name = AttackName(o.kind);
  }

  AttackResult Run() {
    switch (o_.kind) {
      case AttackKind::kHog: Hog(); break;
      case AttackKind::kRotating: Rotating(); break;
      case AttackKind::kHalfSent: HalfSent(kFetchPath); break;
      case AttackKind::kHalfUnary: HalfSent(kGetStatsPath); break;
      case AttackKind::kUnreadUnary: UnreadUnary(); break;
      case AttackKind::kSlots: Slots(); break;
      case AttackKind::kGrowFile: GrowFile(); break;
      case AttackKind::kChurn: Churn(); break;
      case AttackKind::kNone: break;
    }
    MarkStarted();
    for (auto& c : conns_) Retire(std::move(c), /*at_end=*/true);
    conns_.clear();
    r_.seconds = absl::ToDoubleSeconds(absl::Now() - t0_);
    r_.sources.assign(sources_seen_.begin(), sources_seen_.end());
    return r_;
  }

 private:
  void MarkStarted() {
    if (!started_->HasBeenNotified()) started_->Notify();
  }

  bool Stopped() const { return stop_->HasBeenNotified() || absl::Now() >= deadline_; }

  int64_t ReceiveWindow() const {
    if (o_.receive_window >= 0) return o_.receive_window;
    return o_.kind == AttackKind::kUnreadUnary ? 0 : 65535;
  }

  // A new connection (the index picks its source address), or null.
  H2RawConnection* Connect() {
    H2RawOptions ho;
    ho.host = o_.host;
    ho.port = o_.port;
    if (sources_ > 0) ho.source_address = absl::StrCat("127.0.0.", 2 + next_source_++ % sources_);
    ho.receive_window = static_cast<uint32_t>(ReceiveWindow());
    ho.replenish = o_.kind == AttackKind::kChurn;  // the others never read what they asked for
    absl::StatusOr<std::unique_ptr<H2RawConnection>> c = H2RawConnection::Connect(ho);
    if (!c.ok()) {
      ++r_.connections_failed;
      if (r_.first_error.empty()) r_.first_error = std::string(c.status().message());
      return nullptr;
    }
    ++r_.connections;
    sources_seen_.insert(ho.source_address.empty() ? "127.0.0.1" : ho.source_address);
    conns_.push_back(*std::move(c));
    // Its preface and SETTINGS, and the server's SETTINGS (so that the
    // first streams use the server's windows).
    const absl::Time until = std::min(deadline_, absl::Now() + absl::Seconds(2));
    H2RawConnection* raw = conns_.back().get();
    raw->Flush(until);
    while (!raw->got_peer_settings() && !raw->closed() && absl::Now() < until) {
      (void)raw->Pump(absl::Milliseconds(20));
    }
    return raw;
  }

  void Retire(std::unique_ptr<H2RawConnection> c, bool at_end) {
    if (c == nullptr) return;
    const H2RawConnection::Counters& k = c->counters();
    r_.streams_started += k.streams_started;
    r_.streams_reset_by_server += k.streams_reset_by_peer;
    r_.streams_ended_by_server += k.streams_ended_by_peer;
    r_.request_bytes_sent += k.data_bytes_sent;
    r_.response_bytes_received += k.data_bytes_received;
    for (const auto& [code, n] : k.resets_by_code) r_.resets_by_code[code] += n;
    if (at_end) r_.streams_open_at_end += c->open_streams();
    if (c->closed()) ++r_.connections_lost;
    if (c->goaway()) ++r_.goaways;
  }

  // Every connection, one I/O round each.
  void PumpAll(absl::Duration each) {
    for (auto& c : conns_) {
      if (!c->closed()) (void)c->Pump(each);
    }
  }

  // Sends the messages as the windows allow, until all are sent (or their
  // streams ended) or the attack stops; returns how many were sent whole.
  uint64_t SendAll(std::vector<Outgoing>& out) {
    uint64_t whole = 0;
    while (!out.empty() && !Stopped()) {
      bool progress = false;
      for (Outgoing& m : out) {
        if (m.conn->queued_bytes() >= kMaxQueued) continue;
        const size_t n = m.conn->SendData(m.stream, m.data.substr(m.sent), m.end_stream);
        m.sent += n;
        progress |= n > 0;
      }
      out.erase(std::remove_if(out.begin(), out.end(),
                               [&whole](const Outgoing& m) {
                                 whole += m.sent == m.data.size();
                                 return m.sent == m.data.size() || !m.conn->IsOpen(m.stream) ||
                                        m.conn->closed();
                               }),
                out.end());
      PumpAll(progress ? absl::ZeroDuration() : absl::Milliseconds(2));
    }
    return whole;
  }

  // Keeps the connections open (answering pings) until the attack stops.
  void Hold() {
    MarkStarted();
    while (!Stopped()) {
      bool any = false;
      for (auto& c : conns_) {
        if (c->closed()) continue;
        any = true;
        (void)c->Pump(absl::Milliseconds(5));
      }
      if (!any) break;  // the server closed them all
    }
  }

  // gRPC-framed FetchRequests for `ids`.
  std::string FetchMessages(const std::vector<uint64_t>& ids, Stage stage, int crop) const {
    AugmentOptions augment;
    augment.crop_size = crop;
    FetchRequestBuilder builder(0, 1, augment);
    std::string out;
    auto flush = [&] {
      const std::string bytes = builder.Take().SerializeAsString();
      out += H2RawConnection::GrpcPrefix(static_cast<uint32_t>(bytes.size())) + bytes;
    };
    for (uint64_t id : ids) {
      builder.Add(id, stage);
      if (builder.size() >= o_.ids_per_request) flush();
    }
    if (builder.size() > 0) flush();
    return out;
  }

  // Opens the hog's streams on `c`, each asking for its samples; the
  // requests go into `out`.
  // Opens hog streams [first, first + count) on `c`, each asking for its
  // samples; the asked bytes are added to the report.
  void OpenHogStreams(H2RawConnection* c, std::vector<Outgoing>* out, int first = 0,
                      int count = -1) {
    const uint64_t n = std::max<uint64_t>(1, manifest_->num_samples());
    double asked = 0;
    const int end = count < 0 ? streams_ : std::min(streams_, first + count);
    for (int s = first; s < end; ++s) {
      std::vector<uint64_t> ids;
      for (int k = 0; k < o_.samples_per_stream; ++k) {
        ids.push_back((static_cast<uint64_t>(s) * o_.samples_per_stream + k) % n);
      }
      for (uint64_t id : ids) {
        asked += o_.stage == Stage::kRaw && id < manifest_->raw_sizes.size()
                     ? static_cast<double>(manifest_->raw_sizes[id])
                     : static_cast<double>(StagePayloadBytes(o_.stage, o_.crop_size));
      }
      buffers_.push_back(FetchMessages(ids, o_.stage, o_.crop_size));
      out->push_back({c, c->StartCall(kFetchPath, false), buffers_.back()});
    }
    r_.figures["sample_bytes_asked"] += asked;
  }

  // The hog's streams spread over its connections (one address each when
  // sources allow: --attack-connections=4 --attack-sources=4).
  void Hog() {
    for (int i = 0; i < conns_wanted_ && !Stopped(); ++i) Connect();
    if (conns_.empty()) return;
    const int per = (streams_ + static_cast<int>(conns_.size()) - 1) /
                    static_cast<int>(conns_.size());
    std::vector<Outgoing> out;
    for (size_t i = 0; i < conns_.size(); ++i) {
      OpenHogStreams(conns_[i].get(), &out, static_cast<int>(i) * per, per);
    }
    SendAll(out);
    Hold();
  }

  void Rotating() {
    MarkStarted();
    int rotations = 0;
    while (!Stopped()) {
      H2RawConnection* c = Connect();
      if (c == nullptr) break;
      std::vector<Outgoing> out;
      OpenHogStreams(c, &out);
      const absl::Time turn = absl::Now() + o_.rotate_every;
      SendAll(out);
      while (!Stopped() && absl::Now() < turn && !c->closed()) (void)c->Pump(absl::Milliseconds(5));
      if (Stopped()) break;
      // Ends its streams and the connection; the next turn opens new ones.
      for (uint32_t id = 1; id < 2u * static_cast<uint32_t>(streams_) + 1; id += 2) {
        if (c->IsOpen(id)) c->ResetStream(id);
      }
      c->Flush(std::min(deadline_, absl::Now() + absl::Seconds(1)));
      Retire(std::move(conns_.back()), false);
      conns_.pop_back();
      buffers_.clear();
      ++rotations;
      r_.figures["rotations"] = rotations;
    }
    r_.figures["rotations"] = rotations;
  }

  // halfsent (Fetch) and halfunary (GetStats): announce message_bytes, send
  // all but the last byte, hold.
  void HalfSent(absl::string_view path) {
    buffers_.push_back(H2RawConnection::GrpcPrefix(static_cast<uint32_t>(o_.message_bytes)) +
                       std::string(static_cast<size_t>(o_.message_bytes) - 1, '\0'));
    const absl::string_view message = buffers_.back();
    for (int i = 0; i < conns_wanted_ && !Stopped(); ++i) Connect();
    if (conns_.empty()) return;
    std::vector<Outgoing> out;
    for (int s = 0; s < streams_ && !Stopped(); ++s) {
      H2RawConnection* c = conns_[static_cast<size_t>(s) % conns_.size()].get();
      out.push_back({c, c->StartCall(path, false), message});
    }
    for (auto& c : conns_) c->Flush(std::min(deadline_, absl::Now() + absl::Seconds(5)));
    MarkStarted();
    // Streams that got every byte but the last: the server holds an
    // unfinished message on each (it still reads them: windows permitting).
    const uint64_t whole = SendAll(out);
    uint64_t sent = 0;
    for (auto& c : conns_) sent += c->counters().data_bytes_sent;
    r_.figures["bytes_in_unfinished_messages"] = static_cast<double>(sent);
    r_.figures["streams_with_all_but_last_byte"] = static_cast<double>(whole);
    r_.figures["seconds_to_send"] = absl::ToDoubleSeconds(absl::Now() - t0_);
    Hold();
  }

  // GetStats calls whose answers are never taken, spread over the attack's
  // connections (one address each when sources allow). Each connection keeps
  // within the server's SETTINGS_MAX_CONCURRENT_STREAMS (a client over it
  // loses its connection, which would end the attack early): a call is
  // started once the server has ended one, so the calls it holds stay open
  // and the ones it refuses make room; a connection the server closes is
  // left, the others go on.
  void UnreadUnary() {
    for (int i = 0; i < conns_wanted_ && !Stopped(); ++i) Connect();
    if (conns_.empty()) return;
    buffers_.push_back(H2RawConnection::GrpcPrefix(0));  // an empty GetStatsRequest
    const absl::string_view empty = buffers_.back();
    uint64_t sent = 0;
    while (sent < static_cast<uint64_t>(streams_) && !Stopped()) {
      bool any_open = false, progress = false;
      for (auto& c : conns_) {
        if (c->closed()) continue;
        any_open = true;
        const size_t max_open = std::min<uint32_t>(c->peer_max_concurrent_streams(), 1u << 20);
        while (sent < static_cast<uint64_t>(streams_) && c->open_streams() < max_open &&
               c->queued_bytes() < kMaxQueued) {
          const uint32_t stream = c->StartCall(kGetStatsPath, false);
          c->SendData(stream, empty, /*end_stream=*/true);
          ++sent;
          progress = true;
        }
      }
      if (!any_open) break;  // the server closed them all
      PumpAll(progress ? absl::ZeroDuration() : absl::Milliseconds(5));
    }
    r_.figures["calls_sent"] = static_cast<double>(sent);
    r_.figures["seconds_to_send"] = absl::ToDoubleSeconds(absl::Now() - t0_);
    Hold();
    // Answers the server began (headers); their messages it must keep.
    double headers = 0, ended = 0, closed = 0;
    for (auto& c : conns_) {
      headers += static_cast<double>(c->counters().streams_with_headers);
      ended += static_cast<double>(c->counters().streams_ended_by_peer);
      closed += c->closed() ? 1 : 0;
    }
    r_.figures["calls_answered_headers"] = headers;
    r_.figures["calls_ended_by_server"] = ended;
    r_.figures["connections_closed_by_server"] = closed;
  }

  void Slots() {
    for (int i = 0; i < conns_wanted_ && !Stopped(); ++i) Connect();
    if (conns_.empty()) return;
    for (int s = 0; s < streams_ && !Stopped(); ++s) {
      H2RawConnection* c = conns_[static_cast<size_t>(s) % conns_.size()].get();
      c->StartCall(kFetchPath, false);
      if (c->queued_bytes() >= kMaxQueued) c->Flush(deadline_);
    }
    for (auto& c : conns_) c->Flush(deadline_);
    // Give the server a moment to refuse what it refuses before counting.
    const absl::Time until = std::min(deadline_, absl::Now() + absl::Seconds(1));
    while (absl::Now() < until && !stop_->HasBeenNotified()) PumpAll(absl::Milliseconds(5));
    uint64_t open = 0;
    for (auto& c : conns_) open += c->open_streams();
    r_.figures["streams_held_after_1s"] = static_cast<double>(open);
    Hold();
  }

  void GrowFile() {
    // The sample's id: the file's place in its dataset, listed as the server
    // lists it (manifests carry no paths).
    int64_t id = -1;
    const std::filesystem::path file(o_.grow_file);
    absl::StatusOr<std::unique_ptr<ImageFolderSource>> dataset =
        ImageFolderSource::Open(file.parent_path().parent_path().string());
    if (dataset.ok()) {
      const std::vector<std::string> paths = (*dataset)->FilePaths();
      const auto it = std::find(paths.begin(), paths.end(), file.string());
      if (it != paths.end()) id = it - paths.begin();
    }
    if (id < 0 || static_cast<uint64_t>(id) >= manifest_->num_samples()) {
      r_.first_error = absl::StrCat(o_.grow_file, " is no sample of the server's dataset");
      return;
    }
    const int64_t before = FileSize(o_.grow_file);
    r_.figures["manifest_file_bytes"] = static_cast<double>(manifest_->raw_sizes[id]);
    r_.figures["file_bytes_before"] = static_cast<double>(before);
    if (FILE* f = std::fopen(o_.grow_file.c_str(), "ab")) {
      const std::string chunk(size_t{1} << 20, '\0');
      int64_t size = before;
      while (size < o_.grow_to_bytes && !Stopped()) {
        const size_t n = static_cast<size_t>(
            std::min<int64_t>(o_.grow_to_bytes - size, static_cast<int64_t>(chunk.size())));
        if (std::fwrite(chunk.data(), 1, n, f) != n) break;
        size += static_cast<int64_t>(n);
      }
      std::fclose(f);
    } else {
      r_.first_error = absl::StrCat("cannot append to ", o_.grow_file);
    }
    const int64_t after = FileSize(o_.grow_file);
    r_.figures["file_bytes_after"] = static_cast<double>(after);
    H2RawConnection* c = Connect();
    if (c == nullptr) return;
    const std::vector<uint64_t> ids(static_cast<size_t>(o_.grow_requests),
                                    static_cast<uint64_t>(id));
    buffers_.push_back(FetchMessages(ids, Stage::kRaw, o_.crop_size));
    std::vector<Outgoing> out{{c, c->StartCall(kFetchPath, false), buffers_.back()}};
    r_.figures["sample_bytes_asked"] = static_cast<double>(after) * o_.grow_requests;
    SendAll(out);
    Hold();
  }

  void Churn() {
    MarkStarted();
    for (int i = 0; i < conns_wanted_ && !Stopped(); ++i) Connect();
    uint64_t opened = 0;
    const uint64_t total = static_cast<uint64_t>(streams_);
    while (opened < total && !Stopped() && !conns_.empty()) {
      for (size_t i = 0; i < conns_.size(); ++i) {
        H2RawConnection* c = conns_[i].get();
        if (c->closed() || c->goaway()) {  // a fresh connection in its place
          Retire(std::move(conns_[i]), false);
          conns_.erase(conns_.begin() + static_cast<std::ptrdiff_t>(i));
          if (Connect() == nullptr) return;
          break;
        }
        const size_t limit =
            std::min<size_t>(static_cast<size_t>(o_.churn_inflight), c->peer_max_concurrent_streams());
        while (c->open_streams() < limit && opened < total && c->queued_bytes() < kMaxQueued) {
          c->StartCall(kFetchPath, true);
          ++opened;
        }
        (void)c->Pump(absl::ZeroDuration());
      }
      PumpAll(absl::Milliseconds(1));
    }
    // The last ones' ends.
    const absl::Time until = std::min(deadline_, absl::Now() + absl::Seconds(2));
    while (absl::Now() < until && !stop_->HasBeenNotified()) {
      size_t open = 0;
      for (auto& c : conns_) open += c->closed() ? 0 : c->open_streams();
      if (open == 0) break;
      PumpAll(absl::Milliseconds(5));
    }
    const double secs = absl::ToDoubleSeconds(absl::Now() - t0_);
    r_.figures["streams_per_s"] = secs > 0 ? static_cast<double>(opened) / secs : 0;
  }

  const AttackOptions& o_;
  const ServerManifest* const manifest_;
  absl::Notification* const stop_;
  absl::Notification* const started_;
  const absl::Time t0_;
  const absl::Time deadline_;
  const int streams_;
  const int conns_wanted_;
  const int sources_;
  int next_source_ = 0;
  std::vector<std::unique_ptr<H2RawConnection>> conns_;
  std::deque<std::string> buffers_;  // messages the Outgoing entries point into (stable)
  std::set<std::string> sources_seen_;
  AttackResult r_;
};

}  // namespace

void Attack::Run() {
  AttackResult r = Runner(options_, manifest_, &stop_, &started_).Run();
  absl::MutexLock lock(&mu_);
  result_ = std::move(r);
}

}  // namespace sophon
