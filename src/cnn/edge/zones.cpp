// SPDX-License-Identifier: Apache-2.0
// AWP per zone: linear models from the chain, the LPs, integer rows and channels, ±1 refinement
// (zones.h).
#include "cnn/edge/zones.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>

#include "cnn/edge/inf.h"
#include "tandem/cnn/edge/awp.h"
#include "tandem/core/error.h"

namespace tandem::cnn::edge::detail {

namespace {

// Slope and intercept of a line through (x0, t0) and (1, t1); the intercept is clamped at 0.
std::pair<double, double> line(double x0, double t0, double t1) {
  const double slope = x0 < 1 ? (t1 - t0) / (1 - x0) : t1;
  return {slope, std::max(0.0, t1 - slope)};
}

// Bounds from integer parts (zero parts kept; callers drop the empty shares).
std::vector<int64_t> bounds(const std::vector<int64_t>& parts) {
  std::vector<int64_t> b{0};
  for (int64_t p : parts) b.push_back(b.back() + p);
  return b;
}

// The prefix (by the water-filling's order) of `models` whose split costs least once every
// active device's fixed transfer cost `active` is added; its shares.
std::vector<double> best_prefix(const std::vector<AwpDevice>& models,
                                const std::vector<double>& active, size_t max_devices) {
  std::vector<size_t> order(models.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return models[a].intercept_s < models[b].intercept_s;
  });
  double best = kInf;
  std::vector<double> share;
  for (size_t k = 1; k <= std::min(max_devices, order.size()); ++k) {
    std::vector<AwpDevice> sub;
    for (size_t i = 0; i < k; ++i) sub.push_back(models[order[i]]);
    const AwpSplit s = awp_water_fill(sub);
    double cost = s.time_s;
    for (size_t i = 0; i < k; ++i)
      if (s.share[i] > 0) cost += active[order[i]];
    if (cost < best) {
      best = cost;
      share.assign(models.size(), 0.0);
      for (size_t i = 0; i < k; ++i) share[order[i]] = s.share[i];
    }
  }
  return share;
}

}  // namespace

const char* mode_name(ZoneMode m) {
  switch (m) {
    case ZoneMode::kOne:
      return "one device";
    case ZoneMode::kSpatial:
      return "spatial";
    case ZoneMode::kChannel:
      return "channel";
    case ZoneMode::kHybrid:
      return "hybrid";
  }
  return "?";
}

ZoneMode stage_mode(const Stage& s, const EdgeProblem& pb) {
  if (s.shares.size() <= 1) return ZoneMode::kOne;
  bool rows = false, chans = false;
  const Region full = pb.chain->out_region(s.last);
  for (const DeviceShare& sh : s.shares) {
    chans = chans || sh.channels();
    rows = rows || (!sh.out.empty() && !(sh.out == full));
  }
  return rows && chans ? ZoneMode::kHybrid : chans ? ZoneMode::kChannel : ZoneMode::kSpatial;
}

const TileWork& ZoneSplitter::work(int first, int last, int64_t h0, int64_t h1, int64_t c0,
                                   int64_t c1) {
  if (c0 == 0 && c1 >= pb_->chain->out_channels(last)) c1 = 0;  // every channel: no range
  const Key key{first, last, h0, h1, c0, c1};
  auto it = works_.find(key);
  if (it != works_.end()) return it->second;
  const Region full = pb_->chain->out_region(last);
  const bool rows = pb_->chain->piece(last).out_shape.rank() == 4;
  const Region r = rows ? Region{h0, h1, full.w0, full.w1} : full;
  return works_[key] = pb_->chain->tile_work(first, last, r, c0, c1);
}

Stage ZoneSplitter::stage(int first, int last, const Layout& l) const {
  Stage s{.first = first, .last = last};
  const Region full = pb_->chain->out_region(last);
  const bool rows = pb_->chain->piece(last).out_shape.rank() == 4;
  for (size_t g = 0; g < l.devs.size(); ++g) {
    if (l.rows[g + 1] <= l.rows[g]) continue;
    // A dense piece's feature shares have no rows (as LW writes them).
    const Region band = rows                 ? Region{l.rows[g], l.rows[g + 1], full.w0, full.w1}
                        : l.chans[g].empty() ? full
                                             : Region{};
    for (size_t m = 0; m < l.devs[g].size(); ++m) {
      DeviceShare sh{.device = pb_->devices[static_cast<size_t>(l.devs[g][m])].name, .out = band};
      if (!l.chans[g].empty()) {
        if (l.chans[g][m + 1] <= l.chans[g][m]) continue;
        sh.c0 = l.chans[g][m];
        sh.c1 = l.chans[g][m + 1];
        if (sh.c0 == 0 && sh.c1 >= pb_->chain->out_channels(last)) sh.c1 = 0;  // every channel
        if (sh.c1 == 0 && band.empty()) sh.out = full;
      }
      s.shares.push_back(sh);
    }
  }
  return s;
}

