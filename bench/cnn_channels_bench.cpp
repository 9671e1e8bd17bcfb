// SPDX-License-Identifier: Apache-2.0
// Output-channel slices of one CNN layer (cnn::Executor::run_region with channels: DeepZoning's
// channel mode, LW's feature split) against the whole layer, batch 1, full map:
//   whole      run_region of the whole output
//   k_of_n     channels [0, O * k / n) of it (the slice's kernel packed once, before timing)
// A slice's overhead is its time over the whole layer's time x k/n (1.0: none); the cases are
// ResNet-50's 3x3 and 1x1 shapes, MobileNetV2's depthwise 3x3 and VGG-16's first FC layer.
// Every slice is checked once against the same channels of the whole run (within 1e-5; the
// counter bit_exact says whether it matched bit for bit).
#include <cstring>
#include <memory>

#include "bench_common.h"
#include "tandem/cnn/executor.h"
#include "tandem/core/error.h"

namespace tandem::bench {
namespace {

struct LayerCase {
  std::string name;
  int64_t c, o, h, w;  // h = w = 0: a fully connected layer c -> o
  int k = 3, groups = 1;
};

cnn::Graph layer_graph(const LayerCase& lc) {
  cnn::Graph g;
  const bool fc = lc.h == 0;
  const int x = g.add_tensor("x", fc ? Shape{1, lc.c} : Shape{1, lc.c, lc.h, lc.w});
  const int y = g.add_tensor("y");
  g.add_input(x);
  cnn::Node n;
  n.name = lc.name;
  n.op = fc ? cnn::OpKind::kGemm : cnn::OpKind::kConv;
  const int pad = lc.k / 2;
  n.window = {lc.k, lc.k, 1, 1, 1, 1, pad, pad, pad, pad};
  n.groups = lc.groups;
  n.weight = fc ? random_tensor({lc.o, lc.c}, 2, -0.1f, 0.1f)
                : random_tensor({lc.o, lc.c / lc.groups, lc.k, lc.k}, 2, -0.1f, 0.1f);
  n.bias = random_tensor({lc.o}, 3);
  n.act.kind = cnn::ActKind::kRelu;
  n.inputs = {x};
  n.outputs = {y};
  g.add_node(std::move(n));
  g.add_output(y);
  g.infer_shapes();
  return g;
}

void run_slice(benchmark::State& state, const LayerCase& lc, int k, int of, int threads) {
  begin_run(threads, false);
  const cnn::Graph g = layer_graph(lc);
  const int x = g.inputs()[0], y = g.outputs()[0];
  const Tensor in = random_tensor(g.tensor(x).shape, 1);
  cnn::Executor ex(g, {.threads = threads, .winograd = false});
  const std::map<int, cnn::Tile> inputs{{x, {in, cnn::full_region(in.shape())}}};
  const std::map<int, cnn::Region> want{{y, cnn::full_region(g.tensor(y).shape)}};
  std::map<int, cnn::Channels> ch;
  if (k < of) ch[y] = {0, lc.o * k / of};
  const std::string name =
      bench_name("cnn_channels", lc.name, threads, k < of ? cat(k, "_of_", of) : "whole");
  // Checked on every call (outside the timed loop): within 1e-5, and whether bit for bit.
  const Tensor whole = ex.run_region({0}, inputs, want).at(y).data;
  const Tensor got = ex.run_region({0}, inputs, want, ch).at(y).data;
  const Tensor ref = ch.empty() ? whole : whole.slice(1, 0, ch[y].c1).contiguous();
  const bool exact =
      std::memcmp(got.raw_data(), ref.raw_data(), static_cast<size_t>(ref.nbytes())) == 0;
  if (!verify_once(state, name, [&] {
        return diff_message(max_diff(got.data<float>(), ref.data<float>(), ref.numel()), 1e-5,
                            "the slice against the whole layer");
      }))
    return;
  for (auto _ : state) benchmark::DoNotOptimize(ex.run_region({0}, inputs, want, ch));
  const double share = static_cast<double>(k) / of;
  const double plane = lc.h == 0 ? 1.0 : static_cast<double>(lc.h * lc.w);
  set_counters(state, 2.0 * lc.c / lc.groups * lc.k * lc.k * lc.o * share * plane, 0, threads);
  state.counters["bit_exact"] = exact;
}

}  // namespace

void register_cnn_channel_benchmarks() {
  const std::vector<LayerCase> cases{{"resnet50.3x3_c64_56x56", 64, 64, 56, 56},
                                     {"resnet50.3x3_c256_14x14", 256, 256, 14, 14},
                                     {"resnet50.1x1_c256_co1024_14x14", 256, 1024, 14, 14, 1},
                                     {"mobilenetv2.dw3x3_c144_56x56", 144, 144, 56, 56, 3, 144},
                                     {"vgg16.fc_25088_4096", 25088, 4096, 0, 0, 1}};
  for (const LayerCase& lc : cases)
    for (int t : thread_counts())
      for (const auto& [k, of] : std::vector<std::pair<int, int>>{{1, 1}, {1, 2}, {1, 4}})
        benchmark::RegisterBenchmark(
            bench_name("cnn_channels", lc.name, t, k < of ? cat(k, "_of_", of) : "whole").c_str(),
            [lc, k, of, t](benchmark::State& s) { run_slice(s, lc, k, of, t); })
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
}

}  // namespace tandem::bench
