// SPDX-License-Identifier: Apache-2.0
// AWP's linear programs: water-filling, and the 1-D and grid LPs on COIN-OR CLP
// (tandem/cnn/edge/awp.h).
#include "tandem/cnn/edge/awp.h"

#include <ClpSimplex.hpp>
#include <CoinPackedMatrix.hpp>
#include <algorithm>
#include <cmath>
#include <numeric>

#include "cnn/edge/inf.h"
#include "tandem/core/error.h"

namespace tandem::cnn::edge {

namespace {

void check_slope(const std::string& name, double slope) {
  if (!(slope > 0) || !std::isfinite(slope))
    throw Infeasible(cat("AWP: device '", name, "' cannot meet any budget: its time for the whole ",
                         "output is ", slope, " s (must be positive and finite)"));
}

void check_intercept(const std::string& name, double intercept) {
  if (!(intercept >= 0) || !std::isfinite(intercept))
    throw Infeasible(
        cat("AWP: device '", name, "' has intercept ", intercept, " s (must be >= 0 and finite)"));
}

// Infeasible when the optimum `t` is over the budget: the devices at the optimum, and those whose
// intercept alone is over it.
void check_budget(double t, double budget, const std::vector<std::string>& names,
                  const std::vector<double>& times, const std::vector<double>& intercepts) {
  if (t <= budget * (1 + 1e-12)) return;
  std::string at, over;
  for (size_t d = 0; d < names.size(); ++d) {
    if (times[d] >= t * (1 - 1e-9)) at += cat(at.empty() ? "" : ", ", "'", names[d], "'");
    if (intercepts[d] >= budget)
      over += cat(over.empty() ? "" : ", ", "'", names[d], "' (", intercepts[d], " s)");
  }
  throw Infeasible(
      cat("AWP: no split meets the budget of ", budget, " s: the best takes ", t,
          " s, set by device(s) ", at,
          over.empty() ? std::string() : cat("; slower than the whole budget: ", over)));
}

// The devices by intercept ascending (ties: smaller slope first; stable).
std::vector<size_t> by_intercept(const std::vector<AwpDevice>& d) {
  std::vector<size_t> order(d.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return d[a].intercept_s < d[b].intercept_s ||
           (d[a].intercept_s == d[b].intercept_s && d[a].slope_s < d[b].slope_s);
  });
  return order;
}

void check_devices(const std::vector<AwpDevice>& devices) {
  if (devices.empty()) throw InvalidArgument("AWP: no devices");
  for (const AwpDevice& d : devices) {
    check_slope(d.name, d.slope_s);
    check_intercept(d.name, d.intercept_s);
  }
}

void finish_1d(const std::vector<AwpDevice>& devices, const AwpSplit& s, double budget) {
  std::vector<std::string> names;
  std::vector<double> times, intercepts;
  for (size_t d = 0; d < devices.size(); ++d) {
    names.push_back(devices[d].name);
    times.push_back(s.share[d] > 0 ? devices[d].slope_s * s.share[d] + devices[d].intercept_s : 0);
    intercepts.push_back(devices[d].intercept_s);
  }
  check_budget(s.time_s, budget, names, times, intercepts);
}

// A sparse LP for CLP: columns with bounds and costs, rows with bounds, coefficients by triplet.
struct Lp {
  std::vector<double> col_lo, col_hi, cost, row_lo, row_hi;
  std::vector<int> rows, cols;
  std::vector<double> values;

  int column(double lo, double hi, double c) {
    col_lo.push_back(lo);
    col_hi.push_back(hi);
    cost.push_back(c);
    return static_cast<int>(cost.size()) - 1;
  }
  int row(double lo, double hi) {
    row_lo.push_back(lo);
    row_hi.push_back(hi);
    return static_cast<int>(row_lo.size()) - 1;
  }
  void set(int r, int c, double v) {
    rows.push_back(r);
    cols.push_back(c);
    values.push_back(v);
  }
  // Solves min cost·x; the column values. Infeasible with `what` when CLP finds no optimum.
  std::vector<double> solve(const std::string& what) const {
    const CoinPackedMatrix m(false, rows.data(), cols.data(), values.data(),
                             static_cast<CoinBigIndex>(values.size()));
    ClpSimplex clp;
    clp.setLogLevel(0);
    clp.loadProblem(m, col_lo.data(), col_hi.data(), cost.data(), row_lo.data(), row_hi.data());
    clp.dual();
    if (!clp.isProvenOptimal())
      throw Infeasible(cat("AWP: CLP found no optimum for ", what, " (status ", clp.status(), ")"));
    const double* x = clp.getColSolution();
    return std::vector<double>(x, x + clp.getNumCols());
  }
};

}  // namespace

AwpSplit awp_water_fill(const std::vector<AwpDevice>& devices, double budget) {
  check_devices(devices);
  const std::vector<size_t> order = by_intercept(devices);
  // Steps 3-4: T_k over the first k devices; grow k while the next intercept is below T_k.
  double inv = 0, ratio = 0, t = kInf;
  size_t k = 0;
  while (k < order.size()) {
    const AwpDevice& d = devices[order[k]];
    if (k > 0 && d.intercept_s >= t) break;
    inv += 1 / d.slope_s;
    ratio += d.intercept_s / d.slope_s;
    t = (1 + ratio) / inv;
    ++k;
  }
  AwpSplit s{.time_s = t, .share = std::vector<double>(devices.size(), 0.0)};
  for (size_t i = 0; i < k; ++i) {  // step 5
    const AwpDevice& d = devices[order[i]];
    s.share[order[i]] = std::max(0.0, (t - d.intercept_s) / d.slope_s);
  }
  finish_1d(devices, s, budget);
  return s;
}

