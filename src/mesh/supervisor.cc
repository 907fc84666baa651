// Supervision: failures as data (MeshFailure, failure_report), each spawn's health, the
// controller's Supervisor and the procs' ProcMonitor (see supervisor.h).
#include "mesh/supervisor.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "core/log.h"
#include "host/agent.h"
#include "host/host.h"
#include "host/log_folder.h"

namespace sceptre {

std::string_view to_string(FailureCause cause) {
  switch (cause) {
    case FailureCause::kExited: return "exited";
    case FailureCause::kKilled: return "killed";
    case FailureCause::kActorFailed: return "actor failed";
    case FailureCause::kHeartbeatLost: return "heartbeat lost";
    case FailureCause::kStuck: return "stuck";
    case FailureCause::kHostLost: return "host lost";
  }
  return "unknown";
}

std::string MeshFailure::summary() const {
  return "rank " + std::to_string(rank) + " " + point.to_string() + " of '" + mesh + "' (pid " + std::to_string(pid) +
         " on " + host + "): " + what;
}

std::string MeshFailure::to_string() const {
  std::string s = summary();
  if (!last_lines.empty()) {
    s += "\n  the last lines of its stderr:";
    for (const auto& l : last_lines) s += "\n    " + l;
  }
  return s;
}


std::string failure_report(const std::vector<MeshFailure>& failures) {
  if (failures.empty()) return "no failures\n";
  std::vector<const MeshFailure*> order;
  for (const auto& f : failures) order.push_back(&f);
  std::stable_sort(order.begin(), order.end(), [](const MeshFailure* a, const MeshFailure* b) { return a->when < b->when; });
  const MeshFailure& root = *order.front();
  std::string out = "sceptre: " + std::to_string(failures.size()) + " failure" + (failures.size() == 1 ? "" : "s") +
                    " that no supervisor handled\n";
  out += "root cause (detected first): " + root.to_string() + "\n";
  if (order.size() == 1) return out;
  // The rest, folded: one line per (mesh, cause, what), in the order of their first detection.
  struct Fold {
    const MeshFailure* first;
    std::vector<std::uint64_t> ranks;
  };
  std::vector<Fold> folds;
  for (std::size_t i = 1; i < order.size(); ++i) {
    const MeshFailure& f = *order[i];
    auto it = std::find_if(folds.begin(), folds.end(), [&](const Fold& g) {
      return g.first->mesh == f.mesh && g.first->cause == f.cause && g.first->what == f.what;
    });
    if (it == folds.end()) {
      folds.push_back(Fold{&f, {f.rank}});
    } else {
      it->ranks.push_back(f.rank);
    }
  }
  out += "then:\n";
  for (auto& g : folds) {
    const auto after = std::chrono::duration_cast<std::chrono::milliseconds>(g.first->when - root.when).count();
    if (g.ranks.size() == 1) {
      out += "  +" + std::to_string(after) + " ms " + g.first->summary() + "\n";
    } else {
      out += "  +" + std::to_string(after) + " ms ranks " + host::compress_ranks(g.ranks) + " of '" + g.first->mesh + "' (" +
             std::to_string(g.ranks.size()) + "): " + g.first->what + "\n";
    }
  }
  return out;
}

namespace detail {

// --- MeshHealth ----------------------------------------------------------------------------------

MeshHealth::MeshHealth(std::uint64_t id_, std::string name_, Extent extent_, std::vector<pid_t> pid_list,
                       std::vector<ProcId> proc_list, std::vector<std::weak_ptr<host::Host>> hosts_,
                       std::vector<std::weak_ptr<host::RemoteHost>> serves_)
    : id(id_),
      name(std::move(name_)),
      extent(std::move(extent_)),
      hosts(std::move(hosts_)),
      serves(std::move(serves_)),
      size_(pid_list.size()),
      pids_(std::move(pid_list)),
      procs_(std::move(proc_list)),
      failures_(size_),
      gone_(size_, 0),
      last_heard_(new std::atomic<std::int64_t>[size_]),
      last_arrived_(new std::atomic<std::int64_t>[size_]) {
  for (std::size_t r = 0; r < size_; ++r) heard_from(r);
}

pid_t MeshHealth::pid(std::size_t rank) const {
  std::lock_guard lock(mu_);
  return pids_.at(rank);
}

ProcId MeshHealth::proc(std::size_t rank) const {
  std::lock_guard lock(mu_);
  return procs_.at(rank);
}

void MeshHealth::rejoin(std::size_t rank, pid_t pid, ProcId proc) {
  std::lock_guard lock(mu_);
  pids_.at(rank) = pid;
  procs_.at(rank) = std::move(proc);
  failures_.at(rank).reset();
  gone_.at(rank) = 0;
  any_failed_.store(std::any_of(failures_.begin(), failures_.end(), [](const auto& f) { return f.has_value(); }),
                    std::memory_order_release);
  last_heard_[rank].store(SteadyClock::now().time_since_epoch().count(), std::memory_order_relaxed);
  last_arrived_[rank].store(SteadyClock::now().time_since_epoch().count(), std::memory_order_relaxed);
}

std::optional<MeshFailure> MeshHealth::failure(std::size_t rank) const {
  std::lock_guard lock(mu_);
  return rank < failures_.size() ? failures_[rank] : std::nullopt;
}

std::vector<std::size_t> MeshHealth::failed_ranks() const {
  std::lock_guard lock(mu_);
  std::vector<std::size_t> ranks;
  for (std::size_t r = 0; r < failures_.size(); ++r) {
    if (failures_[r]) ranks.push_back(r);
  }
  return ranks;
}

Failure MeshHealth::as_failure(const MeshFailure& f) {
  return Failure::supervision(Error(Code::kUnavailable, f.summary()));
}

std::optional<Failure> MeshHealth::watch(std::vector<std::uint32_t> procs, std::function<bool()> done,
                                         std::function<void(const Failure&)> fail) {
  std::sort(procs.begin(), procs.end());
  std::lock_guard lock(mu_);
  for (std::uint32_t p : procs) {
    if (p < failures_.size() && failures_[p]) return as_failure(*failures_[p]);
  }
  if (watches_.size() >= purge_at_) {  // forget the casts that are done; amortised O(1)
    std::erase_if(watches_, [](const Watch& w) { return w.done(); });
    purge_at_ = std::max<std::size_t>(64, 2 * watches_.size());
  }
  watches_.push_back(Watch{std::move(procs), std::move(done), std::move(fail)});
  return std::nullopt;
}

bool MeshHealth::mark_gone(std::size_t rank, pid_t pid) {
  std::lock_guard lock(mu_);
  if (stopping.load() || rank >= size_ || pids_[rank] != pid || gone_[rank]) return false;
  gone_[rank] = 1;
  return true;
}

bool MeshHealth::gone(std::size_t rank) const {
  std::lock_guard lock(mu_);
  return rank < size_ && gone_[rank];
}

bool MeshHealth::mark_failed(const MeshFailure& f) {
  std::vector<Watch> hit;
  {
    std::lock_guard lock(mu_);
    if (stopping.load() || f.rank >= failures_.size() || failures_[f.rank]) return false;
    if (pids_[f.rank] != static_cast<pid_t>(f.pid)) return false;  // of a proc this rank no longer runs
    failures_[f.rank] = f;
    any_failed_.store(true, std::memory_order_release);
    const auto rank = static_cast<std::uint32_t>(f.rank);
    for (auto it = watches_.begin(); it != watches_.end();) {
      if (std::binary_search(it->procs.begin(), it->procs.end(), rank)) {
        hit.push_back(std::move(*it));
        it = watches_.erase(it);
      } else {
        ++it;
      }
    }
  }
  const Failure failure = as_failure(f);
  for (auto& w : hit) {
    if (!w.done()) w.fail(failure);
  }
  return true;
}

void MeshHealth::set_handler(FailureHandler handler) {
  std::lock_guard lock(mu_);
  handler_ = std::move(handler);
}

FailureHandler MeshHealth::handler() const {
  std::lock_guard lock(mu_);
  return handler_;
}

void MeshHealth::heard_from(std::size_t rank) { heard_from(rank, SteadyClock::now()); }

void MeshHealth::heard_from(std::size_t rank, SteadyClock::time_point at) {
  if (rank >= size_) return;
  last_arrived_[rank].store(SteadyClock::now().time_since_epoch().count(), std::memory_order_relaxed);
  const std::int64_t t = at.time_since_epoch().count();
  std::int64_t seen = last_heard_[rank].load(std::memory_order_relaxed);
  while (seen < t && !last_heard_[rank].compare_exchange_weak(seen, t, std::memory_order_relaxed)) {
  }
}

SteadyClock::time_point MeshHealth::last_heard(std::size_t rank) const {
  return SteadyClock::time_point(SteadyClock::duration(last_heard_[rank].load(std::memory_order_relaxed)));
}

SteadyClock::time_point MeshHealth::last_arrived(std::size_t rank) const {
  return SteadyClock::time_point(SteadyClock::duration(last_arrived_[rank].load(std::memory_order_relaxed)));
}

// --- Supervisor ----------------------------------------------------------------------------------

namespace {

std::string health_listen(const Config& config) {
  static std::atomic<int> counter{0};
  if (config.transport != "unix") return "tcp:127.0.0.1:0";
  return "unix:@sceptre-health-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
}

channel::ChannelOptions health_channel_options() {
  channel::ChannelOptions o;
  // A frozen peer must not make the channel give up for good: heartbeats are worth nothing late,
  // but the channel must work again once the peer does.
  o.delivery_timeout = std::chrono::hours(24);
  o.max_queued_messages = 4096;
  return o;
}

std::string this_host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

}  // namespace

Supervisor::Supervisor(const Config& config, Proc& proc, std::string listen) : config_(config), proc_(proc) {
  auto addr = channel::ChannelAddr::parse(listen.empty() ? health_listen(config) : listen);
  if (!addr) throw Exception(std::move(addr).error());
  auto rx = channel::serve(ctx_, *addr, health_channel_options(), [this](wire::Message m) { on_report(std::move(m)); });
  if (!rx) throw Exception(Error(rx.error()).with_context("serving the health channel"));
  rx_ = std::move(*rx);
  checker_ = std::thread([this] {
    std::unique_lock lock(mu_);
    const auto tick = std::clamp(config_.heartbeat_timeout / 16, std::chrono::milliseconds(5), std::chrono::milliseconds(50));
    while (!closing_) {
      wake_.wait_for(lock, tick);
      if (closing_) break;
      lock.unlock();
      check_heartbeats();
      lock.lock();
    }
  });
  deliverer_ = std::thread([this] { deliver(); });
}

Supervisor::~Supervisor() {
  {
    std::lock_guard lock(mu_);
    closing_ = true;
  }
  wake_.notify_all();
  checker_.join();
  deliverer_.join();
  if (rx_) rx_->close();
}

std::string Supervisor::address() const { return rx_->address().to_string(); }

void Supervisor::set_handler(FailureHandler handler) {
  std::lock_guard lock(mu_);
  handler_ = std::move(handler);
}

void Supervisor::add(const std::shared_ptr<MeshHealth>& health) {
  {
    std::lock_guard lock(mu_);
    std::erase_if(meshes_, [](const auto& kv) { return kv.second.expired(); });
    std::erase_if(by_pid_, [](const auto& kv) { return kv.second.first.expired(); });
    meshes_[health->id] = health;
    for (std::size_t r = 0; r < health->size(); ++r) {
      if (auto h = health->host(r)) by_pid_[{h->id(), health->pid(r)}] = {health, r};
    }
  }
  for (std::size_t r = 0; r < health->size(); ++r) health->heard_from(r);
  for (std::size_t r = 0; r < health->size(); ++r) {  // ended between its boot report and now
    const pid_t pid = health->pid(r);
    auto host = health->host(r);
    if (auto st = host ? host->status(pid) : std::nullopt) on_exit(*host, pid, *st);
  }
}

void Supervisor::rejoin(const std::shared_ptr<MeshHealth>& health, std::size_t rank, pid_t pid, ProcId proc) {
  auto host = health->host(rank);
  if (!host) return;
  {
    std::lock_guard lock(mu_);
    by_pid_.erase({host->id(), health->pid(rank)});
    by_pid_[{host->id(), pid}] = {health, rank};
  }
  health->rejoin(rank, pid, std::move(proc));
  if (auto st = host->status(pid)) on_exit(*host, pid, *st);  // ended already
}

MeshFailure Supervisor::describe(const MeshHealth& health, std::size_t rank, pid_t pid, FailureCause cause,
                                 std::string what) const {
  MeshFailure f;
  f.mesh = health.name;
  f.rank = rank;
  f.point = health.extent.point(rank);
  f.cause = cause;
  f.what = std::move(what);
  auto host = health.host(rank);
  f.host = host ? host->name() : this_host_name();
  f.pid = pid;
  if (host) f.last_lines = host->stderr_tail(f.pid);
  f.when = SteadyClock::now();
  return f;
}

void Supervisor::on_exit(const host::Host& host, pid_t pid, const host::ExitStatus& status) {
  std::shared_ptr<MeshHealth> health;
  std::size_t rank = 0;
  {
    std::lock_guard lock(mu_);
    auto it = by_pid_.find({host.id(), pid});
    if (it == by_pid_.end()) return;
    health = it->second.first.lock();
    rank = it->second.second;
  }
  if (!health || health->stopping.load()) return;
  MeshFailure f = describe(*health, rank, pid, status.signal ? FailureCause::kKilled : FailureCause::kExited,
                           status.signal ? status.to_string() : "exited with " + status.to_string());
  f.exit_code = status.code;
  f.signal = status.signal;
  fail(health, std::move(f));
}

void Supervisor::on_report(wire::Message&& msg) {
  auto report = wire::decode<HealthReport>(msg);
  if (!report) {
    log().warn("health channel: a report that does not decode: {}", report.error().to_string());
    return;
  }
  std::shared_ptr<MeshHealth> health;
  {
    std::lock_guard lock(mu_);
    auto it = meshes_.find(report->mesh);
    if (it != meshes_.end()) health = it->second.lock();
  }
  if (!health || report->rank >= health->size()) return;  // a mesh gone, or not yet added
  const auto rank = static_cast<std::size_t>(report->rank);
  const auto pid = static_cast<pid_t>(report->pid);
  if (pid != health->pid(rank)) return;  // from a proc the rank no longer runs
  if (report->kind == HealthReport::kHeartbeat) {
    // The proc knows when this side last acknowledged it: beyond a heartbeat interval's lag, the
    // link is known to work both ways only as of then (a link cut one way still brings heartbeats).
    const auto lag = std::chrono::milliseconds(report->unacked_ms) - config_.heartbeat_interval / 2;
    health->heard_from(rank, SteadyClock::now() - std::max(lag, std::chrono::milliseconds(0)));
    return;
  }
  if (health->stopping.load()) return;
  MeshFailure f;
  if (report->kind == HealthReport::kActorFailed) {
    f = describe(*health, rank, pid, FailureCause::kActorFailed,
                 "actor " + report->actor + " failed" +
                     (report->endpoint.empty() ? "" : " in endpoint '" + report->endpoint + "'") + ": " +
                     (report->exception_type.empty() ? "" : report->exception_type + ": ") + report->message);
    f.exception_type = report->exception_type;
  } else if (report->kind == HealthReport::kStuck) {
    f = describe(*health, rank, pid, FailureCause::kStuck,
                 "actor " + report->actor + " has been stuck in endpoint '" + report->endpoint + "' for " +
                     std::to_string(report->running_ms) + " ms (Config::watchdog_timeout " +
                     std::to_string(report->limit_ms) + " ms)");
  } else {
    log().warn("health channel: a report of unknown kind {} from rank {}", report->kind, report->rank);
    return;
  }
  f.actor = report->actor;
  f.endpoint = report->endpoint;
  fail(health, std::move(f));
}

void Supervisor::check_heartbeats() {
  std::vector<std::shared_ptr<MeshHealth>> meshes;
  {
    std::lock_guard lock(mu_);
    for (auto& [id, w] : meshes_) {
      if (auto h = w.lock()) meshes.push_back(std::move(h));
    }
  }
  const auto now = SteadyClock::now();
  for (auto& h : meshes) {
    if (h->stopping.load()) continue;
    for (std::size_t r = 0; r < h->size(); ++r) {
      const auto silent = now - h->last_heard(r);
      if (silent <= config_.heartbeat_timeout || h->gone(r)) continue;
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(silent).count();
      const std::string limit = " ms (Config::heartbeat_timeout " + std::to_string(config_.heartbeat_timeout.count()) + " ms)";
      const bool one_way = now - h->last_arrived(r) < config_.heartbeat_timeout / 2;
      fail(h, describe(*h, r, h->pid(r), FailureCause::kHeartbeatLost,
                       one_way ? "its heartbeats arrive, but nothing from here has reached it for " + std::to_string(ms) +
                                     limit + ": the link is cut one way; killed"
                               : "no heartbeat for " + std::to_string(ms) + limit + ": frozen or cut off; killed"));
    }
  }
}

void Supervisor::fail(const std::shared_ptr<MeshHealth>& health, MeshFailure failure) {
  if (health->stopping.load()) return;
  const bool lost = failure.cause == FailureCause::kHeartbeatLost;
  const bool gone_cause = failure.cause == FailureCause::kExited || failure.cause == FailureCause::kKilled || lost;
  const pid_t pid = static_cast<pid_t>(failure.pid);
  const bool first = health->mark_failed(failure);  // once per rank
  // A proc can be gone after its rank failed (a stuck handler, then a freeze): the kill and the
  // peer's loss still happen, once per proc, but the failure is not delivered again.
  const bool newly_gone = gone_cause && health->mark_gone(failure.rank, pid);
  if (newly_gone) {
    // A proc declared lost must never come back as a member: it is killed (SIGKILL reaches a
    // stopped process too), and its exit is then not a second failure.
    if (lost) {
      if (auto host = health->host(failure.rank)) host->kill(pid, SIGKILL);
    }
    // Direct calls to its actors (ActorRef) fail now too, and later ones at once. A proc with a
    // failed or stuck actor is still there, and so are its other actors: not this.
    proc_.peer_lost(health->proc(failure.rank), Error(Code::kUnavailable, failure.summary()));
  }
  std::shared_ptr<host::RemoteHost> served;
  if (newly_gone && failure.rank < health->serves.size()) served = health->serves[failure.rank].lock();
  if (first) {
    log().debug("supervision: {}", failure.summary());
    {
      std::lock_guard lock(mu_);
      queue_.emplace_back(health, failure);
    }
    wake_.notify_all();
  }
  if (served) host_lost(served, failure);
}

void Supervisor::host_lost(const std::shared_ptr<host::RemoteHost>& lost, const MeshFailure& why) {
  lost->lost(Error(Code::kUnavailable, why.summary()));
  std::vector<std::pair<std::shared_ptr<MeshHealth>, std::size_t>> there;
  {
    std::lock_guard lock(mu_);
    for (auto& [key, v] : by_pid_) {
      if (key.first != lost->id()) continue;
      if (auto h = v.first.lock()) there.emplace_back(std::move(h), v.second);
    }
  }
  const std::string what = lost->name() + " is lost: its agent (rank " + std::to_string(why.rank) + " of '" +
                           why.mesh + "') " + (why.cause == FailureCause::kExited ? "" : std::string(to_string(why.cause)) + ": ") +
                           why.what;
  for (auto& [h, r] : there) {
    MeshFailure f = describe(*h, r, h->pid(r), FailureCause::kHostLost, what);
    f.last_lines.clear();  // its host cannot say
    fail(h, std::move(f));
  }
}

void Supervisor::deliver() {
  std::unique_lock lock(mu_);
  for (;;) {
    wake_.wait(lock, [&] { return closing_ || !queue_.empty(); });
    if (closing_) return;
    auto [health, failure] = std::move(queue_.front());
    queue_.pop_front();
    if (health->stopping.load()) continue;  // stopped since: its failures are moot
    FailureHandler top = handler_;
    lock.unlock();
    Supervise outcome = Supervise::kPassUp;
    for (const FailureHandler& h : {health->handler(), top}) {
      if (!h || outcome == Supervise::kHandled) continue;
      try {
        outcome = h(failure);
      } catch (const std::exception& e) {
        log().error("supervision: a failure handler threw {} ({}); the failure counts as not handled",
                    exception_type_name(e), e.what());
        outcome = Supervise::kPassUp;
        break;
      }
    }
    if (outcome != Supervise::kHandled) {
      std::vector<MeshFailure> all{std::move(failure)};
      lock.lock();
      // Failures that come together (a host lost, a collective broken) are reported together:
      // a short wait gathers the consequences of the first.
      wake_.wait_for(lock, std::chrono::milliseconds(200), [&] { return closing_; });
      for (auto& [h, f] : queue_) {
        if (!h->stopping.load()) all.push_back(std::move(f));
      }
      queue_.clear();
      lock.unlock();
      unhandled(std::move(all));
    }
    lock.lock();
  }
}

void Supervisor::unhandled(std::vector<MeshFailure> failures) {
  std::string report = failure_report(failures);
  std::fflush(stdout);
  std::fputs(report.c_str(), stderr);
  std::fflush(stderr);
  // Not exit(): main is still running on its own thread. The kernel closes every lifeline as the
  // process goes, and the procs stop themselves.
  std::_Exit(1);
}

// --- ProcMonitor ---------------------------------------------------------------------------------

ProcMonitor::ProcMonitor(Proc& proc, const Config& config, const std::string& health_addr, std::uint64_t mesh,
                         std::uint64_t rank, std::function<void()> orphaned)
    : proc_(proc), config_(config), mesh_(mesh), rank_(rank), orphaned_(std::move(orphaned)) {
  auto addr = channel::ChannelAddr::parse(health_addr);
  if (!addr) throw Exception(std::move(addr).error().with_context("SCEPTRE_HEALTH"));
  auto tx = channel::dial(ctx_, *addr, health_channel_options());
  if (!tx) throw Exception(Error(tx.error()).with_context("dialling the health channel"));
  tx_ = std::move(*tx);
  acked_.store(SteadyClock::now().time_since_epoch().count());
  thread_ = std::thread([this] { run(); });
  orphan_thread_ = std::thread([this] { watch_controller(); });
}

ProcMonitor::~ProcMonitor() {
  {
    std::lock_guard lock(mu_);
    closing_ = true;
  }
  wake_.notify_all();
  thread_.join();
  tx_->close();  // ends a flush() the orphan watch is in
  orphan_thread_.join();
}

// The controller is there while it acknowledges the heartbeats: a flush of what was sent so far
// that does not complete within orphan_timeout means it is frozen or cut off. Each flush that
// completes says when the controller last heard everything (acked_, in every heartbeat).
void ProcMonitor::watch_controller() {
  const bool orphan_rule = config_.orphan_timeout.count() > 0;
  std::unique_lock lock(mu_);
  while (!closing_) {
    lock.unlock();
    const auto started = SteadyClock::now();
    Status s = tx_->flush(orphan_rule ? config_.orphan_timeout : std::chrono::milliseconds(std::chrono::hours(1)));
    if (s.ok()) acked_.store(started.time_since_epoch().count());
    lock.lock();
    if (closing_) return;
    if (!s.ok() && !orphan_rule) continue;
    if (!s.ok()) {
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(SteadyClock::now() - started).count();
      log().error("the controller acknowledged nothing for {} ms (Config::orphan_timeout {} ms): this proc stops itself ({})",
                  ms, config_.orphan_timeout.count(), s.error().to_string());
      lock.unlock();
      if (orphaned_) orphaned_();
      return;
    }
    // Often: what a heartbeat says of the acknowledgements is this fresh (see Supervisor::on_report).
    wake_.wait_for(lock, config_.heartbeat_interval / 4, [&] { return closing_; });
  }
}

void ProcMonitor::send(HealthReport report) {
  report.mesh = mesh_;
  report.rank = rank_;
  report.pid = ::getpid();
  if (report.kind == HealthReport::kHeartbeat) {
    const auto acked = SteadyClock::time_point(SteadyClock::duration(acked_.load()));
    report.unacked_ms = std::chrono::duration_cast<std::chrono::milliseconds>(SteadyClock::now() - acked).count();
  }
  Status s = tx_->send(wire::encode(report));
  if (!s.ok() && report.kind != HealthReport::kHeartbeat) {
    log().error("proc monitor: could not report to the controller: {}", s.error().to_string());
  }
}

void ProcMonitor::actor_failed(const SupervisionEvent& event) {
  log().error("actor {} failed: {}", event.actor.to_string(), event.to_string());
  HealthReport r;
  r.kind = HealthReport::kActorFailed;
  r.actor = event.actor.to_string();
  r.endpoint = event.endpoint;
  r.exception_type = event.exception_type;
  r.message = event.message;
  send(std::move(r));
}

void ProcMonitor::run() {
  // Each stuck handler is reported once: by actor and the time its handler started.
  std::set<std::pair<std::string, SteadyClock::time_point::rep>> reported;
  std::unique_lock lock(mu_);
  while (!closing_) {
    lock.unlock();
    send(HealthReport{});
    if (config_.watchdog_timeout.count() > 0) {
      std::set<std::pair<std::string, SteadyClock::time_point::rep>> still;
      const auto now = SteadyClock::now();
      for (const BusyHandler& b : proc_.busy_handlers(config_.watchdog_timeout)) {
        auto key = std::pair{b.actor.to_string(), b.since.time_since_epoch().count()};
        still.insert(key);
        if (reported.count(key)) continue;
        HealthReport r;
        r.kind = HealthReport::kStuck;
        r.actor = key.first;
        r.endpoint = b.endpoint;
        r.running_ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - b.since).count();
        r.limit_ms = config_.watchdog_timeout.count();
        log().error("actor {} has been stuck in '{}' for {} ms", r.actor, r.endpoint, r.running_ms);
        send(std::move(r));
      }
      reported = std::move(still);
    }
    lock.lock();
    wake_.wait_for(lock, config_.heartbeat_interval, [&] { return closing_; });
  }
}

}  // namespace detail
}  // namespace sceptre
