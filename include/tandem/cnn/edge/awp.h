// SPDX-License-Identifier: Apache-2.0
// AWP, DeepZoning's adaptive workload partition: the linear programs that split one (merged) zone's
// output among heterogeneous devices (spec cnn.md §3.3 step 2). DeepZoning's paper text is not
// public; this is the spec's reconstruction.
//
// What: every device d has a linear model of its time for a share s of the zone's output,
// t_d = slope_d·s + intercept_d (the intercept: the halo it recomputes, or in channel mode the
// layers it computes in full). The 1-D LP (spatial mode: s = rows/H; channel mode: s =
// channels/C) is
//     min T  s.t.  T >= slope_d·x_d + intercept_d  for every device with x_d > 0,  Σ x_d = 1,  x >=
//     0
// (a device with share 0 adds no intercept). The hybrid (grid) LP puts the devices in row groups
// g = 1..G: group g gets the row fraction r_g, and device d of group g the fraction z_d of the
// whole output (z_d = r_g × its channel fraction):
//     min T  s.t.  T >= row_slope_d·r_g + cell_slope_d·z_d + intercept_d,  Σ_{d in g} z_d = r_g,
//                  Σ_g r_g = 1,  r, z >= 0
// (row_slope: the layers it computes over the band's every channel; cell_slope: the channel-split
// layers).
//
// How: awp_water_fill() is the closed form of the 1-D LP (spec steps 1-5, O(n log n)): devices by
// intercept ascending, the first k active while the next intercept is below T_k =
// (1 + Σ c_d/A_d) / Σ 1/A_d. awp_lp_1d() and awp_lp_grid() solve the LPs with COIN-OR CLP (dual
// simplex); awp_lp_1d() solves one LP per prefix of the devices by intercept (the active set is
// such a prefix) and keeps the best, so it is the water-filling's independent check. The grid LP
// constrains every device it is given; the planner drops a device that ends with no share and
// solves again. round_shares() turns fractions into integer rows or channels by largest remainder.
//
//   std::vector<cnn::edge::AwpDevice> d = {{"a", 2.0, 0.1}, {"b", 4.0, 0.05}};
//   cnn::edge::AwpSplit s = cnn::edge::awp_water_fill(d);   // s.share = {2/3, 1/3}-ish, s.time_s
//   std::vector<int64_t> rows = cnn::edge::round_shares(s.share, 56);
//
// Errors: Infeasible naming the device for a slope that is not positive and finite (it cannot meet
// any budget), and naming the devices when the optimum is over `budget_s` (each device whose
// intercept alone is over the budget is named as such). Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "tandem/export.h"

namespace tandem::cnn::edge {

struct AwpDevice {
  std::string name;
  double slope_s = 0;      // seconds for the whole output (share 1)
  double intercept_s = 0;  // seconds it pays once it has any share
};

struct AwpSplit {
  double time_s = 0;            // T: the slowest active device
  std::vector<double> share{};  // per device, in the order given; Σ = 1
};

TANDEM_API AwpSplit awp_water_fill(const std::vector<AwpDevice>& devices,
                                   double budget_s = std::numeric_limits<double>::infinity());
TANDEM_API AwpSplit awp_lp_1d(const std::vector<AwpDevice>& devices,
                              double budget_s = std::numeric_limits<double>::infinity());

struct AwpGridDevice {
  std::string name;
  int group = 0;            // row group, 0..groups-1
  double row_slope_s = 0;   // seconds for the whole map's rows of the unsplit layers
  double cell_slope_s = 0;  // seconds for the whole output of the channel-split layers
  double intercept_s = 0;
};

struct AwpGridSplit {
  double time_s = 0;
  std::vector<double> rows{};   // r_g per group; Σ = 1
  std::vector<double> cells{};  // z_d per device; Σ over a group = its r_g
};

// Every group needs at least one device (InvalidArgument naming the group otherwise).
TANDEM_API AwpGridSplit awp_lp_grid(int groups, const std::vector<AwpGridDevice>& devices,
                                    double budget_s = std::numeric_limits<double>::infinity());

// `total` units (rows, channels) split by the fractions `share` (Σ = 1): floor each, then the
// remaining units to the largest remainders (ties: the earlier device). Σ = total exactly.
TANDEM_API std::vector<int64_t> round_shares(const std::vector<double>& share, int64_t total);

}  // namespace tandem::cnn::edge