AwpSplit awp_lp_1d(const std::vector<AwpDevice>& devices, double budget) {
  check_devices(devices);
  const std::vector<size_t> order = by_intercept(devices);
  AwpSplit best{.time_s = kInf};
  for (size_t k = 1; k <= order.size(); ++k) {
    // min T  s.t.  T - slope_d·x_d >= intercept_d (d in the first k),  Σ x_d = 1.
    Lp lp;
    const int t = lp.column(0, kInf, 1);
    const int sum = lp.row(1, 1);
    std::vector<int> x;
    for (size_t i = 0; i < k; ++i) {
      const AwpDevice& d = devices[order[i]];
      x.push_back(lp.column(0, 1, 0));
      const int r = lp.row(d.intercept_s, kInf);
      lp.set(r, t, 1);
      lp.set(r, x.back(), -d.slope_s);
      lp.set(sum, x.back(), 1);
    }
    const std::vector<double> v = lp.solve(cat("the 1-D split over ", k, " device(s)"));
    if (v[static_cast<size_t>(t)] < best.time_s) {
      best.time_s = v[static_cast<size_t>(t)];
      best.share.assign(devices.size(), 0.0);
      for (size_t i = 0; i < k; ++i)
        best.share[order[i]] = std::max(0.0, v[static_cast<size_t>(x[i])]);
    }
  }
  finish_1d(devices, best, budget);
  return best;
}

AwpGridSplit awp_lp_grid(int groups, const std::vector<AwpGridDevice>& devices, double budget) {
  if (groups < 1) throw InvalidArgument(cat("AWP grid: ", groups, " row groups"));
  std::vector<int> members(static_cast<size_t>(groups), 0);
  for (const AwpGridDevice& d : devices) {
    if (d.group < 0 || d.group >= groups)
      throw InvalidArgument(
          cat("AWP grid: device '", d.name, "' in row group ", d.group, " of ", groups));
    if (!(d.row_slope_s >= 0) || !std::isfinite(d.row_slope_s))
      throw Infeasible(cat("AWP: device '", d.name, "' has row slope ", d.row_slope_s, " s"));
    check_slope(d.name, d.cell_slope_s);
    check_intercept(d.name, d.intercept_s);
    ++members[static_cast<size_t>(d.group)];
  }
  for (int g = 0; g < groups; ++g)
    if (members[static_cast<size_t>(g)] == 0)
      throw InvalidArgument(cat("AWP grid: row group ", g, " has no device"));
  // Columns: T, r_g, z_d. Rows: T - row_slope_d·r_g - cell_slope_d·z_d >= intercept_d;
  // Σ_{d in g} z_d - r_g = 0; Σ r_g = 1.
  Lp lp;
  const int t = lp.column(0, kInf, 1);
  std::vector<int> r, z, group_row;
  const int sum = lp.row(1, 1);
  for (int g = 0; g < groups; ++g) {
    r.push_back(lp.column(0, 1, 0));
    lp.set(sum, r.back(), 1);
    group_row.push_back(lp.row(0, 0));
    lp.set(group_row.back(), r.back(), -1);
  }
  for (const AwpGridDevice& d : devices) {
    z.push_back(lp.column(0, 1, 0));
    const int row = lp.row(d.intercept_s, kInf);
    lp.set(row, t, 1);
    if (d.row_slope_s > 0) lp.set(row, r[static_cast<size_t>(d.group)], -d.row_slope_s);
    lp.set(row, z.back(), -d.cell_slope_s);
    lp.set(group_row[static_cast<size_t>(d.group)], z.back(), 1);
  }
  const std::vector<double> v = lp.solve(cat("the ", groups, "-group grid split"));
  AwpGridSplit s{.time_s = v[static_cast<size_t>(t)]};
  for (int c : r) s.rows.push_back(std::max(0.0, v[static_cast<size_t>(c)]));
  for (int c : z) s.cells.push_back(std::max(0.0, v[static_cast<size_t>(c)]));
  std::vector<std::string> names;
  std::vector<double> times, intercepts;
  for (size_t d = 0; d < devices.size(); ++d) {
    const AwpGridDevice& g = devices[d];
    names.push_back(g.name);
    times.push_back(g.row_slope_s * s.rows[static_cast<size_t>(g.group)] +
                    g.cell_slope_s * s.cells[d] + g.intercept_s);
    intercepts.push_back(g.intercept_s);
  }
  check_budget(s.time_s, budget, names, times, intercepts);
  return s;
}

std::vector<int64_t> round_shares(const std::vector<double>& share, int64_t total) {
  std::vector<int64_t> part(share.size(), 0);
  std::vector<std::pair<double, size_t>> rest;
  int64_t given = 0;
  for (size_t k = 0; k < share.size(); ++k) {
    const double exact = std::max(0.0, share[k]) * static_cast<double>(total);
    part[k] = std::min<int64_t>(total - given, static_cast<int64_t>(std::floor(exact + 1e-9)));
    given += part[k];
    rest.emplace_back(exact - static_cast<double>(part[k]), k);
  }
  std::stable_sort(rest.begin(), rest.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t i = 0; given < total && !rest.empty(); ++i, ++given)
    ++part[rest[i % rest.size()].second];
  return part;
}

}  // namespace tandem::cnn::edge
