// SPDX-License-Identifier: Apache-2.0
// Edge plans measured on the real engine: per-piece profiled cost tables for the planners, and the
// replay of a plan (every device's tile timed, then composed with the link model) that the
// predictions are checked against (spec cnn.md §2 cost model (b), §5 "how tandem measures").
//
// What:
//   TileBench           runs tiles of a chain's segments on this host with the engine the
//                       cnn.tiles stage uses (one thread, Winograd off) and times them (min of
//                       `repeats` after a warm-up). Inputs: the tensors of one whole-model run on
//                       a fixed pseudo-random image, so a tile reads real activations.
//   PieceProfile        per piece, host seconds at output fractions {1/8, 1/4, 1/2, 1} (rows at
//                       full width; one point, the whole map, for a piece that is not spatial).
//   ProfiledCostModel   an EdgeCostModel from a PieceProfile: a tile's host time is Σ over its
//                       pieces of the table interpolated at that piece's computed fraction
//                       (halo included), then carried to the device with core on_device_s()
//                       (host seconds / speed_factor). Fixed per-call costs are in the tables.
//   replay()            evaluate() with every share's compute timed by TileBench instead of
//                       predicted: the same composition (eq. 6-11, the shared medium), so
//                       replay vs prediction isolates the cost model's error, and a run on the
//                       pipeline runtime vs replay isolates the composition's (the simulator's).
//
//   cnn::edge::TileBench bench(chain);
//   cnn::edge::ProfiledCostModel cost(cnn::edge::profile_pieces(bench));
//   auto pb = cnn::edge::make_problem(chain, cluster, cost);
//   auto plan = cnn::edge::plan_system("pico", pb, {});        // predicted with the tables
//   cnn::edge::Metrics measured = cnn::edge::replay(plan, pb, bench);
//
// Channel shares (a range of the last piece's output channels) are timed as they run: run_region
// computes only those channels of the last piece (and what they need).
//
// Thread-safety: TileBench times one tile at a time (not thread-safe); cost models are immutable.
#pragma once

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "tandem/cnn/edge/plan.h"
#include "tandem/export.h"

namespace tandem::cnn::edge {

class TANDEM_API TileBench {
 public:
  // Runs the chain's graph once (one thread) to hold every tensor. `repeats` >= 1.
  explicit TileBench(const Chain& chain, int repeats = 3);
  ~TileBench();
  TileBench(const TileBench&) = delete;
  TileBench& operator=(const TileBench&) = delete;

  const Chain& chain() const { return *chain_; }
  // Host seconds of computing region `out` (channels [c0, c1) of the last piece when c1 > c0) of
  // pieces first..last from their whole input. Cached per (first, last, out, c0, c1).
  double host_s(int first, int last, const Region& out, int64_t c0 = 0, int64_t c1 = 0);

 private:
  double time_region(int first, int last, const Region& out, int64_t c0, int64_t c1);
  struct Impl;
  const Chain* chain_;
  int repeats_;
  std::unique_ptr<Impl> impl_;
  std::map<std::tuple<int, int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>, double>
      cache_;
};

struct PieceTimes {
  std::vector<double> fraction;  // ascending, last 1
  std::vector<double> host_s;
};
struct TANDEM_API PieceProfile {
  std::vector<PieceTimes> pieces;  // by piece index
  std::string host;                // the CPU it was measured on
  nlohmann::json to_json() const;
  // Throws InvalidArgument naming the field (or the piece) for a malformed profile, and when its
  // piece count differs from `pieces`.
  static PieceProfile from_json(const nlohmann::json& j, int pieces);
};

TANDEM_API PieceProfile profile_pieces(TileBench& bench);

class TANDEM_API ProfiledCostModel : public EdgeCostModel {
 public:
  ProfiledCostModel(const Chain& chain, PieceProfile profile);
  std::string name() const override { return "profiled (per-piece tables, this host)"; }
  double compute_s(const TileWork& work, const DeviceProfile& device) const override;
  double host_s(const TileWork& work) const;

 private:
  const Chain* chain_;
  PieceProfile profile_;
  std::vector<int> piece_of_node_;  // node id -> piece
};

// An EdgeCostModel whose compute_s times the tile with `bench` (host seconds carried to the device
// by core on_device_s): a problem with it evaluates, or simulates, measured compute.
class TANDEM_API TimedCostModel final : public EdgeCostModel {
 public:
  explicit TimedCostModel(TileBench& bench) : bench_(&bench) {}
  std::string name() const override { return "replay (tiles timed on this host)"; }
  double compute_s(const TileWork& work, const DeviceProfile& device) const override;
  const TileBench& bench() const { return *bench_; }

 private:
  TileBench* bench_;
};

// The metrics of `plan` with every share's compute measured by `bench` (whose chain must be the
// problem's); transfers from the problem's link model.
TANDEM_API Metrics replay(const EdgePlan& plan, const EdgeProblem& problem, TileBench& bench);

}  // namespace tandem::cnn::edge
