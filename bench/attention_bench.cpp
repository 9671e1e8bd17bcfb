// SPDX-License-Identifier: Apache-2.0
// Causal grouped-query attention through ops::attention on SmolLM2-135M's geometry (9 query heads,
// 3 KV heads, head dim 64):
//   prefill  Tq = Tk = 512, causal            compute-bound: GFLOP/s against the FMA peak
//   decode   Tq = 1, Tk = 4096                memory-bound: GB/s of K/V read against the triad
// FLOPs count the two matrix products over the unmasked (query, key) pairs: 2 * (D + Dv) per pair
// and head; softmax work is not counted. Bytes are q, k, v read once and out written once. Decode
// also runs "stream": iterations cycle over copies of the KV cache spanning kStreamBytes (as the 30
// layers of a real model do), so K/V come from DRAM rather than the cache.
#include <cmath>
#include <memory>

#include "bench_common.h"
#include "tandem/ops/ops.h"

namespace tandem::bench {
namespace {

struct AttnCase {
  std::string what;  // "smollm2.prefill" | "smollm2.decode"
  int64_t tq, tk, hq = 9, hkv = 3, d = 64;
  bool stream = false;
  std::string name() const {
    return what + ".tq" + std::to_string(tq) + "_tk" + std::to_string(tk) + "_h" +
           std::to_string(hq) + "x" + std::to_string(hkv) + "_d" + std::to_string(d) +
           (stream ? ".stream" : "");
  }
  // Keys visible to all queries: query i (absolute position tk - tq + i) sees tk - tq + i + 1 keys.
  double pairs() const {
    const double first = static_cast<double>(tk - tq + 1), last = static_cast<double>(tk);
    return static_cast<double>(tq) * (first + last) / 2.0;
  }
  double flops() const { return static_cast<double>(hq) * pairs() * 4.0 * static_cast<double>(d); }
  double kv_bytes() const { return 4.0 * 2.0 * static_cast<double>(tk * hkv * d); }
  double bytes() const { return kv_bytes() + 4.0 * 2.0 * static_cast<double>(tq * hq * d); }
};

struct AttnData {
  Tensor q, out;
  CopySet k, v;
};

void run_attention(benchmark::State& state, const AttnCase& ac, int threads) {
  begin_run(threads, false);
  try {
    const int64_t copies = copies_for(static_cast<int64_t>(ac.kv_bytes()), ac.stream);
    auto data =
        data_cache().get<AttnData>(ac.name(), static_cast<int64_t>(ac.bytes()) * copies, [&] {
          auto d = std::make_shared<AttnData>();
          d->q = random_tensor({ac.tq, ac.hq, ac.d}, 9000);
          d->k = make_copies(random_tensor({ac.tk, ac.hkv, ac.d}, 9001), copies);
          d->v = make_copies(random_tensor({ac.tk, ac.hkv, ac.d}, 9002), copies);
          d->out = Tensor::zeros({ac.tq, ac.hq, ac.d}, DType::kF32);
          return d;
        });
    AttnData& d = *data;
    const ops::AttentionParams p;  // causal, 1/sqrt(d), queries are the last rows
    const bool ok = verify_once(state, bench_name("attention", ac.name(), threads, "tandem"), [&] {
      ops::attention(d.q, d.k.views[0], d.v.views[0], d.out, p);
      Tensor ref = Tensor::zeros({ac.tq, ac.hq, ac.d}, DType::kF32);
      // Kernels get resolved parameters (ops::attention fills in the defaults before dispatch).
      ops::AttentionParams rp = p;
      rp.q_offset = ac.tk - ac.tq;
      rp.scale = 1.0f / std::sqrt(static_cast<float>(ac.d));
      ops::cpu_reference_kernels().attention(d.q, d.k.views[0], d.v.views[0], ref, rp, nullptr,
                                             nullptr);
      const Diff diff = max_diff(d.out.data<float>(), ref.data<float>(), ref.numel());
      return diff_message(diff, 1e-3, cat("tandem attention ", ac.name(), " vs reference"));
    });
    if (!ok) return;
    int64_t i = 0;
    for (auto _ : state) {
      ops::attention(d.q, d.k.views[i], d.v.views[i], d.out, p);
      if (++i == copies) i = 0;
      benchmark::ClobberMemory();
    }
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  set_counters(state, ac.flops(), ac.bytes(), threads);
}

}  // namespace

void register_attention_benchmarks() {
  const std::vector<AttnCase> cases{
      {"smollm2.prefill", 512, 512},
      {"smollm2.decode", 1, 4096},
      {"smollm2.decode", 1, 4096, 9, 3, 64, true},
  };
  for (const AttnCase& ac : cases) {
    for (int t : thread_counts()) {
      benchmark::RegisterBenchmark(bench_name("attention", ac.name(), t, "tandem").c_str(),
                                   [ac, t](benchmark::State& s) { run_attention(s, ac, t); })
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
    }
  }
}

}  // namespace tandem::bench
