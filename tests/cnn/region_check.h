// SPDX-License-Identifier: Apache-2.0
// The region check every model goes through: random output regions of the tensors between cut
// tensors, computed by run_region from only their required input region, must equal the same
// region of the whole-image run. Row bands (full width, the PICO/DeepZoning split) must match bit
// for bit. 2-D rectangles must match within kRectTol: oneDNN's brgconv blocks the output width
// and handles a block touching the left/right padding with a different tap order, so a column cut
// can move a pixel into a differently ordered block (same kernel, different rounding).
#pragma once

#include <gtest/gtest.h>

#include <random>

#include "cnn_test_util.h"
#include "tandem/cnn/executor.h"
#include "tandem/cnn/region.h"

namespace tandem::cnn::testing {

constexpr double kRectTol = 1e-5;  // scaled max error (cnn_test_util.h) for 2-D rectangles

inline Tensor crop_tensor(const Tensor& t, const Region& r) {
  if (t.rank() != 4) return t;
  return t.slice(2, r.h0, r.h1).slice(3, r.w0, r.w1).contiguous();
}

// Runs `trials` random sub-graph/rectangle checks; returns how many were run.
inline int check_random_regions(const Graph& g, const Tensor& input, int trials, uint32_t seed,
                                int threads = 1) {
  Executor full(g, {.threads = threads, .keep_all = true});
  full.run({input});
  const std::vector<Tensor>& all = full.tensors();
  std::vector<int> cuts = cut_tensors(g);
  // Spatial cuts (rank 4), in order; the graph input is the first.
  std::vector<int> spatial;
  for (int t : cuts)
    if (g.tensor(t).shape.rank() == 4 && g.tensor(t).shape[2] > 1) spatial.push_back(t);
  EXPECT_GE(spatial.size(), 1u);
  if (spatial.size() < 2) return 0;
  std::mt19937 rng(seed);
  Executor part(g, {.threads = threads});
  int done = 0;
  for (int i = 0; i < trials; ++i) {
    // A span of consecutive cuts: from a (source) to b (target), sometimes the whole prefix.
    const size_t b = 1 + rng() % (spatial.size() - 1);
    const size_t a = (i % 3 == 0) ? 0 : rng() % b;
    const int from = spatial[a], to = spatial[b];
    const Shape& s = g.tensor(to).shape;
    Region want;
    want.h0 = rng() % s[2];
    want.h1 = want.h0 + 1 + rng() % (s[2] - want.h0);
    if (i % 2 == 0) {  // row band (full width), the PICO/DeepZoning case
      want.w0 = 0;
      want.w1 = s[3];
    } else {  // 2-D rectangle
      want.w0 = rng() % s[3];
      want.w1 = want.w0 + 1 + rng() % (s[3] - want.w0);
    }
    const std::vector<int> nodes = nodes_between(g, from, to);
    // The executor's graph carries the Winograd convs' output grids.
    const std::vector<Region> need = required_regions(part.graph(), nodes, {{to, want}});
    const Region in = need[from];
    EXPECT_FALSE(in.empty());
    auto out = part.run_region(nodes, {{from, Tile{crop_tensor(all[from], in), in}}}, {{to, want}});
    const Tensor expect = crop_tensor(all[to], want);
    const bool rows = want.w0 == 0 && want.w1 == s[3];
    const double err = scaled_max_error(out.at(to).data, expect);
    if (rows) {
      EXPECT_TRUE(bit_equal(out.at(to).data, expect))
          << "row band '" << g.tensor(from).name << "' " << in.to_string() << " -> '"
          << g.tensor(to).name << "' " << want.to_string() << ": scaled error " << err;
    } else {
      EXPECT_LE(err, kRectTol) << "rectangle '" << g.tensor(from).name << "' " << in.to_string()
                               << " -> '" << g.tensor(to).name << "' " << want.to_string();
    }
    ++done;
  }
  return done;
}

}  // namespace tandem::cnn::testing
