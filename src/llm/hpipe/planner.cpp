// SPDX-License-Identifier: Apache-2.0
// HPipe planning (hpipe.h): the cost model per stage, DP 1 (layer partition), DP 2 (token
// slicing), the baselines' splits and schedules, and the prediction through the simulator.
#include <algorithm>
#include <cmath>
#include <limits>

#include "tandem/core/error.h"
#include "tandem/llm/hpipe.h"

namespace tandem::llm::hpipe {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The device as priced: `override_speed` > 0 replaces its speed factor (TeraPipe's homogeneous
// model prices every device at the cluster's mean speed).
DeviceProfile priced(const DeviceProfile& d, double override_speed) {
  DeviceProfile p = d;
  p.op_latency_s.clear();
  if (override_speed > 0) p.speed_factor = override_speed;
  return p;
}

// Seconds to send s tokens' hidden states from device `from` to `to` (0 when they are the same).
double send_s(const ModelProfile& prof, const ClusterSpec& cl, const std::string& from,
              const std::string& to, double tokens) {
  return cl.transfer_time_s(from, to, tokens * prof.act_bytes_per_token);
}

std::vector<StagePlan> stages_from_cuts(const ClusterSpec& cl, const std::vector<int>& cuts) {
  std::vector<StagePlan> st;
  const size_t n = cl.devices.size();
  for (size_t j = 0; j < n; ++j) {
    st.push_back({cl.devices[j].name, cuts[j], cuts[j + 1], j == 0, j + 1 == n});
  }
  return st;
}

void check_inputs(const ModelProfile& prof, const ClusterSpec& cl, int prompt_len, int batch) {
  if (cl.devices.empty()) throw InvalidArgument("HPipe: the cluster has no devices");
  if (prompt_len < 1) throw InvalidArgument(cat("HPipe: prompt length ", prompt_len, " < 1"));
  if (batch < 1) throw InvalidArgument(cat("HPipe: batch ", batch, " < 1"));
  if (static_cast<int>(cl.devices.size()) > prof.n_layers) {
    throw InvalidArgument(cat("HPipe: ", cl.devices.size(), " devices but the model '",
                              prof.model_name, "' has only ", prof.n_layers,
                              " layers (each device needs at least one)"));
  }
  for (const DeviceProfile& d : cl.devices) {
    if (!(d.speed_factor > 0)) {
      throw InvalidArgument(cat("HPipe: device '", d.name, "' has speed_factor ", d.speed_factor));
    }
  }
  for (size_t j = 0; j + 1 < cl.devices.size(); ++j) {
    if (!cl.has_link(cl.devices[j].name, cl.devices[j + 1].name)) {
      throw InvalidArgument(cat("HPipe: no link between consecutive devices '", cl.devices[j].name,
                                "' and '", cl.devices[j + 1].name, "'"));
    }
  }
}

// The stage's whole-prompt time (DP 1's T): compute for the batch plus the outgoing transfer.
double stage_cost(const ModelProfile& prof, const LayerCostModel& cost, const ClusterSpec& cl,
                  size_t m, int a, int b, int prompt_len, int batch) {
  const DeviceProfile& d = cl.devices[m];
  const bool last = m + 1 == cl.devices.size();
  double t = batch * cost.layers_s(b - a, last, prompt_len, 0, d);
  if (!last) t += send_s(prof, cl, d.name, cl.devices[m + 1].name, double(batch) * prompt_len);
  return t;
}

bool fits(const ModelProfile& prof, const DeviceProfile& d, int a, int b, bool embed, bool head,
          double tokens) {
  return d.mem_bytes <= 0 || stage_memory_bytes(prof, a, b, embed, head, tokens) <= d.mem_bytes;
}

[[noreturn]] void throw_no_fit(const ModelProfile& prof, const ClusterSpec& cl, int prompt_len,
                               int batch) {
  const double tokens = double(prompt_len) * batch;
  std::string msg = cat(
      "HPipe: no split of the ", prof.n_layers, " layers of '", prof.model_name,
      "' fits the devices' memory at ", prompt_len, " tokens x batch ", batch, " (one layer needs ",
      static_cast<int64_t>(stage_memory_bytes(prof, 0, 1, false, false, tokens)), " bytes):");
  int total = 0;
  for (size_t m = 0; m < cl.devices.size(); ++m) {
    const DeviceProfile& d = cl.devices[m];
    int k = 0;
    while (k < prof.n_layers &&
           fits(prof, d, 0, k + 1, m == 0, m + 1 == cl.devices.size(), tokens)) {
      ++k;
    }
    total += k;
    msg += cat(" device '", d.name, "' (", static_cast<int64_t>(d.mem_bytes), " bytes) holds ", k,
               " layers;");
  }
  msg += cat(" together ", total, " < ", prof.n_layers);
  throw Infeasible(msg);
}

}  // namespace

double stage_compute_s(const ModelProfile& prof, const DeviceProfile& dev, const StagePlan& st,
                       double s, double c) {
  return LayerCostModel(prof).layers_s(st.last_layer - st.first_layer, st.head, s, c, dev);
}

double stage_memory_bytes(const ModelProfile& prof, int a, int b, bool embed, bool head,
                          double tokens) {
  const double layers = b - a;
  // Activations of one pass over `tokens` rows: x, h, q, k, v, attention (~6 d) and gate, up
  // (2 d_ff), f32.
  const double act = tokens * (6.0 * prof.d_model + 2.0 * prof.d_ff) * 4.0;
  return layers * (prof.layer_weight_bytes + prof.kv_bytes_per_token_layer * tokens) + act +
         (embed ? prof.embed_bytes : 0.0) + (head ? prof.head_bytes : 0.0);
}

std::vector<int> partition_layers(const ModelProfile& prof, const ClusterSpec& cl, int prompt_len,
                                  int batch) {
  check_inputs(prof, cl, prompt_len, batch);
  const int n = prof.n_layers;
  const size_t nd = cl.devices.size();
  const double tokens = double(prompt_len) * batch;
  const LayerCostModel cost(prof);
  // A[m][b]: best slowest-stage time with layers [0, b) on devices 0..m; K: the cut before b.
  std::vector<std::vector<double>> A(nd, std::vector<double>(n + 1, kInf));
  std::vector<std::vector<int>> K(nd, std::vector<int>(n + 1, -1));
  for (int b = 1; b <= n; ++b) {
    if (fits(prof, cl.devices[0], 0, b, true, nd == 1, tokens)) {
      A[0][b] = stage_cost(prof, cost, cl, 0, 0, b, prompt_len, batch);
      K[0][b] = 0;
    }
  }
  for (size_t m = 1; m < nd; ++m) {
    const bool last = m + 1 == nd;
    for (int b = static_cast<int>(m) + 1; b <= n; ++b) {
      for (int k = static_cast<int>(m); k < b; ++k) {
        if (A[m - 1][k] == kInf || !fits(prof, cl.devices[m], k, b, false, last, tokens)) continue;
        const double v =
            std::max(A[m - 1][k], stage_cost(prof, cost, cl, m, k, b, prompt_len, batch));
        if (v < A[m][b]) {
          A[m][b] = v;
          K[m][b] = k;
        }
      }
    }
  }
  if (A[nd - 1][n] == kInf) throw_no_fit(prof, cl, prompt_len, batch);
  std::vector<int> cuts(nd + 1);
  cuts[nd] = n;
  for (size_t m = nd; m-- > 0;) cuts[m] = K[m][cuts[m + 1]];
  return cuts;
}

std::vector<int> even_split(const ModelProfile& prof, const ClusterSpec& cl, int prompt_len,
                            int batch) {
  check_inputs(prof, cl, prompt_len, batch);
  const int nd = static_cast<int>(cl.devices.size());
  std::vector<int> cuts(nd + 1, 0);
  for (int j = 0; j < nd; ++j) {
    cuts[j + 1] = cuts[j] + prof.n_layers / nd + (j < prof.n_layers % nd ? 1 : 0);
  }
  const double tokens = double(prompt_len) * batch;
  for (int j = 0; j < nd; ++j) {
    const DeviceProfile& d = cl.devices[j];
    if (!fits(prof, d, cuts[j], cuts[j + 1], j == 0, j + 1 == nd, tokens)) {
      throw Infeasible(cat("HPipe: the even split gives device '", d.name, "' layers [", cuts[j],
                           ", ", cuts[j + 1], ") needing ",
                           static_cast<int64_t>(stage_memory_bytes(prof, cuts[j], cuts[j + 1],
                                                                   j == 0, j + 1 == nd, tokens)),
                           " bytes; it has ", static_cast<int64_t>(d.mem_bytes)));
    }
  }
  return cuts;
}

std::vector<int> uniform_slices(int prompt_len, int k) {
  if (k < 1 || k > prompt_len) {
    throw InvalidArgument(cat("uniform slicing: ", k, " slices of a ", prompt_len,
                              "-token prompt (need 1 <= K <= prompt length)"));
  }
  std::vector<int> s(k, prompt_len / k);
  for (int i = 0; i < prompt_len % k; ++i) ++s[i];
  return s;
}

std::vector<int> slice_tokens(const ModelProfile& prof, const ClusterSpec& cl,
                              const std::vector<StagePlan>& stages, int prompt_len,
                              const PlanOptions& opt, double speed_override) {
  if (stages.empty()) throw InvalidArgument("slice_tokens: no stages");
  if (opt.granularity < 1 || opt.max_candidates < 1 || opt.max_grid < 1) {
    throw InvalidArgument("slice_tokens: granularity, max_candidates and max_grid must be >= 1");
  }
  int g = std::max(opt.granularity, (prompt_len + opt.max_grid - 1) / opt.max_grid);
  const int n = (prompt_len + g - 1) / g;  // grid points; point i covers tokens up to min(i g, L)
  auto tok = [&](int i) { return std::min(i * g, prompt_len); };
  const size_t ns = stages.size();
  const LayerCostModel model(prof);
  std::vector<DeviceProfile> dev;
  for (const StagePlan& st : stages) dev.push_back(priced(cl.device(st.device), speed_override));
  // cost[e][b]: bottleneck stage time of the slice [tok(b), tok(e)) (e > b).
  std::vector<std::vector<double>> cost(n + 1, std::vector<double>(n + 1, kInf));
  std::vector<double> cands;
  for (int e = 1; e <= n; ++e) {
    for (int b = 0; b < e; ++b) {
      const double s = tok(e) - tok(b), c = tok(b);
      double worst = 0;
      for (size_t j = 0; j < ns; ++j) {
        double t = model.layers_s(stages[j].last_layer - stages[j].first_layer, stages[j].head, s,
                                  c, dev[j]);
        if (j + 1 < ns) t += send_s(prof, cl, dev[j].name, stages[j + 1].device, s);
        worst = std::max(worst, t);
      }
      cost[e][b] = worst;
      cands.push_back(worst);
    }
  }
  std::sort(cands.begin(), cands.end());
  cands.erase(std::unique(cands.begin(), cands.end()), cands.end());
  // Only candidates >= the cheapest feasible bottleneck matter: t_max below the largest
  // single-grid-step slice cost admits no slicing.
  double floor_t = 0;
  for (int e = 1; e <= n; ++e) floor_t = std::max(floor_t, cost[e][e - 1]);
  cands.erase(cands.begin(), std::lower_bound(cands.begin(), cands.end(), floor_t));
  if (static_cast<int>(cands.size()) > opt.max_candidates) {
    std::vector<double> sub;
    for (int i = 0; i < opt.max_candidates; ++i) {
      sub.push_back(cands[static_cast<size_t>(
          std::llround(double(i) * (cands.size() - 1) / (opt.max_candidates - 1)))]);
    }
    cands = sub;
  }
  double best_total = kInf;
  std::vector<int> best_back;
  std::vector<double> F(n + 1);
  std::vector<int> back(n + 1);
  for (double tmax : cands) {
    F.assign(n + 1, kInf);
    F[0] = 0;
    for (int e = 1; e <= n; ++e) {
      for (int b = e - 1; b >= 0; --b) {
        if (cost[e][b] > tmax) continue;
        if (F[b] + cost[e][b] < F[e]) {
          F[e] = F[b] + cost[e][b];
          back[e] = b;
        }
      }
    }
    const double total = opt.batch * F[n] + (double(ns) - 1) * tmax;
    if (total < best_total) {
      best_total = total;
      best_back = back;
    }
  }
  if (best_back.empty()) {
    throw Infeasible(cat("HPipe: no slicing of the ", prompt_len,
                         "-token prompt has a finite predicted latency on this cluster (the "
                         "slowest stage needs ",
                         floor_t, " s for one ", g,
                         "-token step); check the devices' speeds and the links' bandwidth and "
                         "latency"));
  }
  std::vector<int> slices;
  for (int e = n; e > 0; e = best_back[e]) slices.push_back(tok(e) - tok(best_back[e]));
  std::reverse(slices.begin(), slices.end());
  return slices;
}

sched::PipelineSimInput predicted_sim_input(const sched::PipelinePlan& plan,
                                            const ModelProfile& prof, const ClusterSpec& cl) {
  const LayerStages ls = layer_stages(plan, "plan");
  const LayerCostModel cost(prof);
  sched::PipelineSimInput in;
  const size_t ns = ls.stages.size();
  const int64_t batch = plan.batch > 0 ? plan.batch : plan.micro_batches;
  const int64_t per_packet = batch / plan.micro_batches;  // requests per packet
  for (int64_t r = 0; r < plan.micro_batches; ++r) {
    double c = 0;
    for (int64_t s : plan.slices) {
      std::vector<double> comp(ns), xfer(ns - 1);
      for (size_t j = 0; j < ns; ++j) {
        const DeviceProfile& d = cl.device(ls.stages[j].device);
        comp[j] =
            double(per_packet) * cost.layers_s(ls.stages[j].last_layer - ls.stages[j].first_layer,
                                               ls.stages[j].head, double(s), c, d);
        if (j + 1 < ns)
          xfer[j] = send_s(prof, cl, d.name, ls.stages[j + 1].device, double(per_packet * s));
      }
      in.compute_s.push_back(comp);
      in.transfer_s.push_back(xfer);
      c += double(s);
    }
  }
  return in;
}

void predict(sched::PipelinePlan& plan, const ModelProfile& prof, const ClusterSpec& cl) {
  const sched::PipelineSimResult r = sched::simulate_pipeline(predicted_sim_input(plan, prof, cl));
  sched::PlanPrediction& p = plan.predicted;
  p.latency_s = r.makespan_s;
  p.unit = "tokens";
  const int64_t batch = plan.batch > 0 ? plan.batch : plan.micro_batches;
  p.throughput_per_s = double(batch) * double(plan.prompt_len) / r.makespan_s;
  p.per_stage_busy_s = r.device_busy_s;
  p.energy_j = 0;
  for (size_t j = 0; j < plan.stages.size(); ++j)
    p.energy_j += cl.device(plan.stages[j].device()).power_w * r.device_busy_s[j];
  p.source = "cost-model+simulator";
}

namespace {

// K of "uniform-K", 0 when malformed.
int uniform_k(const std::string& system) {
  try {
    size_t used = 0;
    const int k = std::stoi(system.substr(8), &used);
    return used == system.size() - 8 ? k : 0;
  } catch (const std::exception&) {
    return 0;
  }
}

}  // namespace

sched::PipelinePlan make_plan(const ModelProfile& prof, const ClusterSpec& cl,
                              const std::string& cluster_name, int prompt_len,
                              const std::string& system, const PlanOptions& opt) {
  check_inputs(prof, cl, prompt_len, opt.batch);
  auto hetero_split = [&] { return partition_layers(prof, cl, prompt_len, opt.batch); };
  auto even = [&] { return even_split(prof, cl, prompt_len, opt.batch); };
  std::vector<StagePlan> stages;
  std::vector<int> slices;
  if (system == "hpipe") {
    stages = stages_from_cuts(cl, hetero_split());
    // Requests follow each other through the pipeline; each request's slices are planned alone.
    slices = slice_tokens(prof, cl, stages, prompt_len, opt);
  } else if (system == "terapipe") {
    stages = stages_from_cuts(cl, even());
    double mean = 0;
    for (const DeviceProfile& d : cl.devices) mean += d.speed_factor / double(cl.devices.size());
    slices = slice_tokens(prof, cl, stages, prompt_len, opt, mean);
  } else if (system == "gpipe" || system == "gp-b") {
    stages = stages_from_cuts(cl, system == "gpipe" ? even() : hetero_split());
    slices = {prompt_len};
  } else if (system == "base") {
    stages = stages_from_cuts(cl, even());
    slices = {prompt_len};
  } else if (system.rfind("uniform-", 0) == 0) {
    const int k = uniform_k(system);
    if (k < 1 || k > 128)
      throw InvalidArgument(cat("HPipe: system '", system, "': K must be 1..128"));
    stages = stages_from_cuts(cl, hetero_split());
    slices = uniform_slices(prompt_len, k);
  } else {
    throw InvalidArgument(cat("HPipe: unknown system '", system,
                              "' (hpipe, gpipe, gp-b, terapipe, base, uniform-K)"));
  }
  sched::PipelinePlan plan = layer_plan(prof.model_path, prof.sha256, stages);
  plan.system = system;
  plan.cluster = cluster_name;
  plan.prompt_len = prompt_len;
  plan.batch = opt.batch;
  plan.slices.assign(slices.begin(), slices.end());
  // GPipe-style systems send one request per micro-batch; Base sends the whole batch at once; the
  // token-sliced systems send each request's slices in turn (micro_batches = batch, one request
  // each, so the batch's requests pipeline back to back).
  plan.micro_batches = system == "base" ? 1 : opt.batch;
  predict(plan, prof, cl);
  return plan;
}

}  // namespace tandem::llm::hpipe
