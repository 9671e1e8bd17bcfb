// SPDX-License-Identifier: Apache-2.0
// The pipeline executor (pipeline.h): stage and link threads over bounded queues, generations
// separated by failures and re-plans.
#include "tandem/sched/pipeline.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "tandem/core/log.h"
#include "tandem/sched/queue.h"
#include "tandem/sched/worker.h"

namespace tandem::sched {
namespace {

using Clock = std::chrono::steady_clock;

uint64_t packet_bytes(const Packet& p) {
  uint64_t b = 0;
  for (const auto& t : p.tensors) b += t.defined() ? static_cast<uint64_t>(t.nbytes()) : 0;
  return b;
}

bool is_local(const std::string& endpoint) { return endpoint.empty() || endpoint == "local"; }
bool is_inproc(const std::string& endpoint) { return endpoint.rfind("inproc://", 0) == 0; }

// A fresh epoch per generation: a worker refuses forwards from a generation that ended.
uint64_t next_epoch() {
  static std::atomic<uint64_t> counter{std::random_device{}()};
  return (counter.fetch_add(1) << 1) | 1;
}

// Why a generation stopped.
struct Failure {
  bool worker_lost = false;  // re-plan and retry
  std::string device;        // the lost device
  std::exception_ptr fatal;  // anything else: rethrown
  std::string what;
};

}  // namespace

double Timeline::busy_s() const {
  double s = 0;
  for (const auto& i : intervals) s += i.compute_s;
  return s;
}

std::vector<std::string> default_replan(const std::vector<std::string>& stage_devices,
                                        const std::vector<std::string>& failed,
                                        const std::vector<std::string>& alive) {
  if (alive.empty()) throw Infeasible("re-plan: no device is left alive");
  std::map<std::string, int> load;
  for (const auto& d : alive) load[d] = 0;
  for (const auto& d : stage_devices)
    if (load.count(d)) ++load[d];
  std::vector<std::string> out = stage_devices;
  for (auto& d : out) {
    if (std::find(failed.begin(), failed.end(), d) == failed.end() && load.count(d)) continue;
    auto best = std::min_element(load.begin(), load.end(),
                                 [](const auto& a, const auto& b) { return a.second < b.second; });
    d = best->first;
    ++best->second;
  }
  return out;
}

struct Pipeline::Impl {
  PipelinePlan plan;
  ClusterSpec cluster;
  std::map<std::string, std::string> workers;
  PipelineOptions opt;
  // The device of every (stage, member) slot, stage-major: a one-device stage has one slot, a
  // group stage one per member; stage i's slots start at slot_begin[i] (its first is the master).
  std::vector<std::string> devices;
  std::vector<size_t> slot_begin;
  std::set<std::string> failed;

  struct LocalWorker {
    std::unique_ptr<Worker> worker;
    std::thread thread;
  };
  std::map<std::string, LocalWorker> local_workers;
  std::map<std::string, std::unique_ptr<EmulatedLink>> links;  // "a->b"
  std::map<std::string, Timeline> timelines;
  std::mutex timeline_mutex;

  ~Impl() {
    for (auto& [d, lw] : local_workers) lw.worker->stop();
    for (auto& [d, lw] : local_workers)
      if (lw.thread.joinable()) lw.thread.join();
  }

  std::string endpoint_of(const std::string& device) {
    auto it = workers.find(device);
    if (it != workers.end() && !is_local(it->second)) return it->second;
    if (opt.direct_local) return "";
    auto& lw = local_workers[device];
    if (!lw.worker) {
      WorkerOptions wo;
      static std::atomic<uint64_t> counter{0};
      wo.listen = "inproc://tandem.local." + std::to_string(counter++) + "." + device;
      lw.worker = std::make_unique<Worker>(wo);
      lw.thread = std::thread([w = lw.worker.get()] {
        try {
          w->run();
        } catch (const std::exception& e) {
          log().error("pipeline: local worker stopped: {}", e.what());
        }
      });
    }
    return lw.worker->endpoint();
  }