double ZoneSplitter::time(int first, int last, const Layout& l) {
  std::vector<double> busy(pb_->devices.size(), 0.0);
  double comm = 0;
  for (size_t g = 0; g < l.devs.size(); ++g) {
    if (l.rows[g + 1] <= l.rows[g]) continue;
    for (size_t m = 0; m < l.devs[g].size(); ++m) {
      int64_t c0 = 0, c1 = 0;
      if (!l.chans[g].empty()) {
        c0 = l.chans[g][m];
        c1 = l.chans[g][m + 1];
        if (c1 <= c0) continue;
      }
      const TileWork& w = work(first, last, l.rows[g], l.rows[g + 1], c0, c1);
      const auto d = static_cast<size_t>(l.devs[g][m]);
      busy[d] += pb_->cost->compute_s(w, pb_->devices[d]);
      comm += pb_->transfer_s(w.in_bytes) + pb_->transfer_s(w.out_bytes);
    }
  }
  return *std::max_element(busy.begin(), busy.end()) + comm;
}

ZoneSplitter::Layout ZoneSplitter::spatial(int first, int last, const std::vector<int>& devices) {
  const int64_t h = pb_->chain->out_region(last).h1;
  const int64_t r0 = std::max<int64_t>(1, h / static_cast<int64_t>(devices.size()));
  const double x0 = static_cast<double>(r0) / static_cast<double>(h);
  const TileWork& whole = work(first, last, 0, h, 0, 0);
  const TileWork& band = work(first, last, (h - r0) / 2, (h - r0) / 2 + r0, 0, 0);
  // Halo: what an interior band computes and receives beyond its rows' share of the whole.
  const double halo_in = std::max(0.0, band.in_bytes - x0 * whole.in_bytes);
  std::vector<AwpDevice> models;
  std::vector<double> active;
  for (int d : devices) {
    const DeviceProfile& dev = pb_->devices[static_cast<size_t>(d)];
    const double t1 = pb_->cost->compute_s(whole, dev), t0 = pb_->cost->compute_s(band, dev);
    if (!(t1 > 0)) return {};  // no compute to split (a pool counts 0 FLOPs)
    models.push_back({dev.name, t1, std::max(0.0, t0 - x0 * t1)});
    active.push_back(2 * pb_->medium.latency_s + halo_in / pb_->medium.bandwidth_bytes_per_s);
  }
  const std::vector<double> x = best_prefix(models, active, static_cast<size_t>(h));
  // Bands in the water-filling's order (intercept ascending), devices without a share left out.
  std::vector<size_t> order(devices.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return models[a].intercept_s < models[b].intercept_s;
  });
  std::vector<double> share;
  Layout l{.mode = ZoneMode::kSpatial};
  for (size_t i : order)
    if (x[i] > 0) {
      share.push_back(x[i]);
      l.devs.push_back({devices[i]});
      l.chans.emplace_back();
    }
  l.rows = bounds(round_shares(share, h));
  return l;
}

ZoneSplitter::Layout ZoneSplitter::channel(int first, int last, const std::vector<int>& devices) {
  const Chain& c = *pb_->chain;
  const int64_t h = c.piece(last).out_shape.rank() == 4 ? c.out_region(last).h1 : 1;
  const int64_t ch = c.out_channels(last);
  const int64_t c0 = std::max<int64_t>(1, ch / static_cast<int64_t>(devices.size()));
  const double y0 = static_cast<double>(c0) / static_cast<double>(ch);
  const TileWork& whole = work(first, last, 0, h, 0, 0);
  const TileWork& part = work(first, last, 0, h, 0, c0);
  const auto [in_slope, in_fixed] = line(y0, part.in_bytes, whole.in_bytes);
  std::vector<AwpDevice> models;
  std::vector<double> active;
  for (int d : devices) {
    const DeviceProfile& dev = pb_->devices[static_cast<size_t>(d)];
    const auto [slope, fixed] =
        line(y0, pb_->cost->compute_s(part, dev), pb_->cost->compute_s(whole, dev));
    if (!(slope > 0)) return {};  // nothing in the zone splits by channel
    models.push_back({dev.name, slope, fixed});
    active.push_back(2 * pb_->medium.latency_s + in_fixed / pb_->medium.bandwidth_bytes_per_s);
  }
  const std::vector<double> y = best_prefix(models, active, static_cast<size_t>(ch));
  Layout l{.mode = ZoneMode::kChannel, .rows = {0, h}};
  std::vector<double> share;
  l.devs.emplace_back();
  for (size_t i = 0; i < devices.size(); ++i)
    if (y[i] > 0) {
      share.push_back(y[i]);
      l.devs[0].push_back(devices[i]);
    }
  l.chans.push_back(bounds(round_shares(share, ch)));
  return l;
}

