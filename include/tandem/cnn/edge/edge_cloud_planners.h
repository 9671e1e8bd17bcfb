// SPDX-License-Identifier: Apache-2.0
// Edge-cloud planners: DECC (TETC 2025) and the baselines it is compared with, Neurosurgeon
// (ASPLOS 2017), DADS-DSL and DADS-DSH (INFOCOM 2019), edge-only and cloud-only (spec cnn.md
// §3.4, §4). All plan one EdgeCloudProblem (edge_cloud.h) and are predicted by its one evaluate().
// They have their own dispatcher, plan_edge_cloud(), beside plan_system() (planners.h): the plan
// type differs (node sets on two sides, not stages of pieces on a device cluster).
//
//   neurosurgeon  one split point k over the graph's topological order: nodes < k on the edge,
//                 every tensor crossing the cut uploaded once; the k with the least
//                 T_e + T_t + T_c (its objective); O(L) evaluations.
//   dads-dsl      the minimum e-c cut of the DADS graph, solved with Boost.Graph's
//                 boykov_kolmogorov_max_flow: e -> v costs v's cloud time, v -> c its edge time,
//                 a tensor read by one node is an arc producer -> consumer costing its upload, a
//                 tensor read by several goes through an auxiliary vertex (producer -> aux costs
//                 the upload, aux -> consumers infinite) so it is paid once; the input is a dummy
//                 vertex pinned to e. Added (the paper leaves it implicit): an infinite arc
//                 consumer -> producer for every data edge, so the edge side is closed under
//                 predecessors (data only flows edge -> cloud). The cut equals T_e + T_t + T_c.
//   dads-dsh      the heavy-load mode: min max{T_e, T_t, T_c} by scaling the edge, link and cloud
//                 arcs by (alpha, 1, gamma), running DSL and keeping the cut with the least max;
//                 (alpha, gamma) on a coarse log2 grid (2^-6..2^6) then two finer grids around
//                 the best.
//   dads          DADS as the paper runs it: DSH below kDadsSwitchBitsPerS (1.51 Mbps), else DSL.
//   edge-only, cloud-only: every node on one side (cloud-only uploads the input).
//   decc          (DECC's paper text is not public: this is the spec's reconstruction, §3.4.)
//                 Zones are the pieces of linearise() (chain.h); a zone's branches are the
//                 connected parts of its nodes without the join (the node making its output when
//                 it reads several tensors; a chain zone is one branch, no join). For transition
//                 zone z: zones before z on the edge, zones after z and z's join on the cloud,
//                 branch b split at s_b (its first s_b nodes in graph order on the edge). Branches
//                 are jobs of a three-machine flow shop (edge compute -> FIFO uplink -> cloud):
//                 e_b, u_b (the uploads of every tensor the prefix hands to the cloud), c_b;
//                 branches with s_b = 0 share one job that uploads the zone input, first. The
//                 order: exhaustive over permutations for <= 5 jobs, else Johnson's rule on
//                 (e_b, u_b). s: iterated best response per branch, seeded with the DSL cut, the
//                 Neurosurgeon cut (each restricted to z: per branch the longest prefix inside the
//                 cut) and with every s_b = 0. The best (z, s, order) over all z (and edge-only)
//                 becomes the plan. Departures: the third seed (all zero); the predicted delay of
//                 every candidate is the flow-shop recurrence, the returned plan's is evaluate()'s
//                 (equal on chain branches; lower when a branch's tensor is produced before its
//                 prefix ends); and DECC returns the best baseline plan when that one predicts a
//                 lower delay (a DSL cut spanning several zones, say): notes.from names it, so
//                 DECC is never worse than the best baseline by construction.
//
// Every planner measures its planner time (metrics.planner_s) and returns an evaluated plan.
// Thread-safety: pure functions of their arguments.
#pragma once

#include <string>
#include <vector>

#include "tandem/cnn/edge/edge_cloud.h"
#include "tandem/export.h"