  EmulatedDevice emulation_of(const std::string& device, bool in_process) const {
    EmulatedDevice e;
    if (opt.emulate_devices && cluster.has_device(device))
      e = EmulatedDevice::from_profile(cluster.device(device));
    // cpu_num_threads() is process-wide: in-process stages share the process's setting.
    if (in_process) e.threads = 0;
    return e;
  }

  // Takes `p` as the plan to run: checks what the runtime needs of it and lays out its slots.
  void adopt(PipelinePlan p) {
    if (p.stages.empty()) throw InvalidArgument("pipeline: the plan has no stages");
    std::vector<std::string> slots;
    std::vector<size_t> begin;
    for (size_t i = 0; i < p.stages.size(); ++i) {
      const PlanStage& s = p.stages[i];
      if (s.devices.empty() || s.devices.size() > 4096)
        throw InvalidArgument(cat("pipeline: stage ", i, " has ", s.devices.size(), " devices"));
      if (s.is_group() && !group_ops_registry().contains(s.kind()))
        throw InvalidArgument(cat("pipeline: stage ", i, " runs '", s.kind(), "' on a group of ",
                                  s.devices.size(), " devices, but that kind registers no split/",
                                  "stitch (group_ops_registry)"));
      begin.push_back(slots.size());
      for (const auto& d : s.devices) slots.push_back(d.device);
    }
    plan = std::move(p);
    devices = std::move(slots);
    slot_begin = std::move(begin);
  }

  std::vector<std::string> alive_devices() const {
    std::set<std::string> all;
    for (const auto& d : plan.devices()) all.insert(d);
    for (const auto& [d, e] : workers) all.insert(d);
    for (const auto& d : devices) all.insert(d);
    std::vector<std::string> out;
    for (const auto& d : all)
      if (!failed.count(d)) out.push_back(d);
    return out;
  }