ZoneSplitter::Layout ZoneSplitter::hybrid(int first, int last, const std::vector<int>& devices,
                                          int groups, int per_group) {
  const Chain& c = *pb_->chain;
  const int64_t h = c.out_region(last).h1, ch = c.out_channels(last);
  const int64_t r0 = std::max<int64_t>(1, h / groups), c0 = std::max<int64_t>(1, ch / per_group);
  const double x0 = static_cast<double>(r0) / static_cast<double>(h);
  const double y0 = static_cast<double>(c0) / static_cast<double>(ch);
  const TileWork& whole = work(first, last, 0, h, 0, 0);
  const TileWork& band = work(first, last, (h - r0) / 2, (h - r0) / 2 + r0, 0, 0);
  const TileWork& part = work(first, last, 0, h, 0, c0);
  // The fastest groups x per_group devices dealt to the row groups in snake order.
  std::vector<AwpGridDevice> models;
  std::vector<int> chosen;
  for (int i = 0; i < groups * per_group; ++i) {
    const int round = i / groups, pos = i % groups;
    const int g = round % 2 == 0 ? pos : groups - 1 - pos;
    const DeviceProfile& dev = pb_->devices[static_cast<size_t>(devices[static_cast<size_t>(i)])];
    const double t1 = pb_->cost->compute_s(whole, dev);
    const auto [cell, rows] = line(y0, pb_->cost->compute_s(part, dev), t1);
    if (!(cell > 0)) return {};
    const double halo = std::max(0.0, pb_->cost->compute_s(band, dev) - x0 * t1);
    models.push_back({dev.name, g, rows, cell, halo});
    chosen.push_back(devices[static_cast<size_t>(i)]);
  }
  AwpGridSplit s = awp_lp_grid(groups, models);
  // A device left with no share must not keep its intercept in the LP: drop it (its band keeps
  // another device) and solve again.
  for (bool dropped = true; dropped;) {
    dropped = false;
    for (size_t i = 0; i < models.size(); ++i) {
      if (s.cells[i] > 1e-12) continue;
      bool other = false;
      for (size_t k = 0; k < models.size(); ++k)
        other = other || (k != i && models[k].group == models[i].group && s.cells[k] > 1e-12);
      if (!other) continue;
      models.erase(models.begin() + static_cast<long>(i));
      chosen.erase(chosen.begin() + static_cast<long>(i));
      s = awp_lp_grid(groups, models);
      dropped = true;
      break;
    }
  }
  Layout l{.mode = ZoneMode::kHybrid, .rows = bounds(round_shares(s.rows, h))};
  for (int g = 0; g < groups; ++g) {
    std::vector<int> devs;
    std::vector<double> share;
    for (size_t i = 0; i < models.size(); ++i)
      if (models[i].group == g && s.cells[i] > 0) {
        devs.push_back(chosen[i]);
        share.push_back(s.cells[i]);
      }
    if (devs.empty()) {  // a band of no rows: its devices idle (stage() skips it)
      for (size_t i = 0; i < models.size() && devs.empty(); ++i)
        if (models[i].group == g) devs.push_back(chosen[i]);
      share.push_back(1);
    }
    const double sum = std::accumulate(share.begin(), share.end(), 0.0);
    for (double& v : share) v /= sum;
    l.devs.push_back(devs);
    l.chans.push_back(bounds(round_shares(share, ch)));
  }
  return l;
}

