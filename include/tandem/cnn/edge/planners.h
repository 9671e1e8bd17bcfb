// SPDX-License-Identifier: Apache-2.0
// Edge planners for a CNN on a cluster of heterogeneous devices sharing one medium: PICO (ICDCS
// 2021) and the baselines it is compared with (spec cnn.md §3.1, §4). All plan over the same
// pieces (chain.h) and cost model (cost.h) and are predicted by the same evaluate() (plan.h).
//
// PICO (plan_pico), §3.1:
//   1. homogenise: every device becomes one of capacity ϑ' = mean ϑ (eq. 12); a stage (i, j, q)
//      splits piece j's output into q equal row bands; Ts[i][j][q] = T(S) (eq. 9);
//   2. DP (eq. 13): P[i][j][p] = min(Ts[i][j][p], min_{j'<j, p'<p} max(P[i][j'][p−p'],
//      Ts[j'+1][j][p'])), with the latency T[i][j][p] kept beside each entry and candidates pruned
//      when a stage or the accumulated latency exceeds T_lim; trace-back rebuilds the stages; the
//      answer is P[1][L][|D|] (or, with allow_idle_devices, the best over p <= |D|);
//   3. heterogeneity (Alg. 2): devices sorted by ϑ descending, each given to the stage with
//      placeholders left whose average requirement Θ'/|D'| is largest; then each stage's rows are
//      re-split among its real devices. Departure: the paper's divide-and-conquer (the spec: the
//      AWP LP of §3.3) is replaced by an exact FLOPs balance: bisection on the stage's compute
//      time T, each device in turn taking the most rows it computes within T (halo included).
//   Optional (refine_mapping, off by default; a reconstruction of the journal version's "greedy
//   refinements for heterogeneity", not the ICDCS algorithm): after step 3, a local search moves
//   one device to another stage or swaps two (with allow_idle_devices also idles or recalls one),
//   re-splitting rows, while the period (then the latency) drops within T_lim. Alg. 2 maps by
//   FLOPs alone; the search sees the transfers too, which dominate at 50 Mbps.
//   APICO (plan_apico): the pipeline plan or the one-stage fused plan (OFL), whichever has the
//   lower M/D/1 mean latency at the given λ.
// Baselines (§4):
//   LW        every piece is a step on all devices, rows in proportion to ϑ (a dense piece: its
//             output features in proportion), gathered after each piece; a residual or inception
//             block is one piece, so LW gathers after blocks (departure: MoDNN splits every layer).
//   EFL       DeepThings FTP: the first L_f pieces fused, their output cut into an N×M grid (N, M
//             <= 6) of independent tiles taken by whichever device is idle first (work stealing,
//             estimated by list scheduling in tile order), the rest on the gateway (fastest
//             device); L_f and the grid are the best of all choices by predicted latency unless
//             fixed in PlanOptions.
//   OFL       DP over piece boundaries F[k] = min_{j<k} F[j] + T(fused pieces j..k−1 on all
//             devices, rows in proportion to ϑ), one block after another.
//   PipeEdge  interval DP over pieces with one device per stage, each device at most once, device
//             memory as a hard limit; exact over device subsets (up to 12 devices).
//   single    the whole model on the device that runs it fastest (and can hold it).
// Non-spatial segments (after a Flatten or global pool) run on one device in PICO, OFL, EFL.
//
// DeepZoning (TACO 2025), §3.3. A reconstruction: the paper text is not public, the spec's
// design is implemented (docs/edge.md "DeepZoning").
//   zones     the pieces (a plain layer, a residual or an inception block); consecutive pieces
//             merge into a zone of any length (dynamic granularity);
//   AWP       each merged zone split over all devices in the cheapest of: one device; spatial
//             (row bands with halo; water-filling LP); channel (every device the whole input and a
//             range of the last piece's output channels, the earlier pieces in full;
//             water-filling LP); hybrid (a G x M grid of row groups and channel ranges, G, M >= 2;
//             an LP solved by COIN-OR CLP); integer rows/channels by largest remainder, then ±1
//             moves while the exact T(S) drops (awp.h);
//   latency   (plan_deepzoning) Best[k] = min_j Best[j] + Redistribute(j) + AWP(merge(j+1..k)):
//             one stage per merged zone, run one after another; Redistribute is the zone's input
//             sent and output gathered through the stage master in the layout its mode needs
//             (rows -> channels: an all-gather), the same transfers evaluate() charges, so the
//             DP's latency (notes.dp_latency_s) is the plan's evaluated latency;
//   throughput (plan_deepzoning_tp) PICO's DP (eq. 13) with the AWP split of a merged zone on q
//             equal devices as the stage cost, PICO's Alg. 2 mapping, then AWP on each stage's
//             real devices; pipelined.
//   CoEdge    (plan_coedge, §4) every piece alone, rows split by the AWP spatial LP over all
//             devices (or one device when that is faster), gathered after each.
// notes.zones lists each stage's pieces and mode.
//
//   cnn::edge::AnalyticCostModel cost;
//   auto problem = cnn::edge::make_problem(chain, cluster, cost);
//   cnn::edge::EdgePlan plan = cnn::edge::plan_system("pico", problem, {.lambda = 2});
//   fmt::print("{}", cnn::edge::format_table(plan, problem));
//
// Every planner returns an evaluated plan (metrics filled, planner_s measured) and throws
// Infeasible when no plan fits (latency cap, memory: naming the device). Thread-safety: pure
// functions of their arguments.
#pragma once