namespace tandem::cnn::edge {

// DADS's switch to the heavy-load mode in its paper's setup: 1.51 Mbit/s.
inline constexpr double kDadsSwitchBitsPerS = 1.51e6;

TANDEM_API EdgeCloudPlan plan_neurosurgeon(const EdgeCloudProblem& problem);
TANDEM_API EdgeCloudPlan plan_dads_dsl(const EdgeCloudProblem& problem);
TANDEM_API EdgeCloudPlan plan_dads_dsh(const EdgeCloudProblem& problem);
TANDEM_API EdgeCloudPlan plan_dads(const EdgeCloudProblem& problem);
TANDEM_API EdgeCloudPlan plan_edge_only(const EdgeCloudProblem& problem);
TANDEM_API EdgeCloudPlan plan_cloud_only(const EdgeCloudProblem& problem);
TANDEM_API EdgeCloudPlan plan_decc(const EdgeCloudProblem& problem);

// "decc", "neurosurgeon", "dads", "dads-dsl", "dads-dsh", "edge-only", "cloud-only".
TANDEM_API const std::vector<std::string>& edge_cloud_system_names();
// Dispatches by name (InvalidArgument listing the names for an unknown one).
TANDEM_API EdgeCloudPlan plan_edge_cloud(const std::string& system,
                                         const EdgeCloudProblem& problem);

// DSL's minimum cut with the edge, link and cloud arcs scaled by (alpha, 1, gamma): per node
// whether it is on the edge, and the cut's value (alpha·T_e + T_t + gamma·T_c). Exposed for tests.
struct MinCut {
  std::vector<bool> on_edge{};
  double value_s = 0;
};
TANDEM_API MinCut dads_min_cut(const EdgeCloudProblem& problem, double alpha = 1, double gamma = 1);

// The three-machine flow shop of DECC (spec §3.4 step 3). A job: edge, upload, cloud seconds.
struct FlowJob {
  double e = 0, u = 0, c = 0;
};
// C_m of the jobs in `order` after an edge prefix of e0 seconds (U_0 = C_0 = E_0 = e0).
TANDEM_API double flow_shop_makespan(const std::vector<FlowJob>& jobs,
                                     const std::vector<int>& order, double e0 = 0);
// Johnson's rule on (e, u): jobs with e <= u by ascending e, then the others by descending u.
TANDEM_API std::vector<int> johnson_order(const std::vector<FlowJob>& jobs);
// The order DECC uses: every permutation when there are <= 5 jobs to order, else Johnson's; with
// `first_fixed` job 0 stays first (the shared upload of a zone's input) and the rest are ordered.
TANDEM_API std::vector<int> decc_order(const std::vector<FlowJob>& jobs, double e0 = 0,
                                       bool first_fixed = false);

// One DECC candidate: transition zone (a piece of linearise()), a split per branch, the edge
// order of its branches and the predicted delay of the flow-shop recurrence with that order
// (job edge time, upload, cloud time per branch; zones before z add to E_0, the join and the
// zones after z to the end). decc_candidate() orders and prices it, decc_plan() builds (and
// evaluates) its plan. Exposed for tests.
struct DeccSplit {
  int zone = 0;
  std::vector<int> split{};  // s_b per branch of the zone (branches as decc_branches lists them)
  std::vector<int> order{};  // branches with s_b > 0 in edge order (after the shared input upload)
  double flow_shop_s = 0;    // the recurrence's end-to-end delay
};
// The branches of zone `zone`: node ids, graph order (decc_branches(...).size() == split.size()).
TANDEM_API std::vector<std::vector<int>> decc_branches(const EdgeCloudProblem& problem, int zone);
TANDEM_API DeccSplit decc_candidate(const EdgeCloudProblem& problem, int zone,
                                    const std::vector<int>& split);
TANDEM_API EdgeCloudPlan decc_plan(const EdgeCloudProblem& problem, const DeccSplit& split);

}  // namespace tandem::cnn::edge