ZoneSplitter::Layout ZoneSplitter::refine(int first, int last, Layout l) {
  double t = time(first, last, l);
  // Every boundary between two non-empty parts, moved by one either way.
  auto moves = [](std::vector<int64_t>& b, const std::function<void(size_t, int)>& f) {
    for (size_t k = 1; k + 1 < b.size(); ++k)
      for (int step : {-1, 1}) {
        const int64_t v = b[k] + step;
        if (v <= b[k - 1] || v >= b[k + 1]) continue;
        f(k, step);
      }
  };
  for (int round = 0; round < 256; ++round) {
    Layout best = l;
    double best_t = t;
    auto consider = [&](const Layout& cand) {
      const double ct = time(first, last, cand);
      if (ct < best_t * (1 - 1e-12)) {
        best_t = ct;
        best = cand;
      }
    };
    moves(l.rows, [&](size_t k, int step) {
      Layout cand = l;
      cand.rows[k] += step;
      consider(cand);
    });
    for (size_t g = 0; g < l.chans.size(); ++g)
      if (!l.chans[g].empty())
        moves(l.chans[g], [&](size_t k, int step) {
          Layout cand = l;
          cand.chans[g][k] += step;
          consider(cand);
        });
    if (best_t >= t) break;
    l = std::move(best);
    t = best_t;
  }
  return l;
}

ZoneSplit ZoneSplitter::best(int first, int last, const std::vector<int>& devices, bool refine_it) {
  const Chain& c = *pb_->chain;
  if (devices.empty()) throw InvalidArgument("AWP: a zone without devices");
  std::vector<int> devs = devices;  // fastest first
  std::stable_sort(devs.begin(), devs.end(), [&](int a, int b) {
    return pb_->devices[static_cast<size_t>(a)].peak_flops >
           pb_->devices[static_cast<size_t>(b)].peak_flops;
  });
  if (!(pb_->medium.bandwidth_bytes_per_s > 0))
    throw Infeasible(cat("DeepZoning: the link '", pb_->medium.from, "' -> '", pb_->medium.to,
                         "' has bandwidth ", pb_->medium.bandwidth_bytes_per_s,
                         " B/s: nothing can be sent to device '", pb_->medium.to, "'"));
  const int64_t h = c.piece(last).out_shape.rank() == 4 ? c.out_region(last).h1 : 1;
  const int64_t ch = c.out_channels(last);
  const bool rows = c.segment_spatial(first, last) && h >= 2;
  const bool chans = !spatial_only_ && ch >= 2 && (rows || c.piece(last).dense);
  std::vector<Layout> cands;
  for (int d : devs)  // one device: each of them
    cands.push_back({.mode = ZoneMode::kOne, .rows = {0, h}, .chans = {{}}, .devs = {{d}}});
  if (devs.size() > 1) {
    if (rows) cands.push_back(spatial(first, last, devs));
    if (chans) cands.push_back(channel(first, last, devs));
  }
  size_t pick = 0;
  double t = kInf;
  auto consider = [&](size_t from) {
    for (size_t i = from; i < cands.size(); ++i) {
      if (cands[i].devs.empty()) continue;  // a mode that does not apply
      const double lt = time(first, last, cands[i]);
      if (lt < t) {
        t = lt;
        pick = i;
      }
    }
  };
  consider(0);
  if (devs.size() > 3 && rows && chans) {
    // A g x m grid sends each band's input to its m devices and has 2·g·m transfers: when that
    // alone is no faster than the best so far, the grid is skipped (a rule for planner time: a
    // grid whose LP idles some cells sends a little less).
    const TileWork& whole = work(first, last, 0, h, 0, 0);
    const size_t from = cands.size();
    for (int g = 2; g * 2 <= static_cast<int>(devs.size()) && g <= h; ++g) {
      const int m = static_cast<int>(devs.size()) / g;
      const double bound =
          2.0 * g * m * pb_->medium.latency_s +
          (m * whole.in_bytes + whole.out_bytes) / pb_->medium.bandwidth_bytes_per_s;
      if (m <= ch && bound < t) cands.push_back(hybrid(first, last, devs, g, m));
    }
    consider(from);
  }
  // The ±1 moves can reorder close modes: each multi-device candidate within 25% of the best is
  // refined, and the best refined one kept.
  Layout l = cands[pick];
  if (refine_it) {
    double best_t = t;
    for (const Layout& c : cands) {
      if (c.devs.empty() || c.mode == ZoneMode::kOne || time(first, last, c) > 1.25 * t) continue;
      Layout r = refine(first, last, c);
      const double rt = time(first, last, r);
      if (rt < best_t) {
        best_t = rt;
        l = std::move(r);
      }
    }
  }
  ZoneSplit z{.stage = stage(first, last, l), .time_s = time(first, last, l)};
  z.mode = stage_mode(z.stage, *pb_);
  for (const DeviceShare& sh : z.stage.shares)
    z.flops += work(first, last, sh.out.empty() ? 0 : sh.out.h0, sh.out.empty() ? h : sh.out.h1,
                    sh.c0, sh.c1)
                   .flops;
  return z;
}

}  // namespace tandem::cnn::edge::detail