#include <limits>
#include <string>
#include <vector>

#include "tandem/cnn/edge/plan.h"
#include "tandem/export.h"

namespace tandem::cnn::edge {

struct PlanOptions {
  double latency_cap_s = std::numeric_limits<double>::infinity();  // T_lim (PICO), seconds
  double lambda = 0;                // frames/s: latency_at_lambda_s and APICO's choice
  bool allow_idle_devices = false;  // PICO: best over p <= |D| (the paper: p = |D|)
  bool refine_mapping = false;      // PICO: local search after Alg. 2 (not in the paper)
  int efl_max_grid = 6;             // EFL: N, M <= this (DeepThings: 6)
  // EFL with a fixed configuration, as DeepThings is run (0: searched): the grid N x M and the
  // number of fused leading pieces L_f (clamped to the spatial ones).
  int efl_rows = 0, efl_cols = 0, efl_fused = 0;
};

TANDEM_API EdgePlan plan_pico(const EdgeProblem& problem, const PlanOptions& options = {});
TANDEM_API EdgePlan plan_apico(const EdgeProblem& problem, const PlanOptions& options = {});
TANDEM_API EdgePlan plan_lw(const EdgeProblem& problem, const PlanOptions& options = {});
TANDEM_API EdgePlan plan_efl(const EdgeProblem& problem, const PlanOptions& options = {});
TANDEM_API EdgePlan plan_ofl(const EdgeProblem& problem, const PlanOptions& options = {});
TANDEM_API EdgePlan plan_pipeedge(const EdgeProblem& problem, const PlanOptions& options = {});
TANDEM_API EdgePlan plan_single(const EdgeProblem& problem, const PlanOptions& options = {});
TANDEM_API EdgePlan plan_deepzoning(const EdgeProblem& problem, const PlanOptions& options = {});
TANDEM_API EdgePlan plan_deepzoning_tp(const EdgeProblem& problem, const PlanOptions& options = {});
TANDEM_API EdgePlan plan_coedge(const EdgeProblem& problem, const PlanOptions& options = {});
// DeepZoning's cost of one merged zone (pieces first..last) on all devices: T(S) of its best AWP
// split, as the latency DP uses it (exposed for tests).
TANDEM_API double deepzoning_zone_s(const EdgeProblem& problem, int first, int last);

// The systems by name, for programs: "pico", "apico", "lw", "efl", "ofl", "pipeedge", "single",
// "deepzoning", "deepzoning-tp", "coedge".
TANDEM_API const std::vector<std::string>& system_names();
// Dispatches by name (InvalidArgument listing the names for an unknown one).
TANDEM_API EdgePlan plan_system(const std::string& system, const EdgeProblem& problem,
                                const PlanOptions& options = {});

// PICO's homogeneous DP alone (steps 1-2), exposed for tests: the stages (first, last, devices q)
// minimising the period with p = `devices` homogenised devices of capacity `capacity_flops`, and
// the DP's period and latency. Infeasible when nothing meets the cap.
struct HomogeneousStage {
  int first = 0, last = 0, q = 1;
};
struct HomogeneousPlan {
  std::vector<HomogeneousStage> stages{};
  double period_s = 0, latency_s = 0;
};
TANDEM_API HomogeneousPlan pico_dp(const EdgeProblem& problem, int devices, double capacity_flops,
                                   const PlanOptions& options = {});
// T(S) of a homogeneous stage (eq. 9 with q equal row bands; +∞ when the segment cannot be cut
// into q bands).
TANDEM_API double homogeneous_stage_s(const EdgeProblem& problem, int first, int last, int q,
                                      double capacity_flops);

}  // namespace tandem::cnn::edge