  void record(const std::string& name, const Interval& iv) {
    std::lock_guard lock(timeline_mutex);
    timelines[name].intervals.push_back(iv);
  }
};

Pipeline::Pipeline(PipelinePlan plan, ClusterSpec cluster,
                   std::map<std::string, std::string> workers, PipelineOptions options)
    : impl_(std::make_unique<Impl>()) {
  impl_->cluster = std::move(cluster);
  impl_->workers = std::move(workers);
  impl_->opt = std::move(options);
  impl_->adopt(std::move(plan));
  for (const auto& [d, e] : impl_->workers)
    if (!is_local(e) && e.rfind("tcp://", 0) != 0 && e.rfind("inproc://", 0) != 0 &&
        e.rfind("ipc://", 0) != 0)
      throw InvalidArgument("pipeline: worker address '" + e + "' for device '" + d +
                            "' is neither \"local\" nor a tcp://, ipc:// or inproc:// endpoint");
}

Pipeline::~Pipeline() = default;

RunReport Pipeline::run(
    std::vector<Request> requests,
    const std::function<void(uint64_t, const std::vector<Packet>&)>& on_result) {
  Impl& im = *impl_;
  const auto t0 = Clock::now();
  auto now_s = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  const double poll_s = 0.05;

  std::map<uint64_t, Request> pending;
  for (auto& r : requests) {
    if (r.micros.empty())
      throw InvalidArgument("pipeline: request " + std::to_string(r.id) + " has no micro-batches");
    for (size_t m = 0; m < r.micros.size(); ++m) {
      r.micros[m].request_id = r.id;
      r.micros[m].micro = static_cast<int32_t>(m);
      r.micros[m].n_micro = static_cast<int32_t>(r.micros.size());
    }
    if (!pending.emplace(r.id, std::move(r)).second)
      throw InvalidArgument("pipeline: request id " + std::to_string(r.id) + " is repeated");
  }
  RunReport report;
  {
    std::lock_guard lock(im.timeline_mutex);
    im.timelines.clear();
  }
  std::vector<std::string> order;  // timeline names in pipeline order (last generation)
  bool first_generation = true;

  while (!pending.empty()) {
    if (now_s() > im.opt.run_timeout_s)
      throw TransportError("pipeline: the run exceeded its timeout of " +
                           std::to_string(im.opt.run_timeout_s) + " s");
    if (!first_generation) report.requests_rerun += pending.size();
    first_generation = false;

    // Build this generation's nodes: stage, [link], stage, ... A stage node has one member per
    // device of its stage (one for a one-device stage).
    const size_t n_stages = im.plan.stages.size();
    struct Member {
      std::string device;
      uint32_t stage_id = 0;  // on its worker: stage index + 65536 x member index
      nlohmann::json config;
      std::string endpoint;
      EmulatedDevice emu;
      std::unique_ptr<Stage> local;  // direct_local
      std::unique_ptr<WorkerClient> client;
      EmulatedLink* to_member = nullptr;    // group members: the link from the master and back
      EmulatedLink* from_member = nullptr;  // (one medium per group, or the cluster's)
      std::mutex* busy = nullptr;           // held while the device computes: one task at a time
      StageRoute route;                     // worker to worker: where its input/output go
    };
    struct Node {
      bool is_link = false;
      std::string name, device;
      std::vector<Member> members;
      nlohmann::json config;  // the stage's (members add their share)
      std::vector<nlohmann::json> shares;
      GroupOps ops;
      std::unique_ptr<std::mutex> own_medium;
      std::mutex* medium = nullptr;  // held while a transfer of this node is on the air
      EmulatedLink* link = nullptr;
    };
    // options.shared_medium: every transfer of the run on one medium (one WiFi cell).
    std::mutex cluster_medium;
    // A device computes one task at a time, whichever stages it serves (a re-plan may put two
    // stages on one device; an edge plan's fused blocks use every device in turn).
    std::map<std::string, std::mutex> device_busy;
    auto link_between = [&](const std::string& a, const std::string& b) -> EmulatedLink* {
      if (!im.opt.emulate_links || a == b || !im.cluster.has_link(a, b)) return nullptr;
      auto& l = im.links["link " + a + "->" + b];
      if (!l) {
        LinkFaults f = im.opt.faults;
        f.seed += im.links.size();
        l = std::make_unique<EmulatedLink>(im.cluster.link(a, b), f);
      }
      return l.get();
    };
    std::vector<Node> nodes;
    order.clear();
    for (size_t i = 0; i < n_stages; ++i) {
      const PlanStage& ps = im.plan.stages[i];
      const std::string& dev = im.devices[im.slot_begin[i]];
      if (i > 0) {
        const std::string& prev = im.devices[im.slot_begin[i - 1]];
        if (EmulatedLink* l = link_between(prev, dev)) {
          Node ln;
          ln.is_link = true;
          ln.name = "link " + prev + "->" + dev;
          ln.device = dev;
          ln.link = l;
          if (im.opt.shared_medium) ln.medium = &cluster_medium;
          nodes.push_back(std::move(ln));
        }
      }
      Node sn;
      sn.name = "stage " + std::to_string(i);
      sn.device = dev;
      sn.config = ps.stage;
      if (ps.is_group()) {
        sn.ops = group_ops_registry().get(ps.kind());
        sn.own_medium = std::make_unique<std::mutex>();
        sn.medium = im.opt.shared_medium ? &cluster_medium : sn.own_medium.get();
      }
      for (size_t k = 0; k < ps.devices.size(); ++k) {
        Member m;
        m.device = im.devices[im.slot_begin[i] + k];
        m.stage_id = static_cast<uint32_t>(i + 65536 * k);
        m.config = ps.stage;
        if (ps.is_group()) m.config["share"] = ps.devices[k].share;
        sn.shares.push_back(ps.devices[k].share);
        m.endpoint = im.endpoint_of(m.device);
        m.busy = &device_busy[m.device];
        m.emu =
            im.emulation_of(m.device, m.endpoint.empty() || m.endpoint.rfind("inproc://", 0) == 0);
        if (m.endpoint.empty()) m.local = make_stage(m.config);
        if (k > 0) {
          m.to_member = link_between(dev, m.device);
          m.from_member = link_between(m.device, dev);
        }
        sn.members.push_back(std::move(m));
      }
      nodes.push_back(std::move(sn));
    }
    // Worker to worker: a stage hands its output straight to the next stage's worker when both
    // are single-device stages on workers of one transport (two tcp/ipc workers, or two in this
    // process) with no emulated link between them (an emulated link models the hop itself).
    report.direct_hops = 0;
    const uint64_t epoch = next_epoch();
    for (size_t k = 0; k + 1 < nodes.size(); ++k) {
      Node &a = nodes[k], &b = nodes[k + 1];
      if (im.opt.topology != Topology::kWorkerToWorker || a.is_link || b.is_link ||
          a.members.size() != 1 || b.members.size() != 1)
        continue;
      Member &from = a.members[0], &to = b.members[0];
      if (from.endpoint.empty() || to.endpoint.empty() ||
          is_inproc(from.endpoint) != is_inproc(to.endpoint))
        continue;
      from.route.next_endpoint = to.endpoint;
      from.route.next_stage = to.stage_id;
      from.route.heartbeat_interval_s = im.opt.client.heartbeat_interval_s;
      from.route.heartbeat_timeout_s = im.opt.client.heartbeat_timeout_s;
      from.route.connect_timeout_s = im.opt.client.connect_timeout_s;
      to.route.input_from_prev = true;
      from.route.epoch = to.route.epoch = epoch;
      ++report.direct_hops;
    }
    for (auto& n : nodes) {
      order.push_back(n.name);
      std::lock_guard lock(im.timeline_mutex);
      auto& tl = im.timelines[n.name];
      tl.name = n.name;
      tl.device = n.device;
      tl.kind = n.is_link ? "link" : "stage";
    }

    std::vector<std::unique_ptr<BoundedQueue<Packet>>> queues;
    for (size_t i = 0; i <= nodes.size(); ++i)
      queues.push_back(std::make_unique<BoundedQueue<Packet>>(im.opt.queue_capacity));
    std::atomic<bool> abort{false};
    std::mutex fail_mutex;
    std::optional<Failure> failure;
    auto fail = [&](Failure f) {
      {
        std::lock_guard lock(fail_mutex);
        if (!failure) failure = std::move(f);
      }
      abort.store(true);
      for (auto& q : queues) q->close();
    };
    auto push = [&](BoundedQueue<Packet>& q, Packet p) {
      while (!abort.load())
        if (q.push(std::move(p), poll_s))
          return true;
        else if (q.closed())
          return false;
      return false;
    };

    // Connect every remote/in-process member, then configure them (fresh state for every
    // generation): every worker has answered before one is asked to reach its successor, so a
    // successor it cannot reach is a configuration error, not a lost device.
    for (const bool configure : {false, true}) {
      for (size_t k = 0; k < nodes.size() && !failure; ++k) {
        for (Member& m : nodes[k].members) {
          if (m.endpoint.empty() || failure) continue;
          ClientOptions co = im.opt.client;  // building a stage counts against the run's timeout
          co.configure_timeout_s =
              std::min(co.configure_timeout_s, std::max(im.opt.run_timeout_s - now_s(), 1e-3));
          try {
            if (!configure) {
              m.client = std::make_unique<WorkerClient>(
                  m.endpoint, is_inproc(m.endpoint) ? std::nullopt : im.opt.key, co);
              m.client->hello();
            } else {
              m.client->configure(m.stage_id, m.config, m.emu, m.route);
            }
          } catch (const WorkerLost& e) {
            fail({true, m.device, nullptr, e.what()});
          } catch (...) {
            fail({false, m.device, std::current_exception(), ""});
          }
        }
      }
    }

    // One member computes its packet; the request's last micro-batch frees its state (KV).
    auto run_member = [&](Member& m, Packet p, double* compute_s) {
      const bool last = p.micro + 1 == p.n_micro;
      const uint64_t rid = p.request_id;
      Packet out;
      std::lock_guard one_task(*m.busy);
      if (m.local) {
        out = m.emu.run(*m.local, std::move(p), compute_s);
        if (last && im.opt.reset_finished) m.local->reset(rid);
      } else {
        out = m.client->process(m.stage_id, p, compute_s);
        if (last && im.opt.reset_finished) m.client->reset(m.stage_id, rid);
      }
      return out;
    };
    // A group: split, each member on its own thread (its tile over the group's shared medium
    // from the master and back), stitch. `culprit` names the member whose worker was lost.
    auto run_group = [&](Node& n, const Packet& in, double* compute_s, std::string* culprit) {
      std::vector<Packet> parts = n.ops.split(in, n.config, n.shares);
      if (parts.size() != n.members.size())
        throw InvalidArgument(cat(n.name, ": split gave ", parts.size(), " parts for ",
                                  n.members.size(), " devices"));
      std::vector<double> comp(parts.size(), 0.0);
      std::vector<std::exception_ptr> errors(parts.size());
      auto send = [&](EmulatedLink* l, const Packet& p) {
        if (!l) return;
        std::lock_guard medium(*n.medium);
        l->transmit(packet_bytes(p));
      };
      std::vector<std::thread> threads;
      for (size_t k = 0; k < parts.size(); ++k)
        threads.emplace_back([&, k] {
          try {
            send(n.members[k].to_member, parts[k]);
            parts[k] = run_member(n.members[k], std::move(parts[k]), &comp[k]);
            send(n.members[k].from_member, parts[k]);
          } catch (...) {
            errors[k] = std::current_exception();
          }
        });
      for (auto& t : threads) t.join();
      for (size_t k = 0; k < errors.size(); ++k)
        if (errors[k]) {
          *culprit = n.members[k].device;
          std::rethrow_exception(errors[k]);
        }
      *compute_s = *std::max_element(comp.begin(), comp.end());
      return n.ops.stitch(std::move(parts), n.config, n.shares);
    };

    std::vector<std::thread> threads;
    if (!failure) {
      for (size_t k = 0; k < nodes.size(); ++k) {
        threads.emplace_back([&, k] {
          Node& n = nodes[k];
          BoundedQueue<Packet>& in = *queues[k];
          BoundedQueue<Packet>& out = *queues[k + 1];
          std::string culprit = n.device;
          try {
            while (!abort.load()) {
              auto p = in.pop(poll_s);
              if (!p) {
                if (in.closed()) return;
                continue;
              }
              Interval iv{p->request_id, p->micro, now_s(), 0, 0};
              Packet result;
              if (n.is_link) {
                std::unique_lock medium =
                    n.medium ? std::unique_lock(*n.medium) : std::unique_lock<std::mutex>();
                iv.compute_s = n.link->transmit(packet_bytes(*p)).delay_s;
                result = std::move(*p);
              } else if (n.members.size() == 1) {
                result = run_member(n.members[0], std::move(*p), &iv.compute_s);
              } else {
                result = run_group(n, *p, &iv.compute_s, &culprit);
              }
              iv.end_s = now_s();
              im.record(n.name, iv);
              if (!push(out, std::move(result))) return;
            }
          } catch (const SuccessorLost& e) {
            // Only a stage that forwards to the next node (a stage, no link between) throws it.
            fail({true, nodes[k + 1].device, nullptr, e.what()});
          } catch (const WorkerLost& e) {
            fail({true, culprit, nullptr, e.what()});
          } catch (...) {
            fail({false, culprit, std::current_exception(), ""});
          }
        });
      }
      // The feeder works on its own copy (tensors share their buffers): the collector below
      // erases from `pending` while it runs.
      std::vector<Packet> to_feed;
      for (const auto& [id, r] : pending)
        for (const auto& m : r.micros) to_feed.push_back(m);
      threads.emplace_back([&, to_feed = std::move(to_feed)]() mutable {  // the feeder
        for (auto& m : to_feed)
          if (!push(*queues[0], std::move(m))) return;
      });
    }

    // Collect: a request is delivered when all its micro-batches came out in this generation.
    std::map<uint64_t, std::vector<Packet>> partial;
    while (!abort.load() && !pending.empty()) {
      if (now_s() > im.opt.run_timeout_s) {
        fail({false, "",
              std::make_exception_ptr(TransportError("pipeline: the run exceeded its timeout of " +
                                                     std::to_string(im.opt.run_timeout_s) + " s")),
              ""});
        break;
      }
      auto p = queues.back()->pop(poll_s);
      if (!p) continue;
      auto it = pending.find(p->request_id);
      if (it == pending.end()) continue;  // cannot happen within one generation; be safe
      auto& got = partial[p->request_id];
      got.push_back(std::move(*p));
      if (got.size() == it->second.micros.size()) {
        std::sort(got.begin(), got.end(),
                  [](const Packet& a, const Packet& b) { return a.micro < b.micro; });
        if (on_result) on_result(it->first, got);
        report.outputs[it->first] = std::move(got);
        partial.erase(it->first);
        pending.erase(it);
      }
    }
    abort.store(true);
    for (auto& q : queues) q->close();
    for (auto& t : threads) t.join();
    for (const Node& n : nodes)
      for (const Member& m : n.members)
        if (m.client) {
          report.coordinator_bytes += m.client->bytes_sent() + m.client->bytes_received();
          report.forwarded_bytes += m.client->forwarded_bytes();
        }
    for (size_t k = 0; k < nodes.size(); ++k) {
      std::lock_guard lock(im.timeline_mutex);
      auto& tl = im.timelines[nodes[k].name];
      tl.queue_max_depth = std::max(tl.queue_max_depth, queues[k]->max_depth());
      tl.queue_blocked_pushes += queues[k]->blocked_pushes();
    }
    if (!failure) break;
    if (failure->fatal) std::rethrow_exception(failure->fatal);
    if (pending.empty()) break;  // the failure came after the last answer
    // A worker was lost: re-plan over the survivors and re-run what had not completed.
    im.failed.insert(failure->device);
    const std::string event = "t=" + std::to_string(now_s()) + " s: lost device '" +
                              failure->device + "': " + failure->what;
    log().warn("pipeline: {}", event);
    report.events.push_back(event);
    if (report.replans >= im.opt.max_replans)
      throw Infeasible("pipeline: gave up after " + std::to_string(report.replans) +
                       " re-plans; last failure: " + failure->what);
    const std::vector<std::string> failed(im.failed.begin(), im.failed.end());
    const std::vector<std::string> alive = im.alive_devices();
    if (im.opt.replan_plan) {
      PipelinePlan next = im.opt.replan_plan(im.plan, failed, alive);
      for (const auto& d : next.devices())
        if (im.failed.count(d))
          throw Infeasible("pipeline: the re-plan kept failed device '" + d + "'");
      im.adopt(std::move(next));
      ++report.replans;
      std::string over;
      for (const auto& d : im.plan.devices()) over += (over.empty() ? "" : ", ") + d;
      report.events.push_back(
          "t=" + std::to_string(now_s()) + " s: re-plan: " + std::to_string(im.plan.stages.size()) +
          " stages over " + over + "; re-running " + std::to_string(pending.size()) + " requests");
      continue;
    }
    auto next = (im.opt.replan ? im.opt.replan : default_replan)(im.devices, failed, alive);
    if (next.size() != im.devices.size())
      throw InvalidArgument("pipeline: the re-plan callback returned " +
                            std::to_string(next.size()) + " devices for " +
                            std::to_string(im.devices.size()) + " stage device slots");
    for (const auto& d : next)
      if (im.failed.count(d))
        throw Infeasible("pipeline: the re-plan kept failed device '" + d + "'");
    std::string moved;
    for (size_t i = 0; i < next.size(); ++i)
      if (next[i] != im.devices[i]) {
        const size_t stage = std::upper_bound(im.slot_begin.begin(), im.slot_begin.end(), i) -
                             im.slot_begin.begin() - 1;
        moved += " stage " + std::to_string(stage) + ": " + im.devices[i] + " -> " + next[i] + ";";
      }
    im.devices = next;
    ++report.replans;
    report.events.push_back("t=" + std::to_string(now_s()) + " s: re-plan" + moved +
                            " re-running " + std::to_string(pending.size()) + " requests");
  }

  report.makespan_s = now_s();
  report.final_devices = im.devices;
  std::lock_guard lock(im.timeline_mutex);
  for (const auto& name : order) {
    report.timelines.push_back(im.timelines[name]);
    if (report.timelines.back().kind == "link")
      report.link_counters.push_back(im.links[name]->counters());
  }
  return report;
}

nlohmann::json RunReport::to_json() const {
  nlohmann::json j;
  j["makespan_s"] = makespan_s;
  j["replans"] = replans;
  j["requests"] = outputs.size();
  j["requests_rerun"] = requests_rerun;
  j["topology"] = {{"direct_hops", direct_hops},
                   {"coordinator_bytes", coordinator_bytes},
                   {"worker_to_worker_bytes", forwarded_bytes}};
  j["events"] = events;
  j["final_devices"] = final_devices;
  j["timelines"] = nlohmann::json::array();
  size_t li = 0;
  for (const auto& t : timelines) {
    double first = 0, last = 0;
    if (!t.intervals.empty()) {
      first = t.intervals.front().start_s;
      last = t.intervals.front().end_s;
      for (const auto& i : t.intervals) {
        first = std::min(first, i.start_s);
        last = std::max(last, i.end_s);
      }
    }
    const double busy = t.busy_s();
    nlohmann::json e = {{"name", t.name},
                        {"device", t.device},
                        {"kind", t.kind},
                        {"packets", t.intervals.size()},
                        {"busy_s", busy},
                        {"utilisation", makespan_s > 0 ? busy / makespan_s : 0.0},
                        {"bubble_s", std::max(0.0, makespan_s - busy)},
                        {"active_span_s", last - first},
                        {"queue_max_depth", t.queue_max_depth},
                        {"queue_blocked_pushes", t.queue_blocked_pushes}};
    if (t.kind == "link" && li < link_counters.size()) {
      const auto& c = link_counters[li++];
      e["link"] = {
          {"messages", c.messages}, {"bytes", c.bytes}, {"drops", c.drops}, {"delay_s", c.delay_s}};
    }
    j["timelines"].push_back(e);
  }
  return j;
}

std::map<uint64_t, std::vector<Packet>> run_sequential(const PipelinePlan& plan,
                                                       std::vector<Request> requests) {
  std::vector<std::unique_ptr<Stage>> stages;
  for (const auto& s : plan.stages) stages.push_back(make_stage(s.stage));
  std::map<uint64_t, std::vector<Packet>> out;
  for (auto& r : requests) {
    auto& o = out[r.id];
    for (size_t m = 0; m < r.micros.size(); ++m) {
      Packet p = std::move(r.micros[m]);
      p.request_id = r.id;
      p.micro = static_cast<int32_t>(m);
      p.n_micro = static_cast<int32_t>(r.micros.size());
      for (auto& st : stages) p = st->process(std::move(p));
      o.push_back(std::move(p));
    }
    for (auto& st : stages) st->reset(r.id);
  }
  return out;
}

}  // namespace tandem::sched
