#include "server/read_slots.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"

namespace sophon {

ReadSlots::ReadSlots(const Options& options, Clock clock)
    : options_(options), clock_(clock ? std::move(clock) : Clock([] { return absl::Now(); })) {}

ReadSlots::~ReadSlots() = default;

bool ReadSlots::RanksBelow(const Count& a, const Count& b) {
  return std::tie(a.newcomers, a.held) < std::tie(b.newcomers, b.held);
}

void ReadSlots::HoldLocked(const std::string& peer, const std::string& connection,
                           Member* member) {
  holders_[member] = Holder{peer, connection, clock_(), absl::InfinitePast(), false};
  Peer& p = peers_[peer];
  Count& c = p.connections[connection];
  ++p.held;
  ++p.newcomers;
  ++c.held;
  ++c.newcomers;
}

void ReadSlots::UnholdLocked(std::unordered_map<Member*, Holder>::iterator it) {
  const std::string peer = std::move(it->second.peer);
  Peer& p = peers_[peer];
  auto c = p.connections.find(it->second.connection);
  const int newcomer = it->second.has_message ? 0 : 1;
  --p.held;
  p.newcomers -= newcomer;
  if (--c->second.held == 0) {
    p.connections.erase(c);
  } else {
    c->second.newcomers -= newcomer;
  }
  holders_.erase(it);
  ForgetIfEmptyLocked(peer);
}

void ReadSlots::ForgetIfEmptyLocked(const std::string& peer) {
  auto it = peers_.find(peer);
  if (it != peers_.end() && it->second.held == 0 && it->second.waiting.empty()) peers_.erase(it);
}

std::unordered_map<ReadSlots::Member*, ReadSlots::Holder>::iterator ReadSlots::VictimLocked(
    const std::string& peer, const std::string& connection) {
  const Peer& mine = peers_[peer];
  const bool at_cap = mine.held >= options_.max_per_peer;
  const absl::Time now = clock_();
  // A holder that has sent no request since its probation ran out: from this
  // address when it is at its cap, from any when the server is full.
  auto stale = holders_.end();
  for (auto it = holders_.begin(); it != holders_.end(); ++it) {
    const Holder& h = it->second;
    if (h.has_message || now - h.granted < options_.probation) continue;
    if (at_cap && h.peer != peer) continue;
    if (stale == holders_.end() || h.granted < stale->second.granted) stale = it;
  }
  if (stale != holders_.end()) return stale;
  // Max-min fairness: among the addresses when the server is full, among
  // this address's connections when the address is at its cap. One holding
  // at least two slots more than this one gives one up, unless its holders
  // use their slots more than this one's do (it has fewer holders without a
  // request); of those, the highest ranked.
  const std::string* largest = nullptr;
  const Count* largest_count = nullptr;
  const auto consider = [&](const std::string& name, const Count& c, const Count& me) {
    if (c.held < me.held + 2 || c.newcomers < me.newcomers) return;
    if (largest == nullptr || RanksBelow(*largest_count, c)) {
      largest = &name;
      largest_count = &c;
    }
  };
  if (at_cap) {
    static const Count kNone;
    auto me = mine.connections.find(connection);
    for (const auto& [name, c] : mine.connections) {
      if (name != connection) consider(name, c, me == mine.connections.end() ? kNone : me->second);
    }
  } else {
    for (const auto& [name, p] : peers_) {
      if (name != peer) consider(name, p, mine);
    }
  }
  if (largest == nullptr) return holders_.end();
  // Its holder without a request that got its slot first, else the one whose
  // last request is oldest.
  auto victim = holders_.end();
  for (auto it = holders_.begin(); it != holders_.end(); ++it) {
    const Holder& h = it->second;
    if ((at_cap ? h.peer != peer || h.connection != *largest : h.peer != *largest)) continue;
    if (victim == holders_.end()) {
      victim = it;
      continue;
    }
    const Holder& v = victim->second;
    if (std::make_tuple(h.has_message, h.last_message, h.granted) <
        std::make_tuple(v.has_message, v.last_message, v.granted)) {
      victim = it;
    }
  }
  return victim;
}

bool ReadSlots::Acquire(const std::string& peer, const std::string& connection, Member* member) {
  Member* victim = nullptr;
  absl::Status why;
  {
    absl::MutexLock lock(&mu_);
    Peer& p = peers_[peer];
    const bool full = static_cast<int>(holders_.size()) >= options_.slots;
    if (!full && p.held < options_.max_per_peer) {
      HoldLocked(peer, connection, member);
      return true;
    }
    auto it = VictimLocked(peer, connection);
    if (it == holders_.end()) {
      p.waiting.push_back(Waiter{member, next_seq_++, connection});
      waiting_[member] = peer;
      return false;
    }
    const Holder& h = it->second;
    const bool own_address = h.peer == peer;
    const std::string limit =
        own_address ? absl::StrCat("client ", peer, " is at its limit of streams reading at once "
                                   "(ServiceOptions.max_reading_streams_per_peer = ",
                                   options_.max_per_peer, ")")
                    : absl::StrCat("the server's ", options_.slots,
                                   " read slots are all in use (from ServiceOptions."
                                   "transport_memory_bytes and max_request_bytes)");
    why = absl::ResourceExhaustedError(
        !h.has_message
            ? absl::StrCat(limit, " and this stream had sent no complete request ",
                           absl::FormatDuration(absl::Trunc(clock_() - h.granted,
                                                            absl::Milliseconds(1))),
                           " after it got its read slot: a new stream",
                           own_address && h.connection != connection
                               ? " on a connection holding fewer slots" : "",
                           " took it")
            : own_address
                ? absl::StrCat(limit, " and its connection held the most of them (",
                               peers_[h.peer].connections[h.connection].held,
                               "): its least recently active stream made room for a connection "
                               "with fewer")
                : absl::StrCat(limit, " and client ", h.peer, " held the most (",
                               peers_[h.peer].held,
                               "): its least recently active stream made room for a client with "
                               "fewer"));
    victim = it->first;
    victim->Ref();  // keeps it alive until it is told below
    ++taken_;
    UnholdLocked(it);
    HoldLocked(peer, connection, member);
  }
  victim->OnSlotTaken(std::move(why));
  victim->Unref();
  return true;
}

void ReadSlots::MessageCompleted(Member* member) {
  absl::MutexLock lock(&mu_);
  auto it = holders_.find(member);
  if (it == holders_.end()) return;
  Holder& h = it->second;
  if (!h.has_message) {
    h.has_message = true;
    Peer& p = peers_[h.peer];
    --p.newcomers;
    --p.connections[h.connection].newcomers;
  }
  h.last_message = clock_();
}

bool ReadSlots::Release(Member* member) {
  std::vector<Member*> granted;
  bool was_waiting = false;
  {
    absl::MutexLock lock(&mu_);
    if (auto it = holders_.find(member); it != holders_.end()) {
      UnholdLocked(it);
      GrantLocked(&granted);
    } else if (auto w = waiting_.find(member); w != waiting_.end()) {
      const std::string peer = std::move(w->second);
      waiting_.erase(w);
      std::deque<Waiter>& queue = peers_[peer].waiting;
      queue.erase(std::find_if(queue.begin(), queue.end(),
                               [member](const Waiter& x) { return x.member == member; }));
      ForgetIfEmptyLocked(peer);
      was_waiting = true;
    }
  }
  notifier_.Deliver(granted);
  return was_waiting;
}

void ReadSlots::GrantLocked(std::vector<Member*>* granted) {
  while (static_cast<int>(holders_.size()) < options_.slots) {
    // The lowest-ranked address with a waiter and room under its cap;
    // between equals, the one whose oldest waiter came first.
    const std::string* best_name = nullptr;
    Peer* best = nullptr;
    for (auto& [name, p] : peers_) {
      if (p.waiting.empty() || p.held >= options_.max_per_peer) continue;
      if (best == nullptr || RanksBelow(p, *best) ||
          (!RanksBelow(*best, p) && p.waiting.front().seq < best->waiting.front().seq)) {
        best = &p;
        best_name = &name;
      }
    }
    if (best == nullptr) return;
    // Its waiter whose connection ranks lowest; the oldest among equals.
    static const Count kNone;
    auto count = [best](const std::string& connection) -> const Count& {
      auto c = best->connections.find(connection);
      return c == best->connections.end() ? kNone : c->second;
    };
    auto pick = best->waiting.begin();
    for (auto w = best->waiting.begin() + 1; w < best->waiting.end(); ++w) {
      if (RanksBelow(count(w->connection), count(pick->connection))) pick = w;
    }
    Member* const member = pick->member;
    const std::string connection = std::move(pick->connection);
    best->waiting.erase(pick);
    waiting_.erase(member);
    HoldLocked(*best_name, connection, member);
    granted->push_back(member);
  }
}

bool ReadSlots::Contended(Member* member) const {
  absl::MutexLock lock(&mu_);
  auto it = holders_.find(member);
  if (it == holders_.end()) return false;
  const Holder& h = it->second;
  const Peer& mine = peers_.at(h.peer);
  if (!mine.waiting.empty()) return true;
  // Waiters from other addresses are held back by their own caps unless the
  // server is full.
  if (static_cast<int>(holders_.size()) < options_.slots) return false;
  for (const auto& [name, p] : peers_) {
    if (p.waiting.empty() || p.held >= options_.max_per_peer) continue;
    if (!h.has_message) return true;
    if (p.held + 2 <= mine.held && p.newcomers <= mine.newcomers) return true;
  }
  return false;
}

int ReadSlots::held() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(holders_.size());
}

int ReadSlots::waiters() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(waiting_.size());
}

int ReadSlots::peer_held(const std::string& peer) const {
  absl::MutexLock lock(&mu_);
  auto it = peers_.find(peer);
  return it == peers_.end() ? 0 : it->second.held;
}

int ReadSlots::peer_waiting(const std::string& peer) const {
  absl::MutexLock lock(&mu_);
  auto it = peers_.find(peer);
  return it == peers_.end() ? 0 : static_cast<int>(it->second.waiting.size());
}

bool ReadSlots::holds(Member* member) const {
  absl::MutexLock lock(&mu_);
  return holders_.count(member) > 0;
}

uint64_t ReadSlots::taken() const {
  absl::MutexLock lock(&mu_);
  return taken_;
}

}  // namespace sophon
