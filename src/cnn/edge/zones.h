// SPDX-License-Identifier: Apache-2.0
// One (merged) zone split among devices by AWP (awp.h): the three modes of spec cnn.md §3.3 step 2
// turned into a stage of integer rows and channels, each timed exactly as evaluate() times it
// (internal to src/cnn/edge; DeepZoning and the CoEdge baseline use it).
//
// For pieces first..last and a device group, ZoneSplitter builds each mode's linear models from
// the chain's exact tile work at two points (the whole output and one device's worth: slope and
// intercept), solves the LP (water-filling for spatial and channel, CLP for the grid), rounds the
// shares to rows/channels by largest remainder and times each candidate exactly; the one-device
// stage is always a candidate. refine() makes greedy ±1 moves of one row or channel boundary while
// the exact T(S) drops, on every split within 25% of the best, and the best refined split wins.
//
// Transfers are charged as evaluate() charges them (eq. 7-8: every share's input and output
// through the stage's master over the one shared medium, summed), so the spec's per-device
// transfer term sits in the objective instead: with equal slopes per byte its share-proportional
// part is a constant, and what a device adds when it takes a share (two link latencies, its halo
// rows in spatial mode, the whole input in channel mode) decides how many devices the split uses
// (the water-filling's prefix with the least T + Σ of those). That is where channel mode pays for
// sending the input to every device, and a rows -> channels change of layout between two zones is
// an all-gather through the master.
#pragma once

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "tandem/cnn/edge/plan.h"

namespace tandem::cnn::edge::detail {

enum class ZoneMode { kOne, kSpatial, kChannel, kHybrid };
const char* mode_name(ZoneMode m);
// The mode a stage's shares are in (one device, rows, channels, or both).
ZoneMode stage_mode(const Stage& s, const EdgeProblem& pb);

struct ZoneSplit {
  Stage stage;
  double time_s = 0;  // T(S), as stage_cost() predicts it
  ZoneMode mode = ZoneMode::kOne;
  double flops = 0;  // Σ over the shares (halo and replicated layers included)
};

class ZoneSplitter {
 public:
  // `pb` must outlive the splitter. spatial_only: CoEdge (rows, or one device).
  explicit ZoneSplitter(const EdgeProblem& pb, bool spatial_only = false)
      : pb_(&pb), spatial_only_(spatial_only) {}
  // The cheapest mode for pieces first..last on `devices` (indices into pb.devices), refined by
  // ±1 moves when `refine`.
  ZoneSplit best(int first, int last, const std::vector<int>& devices, bool refine = true);

  // Rows and channels of one stage: row bands rows[g]..rows[g+1], and within band g the channel
  // bounds chans[g] over devs[g] (one device and no bounds: all channels).
  struct Layout {
    ZoneMode mode = ZoneMode::kOne;
    std::vector<int64_t> rows{};
    std::vector<std::vector<int64_t>> chans{};
    std::vector<std::vector<int>> devs{};
  };

 private:
  using Key = std::tuple<int, int, int64_t, int64_t, int64_t, int64_t>;
  const TileWork& work(int first, int last, int64_t h0, int64_t h1, int64_t c0, int64_t c1);
  double time(int first, int last, const Layout& l);
  Stage stage(int first, int last, const Layout& l) const;
  Layout spatial(int first, int last, const std::vector<int>& devices);
  Layout channel(int first, int last, const std::vector<int>& devices);
  Layout hybrid(int first, int last, const std::vector<int>& devices, int groups, int per_group);
  Layout refine(int first, int last, Layout l);

  const EdgeProblem* pb_;
  bool spatial_only_;
  std::map<Key, TileWork> works_;  // (first, last, h0, h1, c0, c1) -> tile work (c1 = 0: all)
};

}  // namespace tandem::cnn::edge::detail
