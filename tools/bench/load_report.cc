#include "tools/bench/load_report.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "sophon/base/json.h"

namespace sophon {

double JainIndex(const std::vector<double>& x) {
  double sum = 0, sum_sq = 0;
  for (double v : x) {
    sum += v;
    sum_sq += v * v;
  }
  if (x.empty() || sum_sq == 0) return 1.0;
  return sum * sum / (static_cast<double>(x.size()) * sum_sq);
}

namespace {

struct Figures {
  std::vector<double> rates;   // per trainer, samples/s over its own time
  std::vector<double> window;  // per trainer, samples when the first one finished
  uint64_t samples = 0;
  uint64_t bytes = 0;
  uint64_t errors = 0, foreign = 0, bad_payload = 0;
  double rate = 0;  // all trainers' samples / the run's seconds
  double min_rate = 0, max_rate = 0;
  double cpu_ms_per_sample = -1;  // server CPU between the trainers' start and end
};

Figures Compute(const LoadResult& r) {
  Figures f;
  for (const TrainerResult& t : r.trainers) {
    f.rates.push_back(t.seconds > 0 ? static_cast<double>(t.samples) / t.seconds : 0);
    f.window.push_back(static_cast<double>(t.samples_at_first_finish));
    f.samples += t.samples;
    f.bytes += t.bytes;
    f.errors += t.errors;
    f.foreign += t.foreign;
    f.bad_payload += t.bad_payload;
  }
  f.rate = r.seconds > 0 ? static_cast<double>(f.samples) / r.seconds : 0;
  if (!f.rates.empty()) {
    f.min_rate = *std::min_element(f.rates.begin(), f.rates.end());
    f.max_rate = *std::max_element(f.rates.begin(), f.rates.end());
  }
  if (r.server_end.alive && r.server_start.alive && f.samples > 0) {
    f.cpu_ms_per_sample = 1e3 * (r.server_end.cpu_seconds - r.server_start.cpu_seconds) /
                          static_cast<double>(f.samples);
  }
  return f;
}

std::string Counts(const std::map<std::string, uint64_t>& m) {
  if (m.empty()) return "none";
  return absl::StrJoin(m, ", ", [](std::string* out, const auto& kv) {
    absl::StrAppend(out, kv.first, " ", kv.second);
  });
}

// The server's CPU time from before the run to its last sample.
double ServerCpuSeconds(const LoadResult& r) {
  return r.server.last.cpu_seconds - r.server_before.cpu_seconds;
}

double MiB(int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

void JsonCounts(JsonWriter& w, absl::string_view key, const std::map<std::string, uint64_t>& m) {
  w.Key(key).BeginObject();
  for (const auto& [k, v] : m) w.Key(k).Uint(v);
  w.EndObject();
}

}  // namespace

std::string LoadSummary(const LoadResult& r) {
  const LoadOptions& o = r.options;
  const Figures f = Compute(r);
  std::string s;
  absl::StrAppendFormat(&s, "== sophon-bench-load %s: %s at %s, %d prep workers, %d samples\n",
                        o.label, r.dataset, o.address, r.server_prep_workers, r.num_samples);
  absl::StrAppendFormat(&s,
                        "   %d trainers x %d epochs (%s, crop %d, window %d, %d ids per message), "
                        "%d idle streams on %d channels, %d hostile (%s, crop %d, %d ids each)\n",
                        o.trainers, o.epochs, StageName(o.stage), o.crop_size, o.window,
                        o.ids_per_request, o.idle, o.idle_channels, o.hostile,
                        StageName(o.hostile_stage), o.hostile_crop, o.hostile_samples);
  absl::StrAppendFormat(&s, "throughput: %.1f samples/s aggregate (%.1f MiB/s) over %.1f s%s\n",
                        f.rate, r.seconds > 0 ? MiB(f.bytes) / r.seconds : 0.0, r.seconds,
                        r.timed_out ? " (TIMED OUT: trainers cancelled)" : "");
  std::vector<std::string> per;
  for (double x : f.rates) per.push_back(absl::StrFormat("%.1f", x));
  absl::StrAppendFormat(
      &s, "client CPU: %.1f s (%.2f ms per sample)\n", r.client_cpu_seconds,
      f.samples > 0 ? 1e3 * r.client_cpu_seconds / static_cast<double>(f.samples) : 0.0);
  absl::StrAppend(&s, "per trainer samples/s: ", absl::StrJoin(per, " "), "\n");
  absl::StrAppendFormat(&s,
                        "fairness: min/max %.3f, Jain %.4f; samples when the first trainer "
                        "finished (%.1f s): Jain %.4f\n",
                        f.max_rate > 0 ? f.min_rate / f.max_rate : 0.0, JainIndex(f.rates),
                        r.first_finish_seconds, JainIndex(f.window));
  const ReceiptLedger::Check& c = r.exactly_once;
  absl::StrAppendFormat(&s,
                        "exactly once: %s (%u of %u (epoch, id) once; %u missing, %u duplicated, "
                        "%u out of range; %u foreign, %u bad payloads)\n",
                        c.ok() ? "yes" : "NO", c.exactly_once, c.expected, c.missing, c.duplicated,
                        c.out_of_range, f.foreign, f.bad_payload);
  absl::StrAppend(&s, "sample errors: ", Counts(r.sample_errors), "\n");
  absl::StrAppend(&s, "trainer streams ended: ", Counts(r.trainer_ends), "\n");
  if (!r.first_trainer_error.empty()) absl::StrAppend(&s, "  first: ", r.first_trainer_error, "\n");
  if (r.attack_ran) {
    const AttackResult& a = r.attack;
    absl::StrAppendFormat(&s, "attack %s (%.1f s): %s\n", a.name, a.seconds, a.Brief());
    if (!a.resets_by_code.empty()) {
      absl::StrAppend(&s, "  streams reset by the server, by HTTP/2 code: ",
                      absl::StrJoin(a.resets_by_code, ", ", absl::PairFormatter(" ")), "\n");
    }
    absl::StrAppendFormat(&s, "  request bytes sent %.1f MB, response bytes received %.1f MB\n",
                          a.request_bytes_sent / 1e6, a.response_bytes_received / 1e6);
    if (!a.first_error.empty()) absl::StrAppend(&s, "  error: ", a.first_error, "\n");
  }
  absl::StrAppend(&s, "idle streams ended: ", Counts(r.idle_ends));
  if (r.idle_first_end_s >= 0) {
    absl::StrAppendFormat(&s, " (server-ended after %.1f..%.1f s)", r.idle_first_end_s,
                          r.idle_last_end_s);
  }
  absl::StrAppend(&s, "\n");
  if (o.hostile > 0) {
    absl::StrAppendFormat(&s, "hostile streams ended: %s; %u ids written\n", Counts(r.hostile_ends),
                          r.hostile_ids_written);
    for (const std::string& m : r.hostile_messages) absl::StrAppend(&s, "  ", m, "\n");
  }
  if (o.server_pid > 0) {
    const ProcSummary& p = r.server;
    absl::StrAppendFormat(
        &s,
        "server RSS MiB: before %.0f, idle streams open %.0f, trainers' end %.0f, "
        "peak %.0f, last %.0f; threads: before %d, idle %d, peak %d\n",
        MiB(r.server_before.rss_bytes), MiB(r.server_idle.rss_bytes), MiB(r.server_end.rss_bytes),
        MiB(p.peak_rss_bytes), MiB(p.last.rss_bytes), r.server_before.threads,
        r.server_idle.threads, p.peak_threads);
    if (f.cpu_ms_per_sample >= 0) {
      absl::StrAppendFormat(&s, "server CPU: %.2f ms per trainer sample\n", f.cpu_ms_per_sample);
    }
    absl::StrAppendFormat(&s, "server CPU: %.1f s over the whole run\n", ServerCpuSeconds(r));
    if (p.exited) {
      absl::StrAppendFormat(&s, "SERVER EXITED %.1f s after the start%s\n", p.exited_after_s,
                            p.killed_by_cap ? " (killed by --kill-server-above-rss-mib)" : "");
    }
  }
  if (r.stats_ok) {
    absl::StrAppendFormat(&s,
                          "server stats: %u streams opened, %u active, %u requests rejected; "
                          "rejections by limit: %s\n",
                          r.stats_streams_opened, r.stats_active_streams, r.stats_requests_rejected,
                          Counts(r.stats_rejections_by_limit));
  } else {
    absl::StrAppend(&s, "server stats: no answer at the end\n");
  }
  return s;
}

std::string LoadJson(const LoadResult& r) {
  const LoadOptions& o = r.options;
  const Figures f = Compute(r);
  JsonWriter w;
  w.BeginObject();
  w.Key("bench").String("load").Key("label").String(o.label).Key("dataset").String(r.dataset);
  w.Key("num_samples").Uint(r.num_samples).Key("prep_workers").Uint(r.server_prep_workers);
  w.Key("trainers").Int(o.trainers).Key("epochs").Int(o.epochs);
  w.Key("stage").String(StageName(o.stage)).Key("crop_size").Int(o.crop_size);
  w.Key("window").Int(o.window).Key("ids_per_request").Int(o.ids_per_request);
  w.Key("idle").Int(o.idle).Key("idle_channels").Int(o.idle_channels);
  w.Key("hostile").Int(o.hostile).Key("hostile_crop").Int(o.hostile_crop);
  w.Key("hostile_stage").String(StageName(o.hostile_stage));
  w.Key("seconds").Fixed(r.seconds, 3).Key("timed_out").Bool(r.timed_out);
  w.Key("samples").Uint(f.samples).Key("samples_per_s").Fixed(f.rate, 2);
  w.Key("mib_per_s").Fixed(r.seconds > 0 ? MiB(f.bytes) / r.seconds : 0.0, 2);
  w.Key("client_cpu_s").Fixed(r.client_cpu_seconds, 2);
  w.Key("trainer_samples_per_s").BeginArray();
  for (double x : f.rates) w.Fixed(x, 2);
  w.EndArray();
  w.Key("trainer_min_samples_per_s").Fixed(f.min_rate, 2);
  w.Key("trainer_max_samples_per_s").Fixed(f.max_rate, 2);
  w.Key("fairness_min_max").Fixed(f.max_rate > 0 ? f.min_rate / f.max_rate : 0.0, 4);
  w.Key("fairness_jain").Fixed(JainIndex(f.rates), 4);
  w.Key("first_finish_s").Fixed(r.first_finish_seconds, 3);
  w.Key("fairness_jain_window").Fixed(JainIndex(f.window), 4);
  const ReceiptLedger::Check& c = r.exactly_once;
  w.Key("exactly_once").Bool(c.ok()).Key("expected").Uint(c.expected);
  w.Key("missing").Uint(c.missing).Key("duplicated").Uint(c.duplicated);
  w.Key("out_of_range").Uint(c.out_of_range).Key("foreign").Uint(f.foreign);
  w.Key("bad_payload").Uint(f.bad_payload).Key("sample_errors").Uint(f.errors);
  JsonCounts(w, "sample_errors_by_code", r.sample_errors);
  JsonCounts(w, "trainer_ends", r.trainer_ends);
  JsonCounts(w, "idle_ends", r.idle_ends);
  w.Key("idle_first_end_s").Fixed(r.idle_first_end_s, 3);
  w.Key("idle_messages").Uint(r.idle_messages);
  JsonCounts(w, "hostile_ends", r.hostile_ends);
  w.Key("hostile_ids_written").Uint(r.hostile_ids_written);
  if (o.server_pid > 0) {
    const ProcSummary& p = r.server;
    w.Key("server_rss_before_mib").Fixed(MiB(r.server_before.rss_bytes), 1);
    w.Key("server_rss_idle_mib").Fixed(MiB(r.server_idle.rss_bytes), 1);
    w.Key("server_rss_end_mib").Fixed(MiB(r.server_end.rss_bytes), 1);
    w.Key("server_rss_peak_mib").Fixed(MiB(p.peak_rss_bytes), 1);
    w.Key("server_rss_last_mib").Fixed(MiB(p.last.rss_bytes), 1);
    w.Key("server_threads_before").Int(r.server_before.threads);
    w.Key("server_threads_idle").Int(r.server_idle.threads);
    w.Key("server_threads_peak").Int(p.peak_threads);
    w.Key("server_cpu_ms_per_sample").Fixed(f.cpu_ms_per_sample, 3);
    w.Key("server_cpu_s").Fixed(ServerCpuSeconds(r), 2);
    w.Key("server_exited").Bool(p.exited).Key("server_exited_after_s").Fixed(p.exited_after_s, 1);
    w.Key("server_killed_by_cap").Bool(p.killed_by_cap);
  }
  if (r.attack_ran) {
    const AttackResult& a = r.attack;
    w.Key("attack").String(a.name).Key("attack_brief").String(a.Brief());
    w.Key("attack_seconds").Fixed(a.seconds, 2);
    w.Key("attack_sources").BeginArray();
    for (const std::string& src : a.sources) w.String(src);
    w.EndArray();
    w.Key("attack_connections").Int(a.connections);
    w.Key("attack_connections_failed").Int(a.connections_failed);
    w.Key("attack_connections_lost").Int(a.connections_lost);
    w.Key("attack_goaways").Int(a.goaways);
    w.Key("attack_streams_started").Uint(a.streams_started);
    w.Key("attack_streams_reset_by_server").Uint(a.streams_reset_by_server);
    w.Key("attack_streams_ended_by_server").Uint(a.streams_ended_by_server);
    w.Key("attack_streams_open_at_end").Uint(a.streams_open_at_end);
    w.Key("attack_request_bytes_sent").Uint(a.request_bytes_sent);
    w.Key("attack_response_bytes_received").Uint(a.response_bytes_received);
    w.Key("attack_resets_by_code").BeginObject();
    for (const auto& [code, n] : a.resets_by_code) w.Key(absl::StrCat(code)).Uint(n);
    w.EndObject();
    w.Key("attack_figures").BeginObject();
    for (const auto& [k, v] : a.figures) w.Key(k).Fixed(v, 1);
    w.EndObject();
    w.Key("attack_error").String(a.first_error);
  }
  w.Key("stats_ok").Bool(r.stats_ok);
  if (r.stats_ok) {
    w.Key("stats_streams_opened").Uint(r.stats_streams_opened);
    w.Key("stats_active_streams").Uint(r.stats_active_streams);
    w.Key("stats_requests_rejected").Uint(r.stats_requests_rejected);
    JsonCounts(w, "stats_rejections_by_limit", r.stats_rejections_by_limit);
  }
  w.EndObject();
  return w.Take();
}

}  // namespace sophon
