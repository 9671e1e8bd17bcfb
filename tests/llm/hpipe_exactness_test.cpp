// SPDX-License-Identifier: Apache-2.0
// HPipe exactness: a model split into 2-4 "llm.layers" stages (and the layer-range API under them)
// run over uneven token slices with a KV cache per stage gives the logits of a single-device
// Model::forward within f32 tolerance, decode continues over the same split, stages free their
// caches on reset, a packet of several prompts equals each prompt alone, and bad configs / packets
// are refused. Also the in-process replay of a plan.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "llm/gguf_test_util.h"
#include "tandem/core/error.h"
#include "tandem/llm/hpipe.h"
#include "tandem/llm/hpipe_replay.h"
#include "tandem/llm/model.h"
#include "tandem/llm/model_store.h"
#include "tandem/llm/synthetic_model.h"
#include "tandem/sched/stage.h"

namespace tandem::llm {
namespace {

class HpipeExactness : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    SyntheticLlamaConfig c;
    c.name = "hpipe-tiny";
    c.n_layers = 6;
    c.d_model = 64;
    c.d_ff = 128;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.vocab_size = 300;
    c.context_length = 512;
    c.weight_dtype = DType::kF32;
    c.seed = 7;
    path_ = dir_->file("tiny.gguf");
    write_synthetic_llama(c, path_);
  }
  static void TearDownTestSuite() { delete dir_; }

  static std::vector<int32_t> prompt(int n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<int32_t> ids(n);
    for (int32_t& t : ids) t = static_cast<int32_t>(rng() % 300);
    return ids;
  }
  static std::vector<int32_t> iota(int start, int n) {
    std::vector<int32_t> p(n);
    std::iota(p.begin(), p.end(), start);
    return p;
  }
  static nlohmann::json stage_json(int a, int b, bool embed, bool head) {
    return {{"kind", "llm.layers"}, {"model", path_}, {"sha256", ""}, {"first_layer", a},
            {"last_layer", b},      {"embed", embed}, {"head", head}};
  }
  static void expect_close(const Tensor& a, const Tensor& b) {
    ASSERT_EQ(a.shape(), b.shape());
    const float* x = a.data<float>();
    const float* y = b.data<float>();
    double max_ref = 0, max_diff = 0;
    for (int64_t i = 0; i < a.numel(); ++i) {
      max_ref = std::max(max_ref, double(std::abs(y[i])));
      max_diff = std::max(max_diff, double(std::abs(x[i] - y[i])));
    }
    EXPECT_GT(max_ref, 0.0);
    EXPECT_LE(max_diff, 1e-4 * std::max(1.0, max_ref)) << "max |diff| " << max_diff;
  }

  static testing::TempDir* dir_;
  static std::string path_;
};
testing::TempDir* HpipeExactness::dir_ = nullptr;
std::string HpipeExactness::path_;

// Runs `ids` through stages with the given cuts over the given slices; returns the logits of all
// prompt rows stacked [L, vocab].
Tensor run_stages(std::vector<std::unique_ptr<sched::Stage>>& stages,
                  const std::vector<int32_t>& ids, const std::vector<int>& slices, uint64_t request,
                  int pos0 = 0) {
  std::vector<Tensor> parts;
  int pos = pos0, off = 0;
  for (size_t i = 0; i < slices.size(); ++i) {
    sched::Packet p;
    p.request_id = request;
    p.micro = static_cast<int32_t>(i);
    p.n_micro = static_cast<int32_t>(slices.size());
    p.meta = {{"pos_start", pos}, {"seq", i}};
    p.tensors.push_back(
        Tensor::from_vector(std::vector<int32_t>(ids.begin() + off, ids.begin() + off + slices[i]),
                            {slices[i]}, DType::kI32));
    for (auto& s : stages) p = s->process(std::move(p));
    parts.push_back(p.tensors[0]);
    pos += slices[i];
    off += slices[i];
  }
  const int64_t vocab = parts[0].size(1);
  Tensor all = Tensor::empty({off, vocab}, DType::kF32);
  int64_t row = 0;
  for (const Tensor& t : parts) {
    std::copy(t.data<float>(), t.data<float>() + t.numel(), all.data<float>() + row * vocab);
    row += t.size(0);
  }
  return all;
}

TEST_F(HpipeExactness, StagesOverUnevenSlicesMatchSingleDeviceForward) {
  const Model model = Model::load(path_);
  const auto ids = prompt(90, 1);
  KvCache cache = model.make_cache();
  const Tensor ref = model.forward(ids, iota(0, 90), cache);

  const std::vector<std::vector<int>> cut_sets = {{0, 3, 6}, {0, 1, 4, 6}, {0, 2, 3, 5, 6}};
  const std::vector<std::vector<int>> slice_sets = {{90}, {40, 30, 20}, {7, 33, 1, 49}};
  for (const auto& cuts : cut_sets) {
    for (const auto& slices : slice_sets) {
      std::vector<std::unique_ptr<sched::Stage>> stages;
      for (size_t j = 0; j + 1 < cuts.size(); ++j) {
        stages.push_back(
            sched::make_stage(stage_json(cuts[j], cuts[j + 1], j == 0, j + 2 == cuts.size())));
      }
      SCOPED_TRACE(::testing::Message()
                   << cuts.size() - 1 << " stages, " << slices.size() << " slices");
      expect_close(run_stages(stages, ids, slices, 5), ref);
    }
  }
}

TEST_F(HpipeExactness, DecodeContinuesOverTheSameSplit) {
  const Model model = Model::load(path_);
  const auto ids = prompt(40, 2);
  std::vector<std::unique_ptr<sched::Stage>> stages;
  stages.push_back(sched::make_stage(stage_json(0, 2, true, false)));
  stages.push_back(sched::make_stage(stage_json(2, 5, false, false)));
  stages.push_back(sched::make_stage(stage_json(5, 6, false, true)));
  KvCache cache = model.make_cache();
  model.forward(ids, iota(0, 40), cache);
  run_stages(stages, ids, {25, 15}, 9);
  // Greedy decode of 5 tokens both ways: same logits each step.
  int32_t next = 17;
  for (int step = 0; step < 5; ++step) {
    const int32_t pos = 40 + step;
    const Tensor ref = model.forward(std::vector<int32_t>{next}, std::vector<int32_t>{pos}, cache);
    const Tensor got = run_stages(stages, {next}, {1}, 9, pos);
    expect_close(got, ref);
    const float* l = ref.data<float>();
    next = static_cast<int32_t>(std::max_element(l, l + ref.numel()) - l);
  }
}

TEST_F(HpipeExactness, LayerRangeApiChainsAndLastOnly) {
  const Model model = Model::load(path_);
  const auto ids = prompt(30, 3);
  KvCache ref_cache = model.make_cache();
  const Tensor ref = model.forward(ids, iota(0, 30), ref_cache, {.last_only = true});
  KvCache c1 = model.make_cache(), c2 = model.make_cache();
  const Tensor tok = Tensor::from_vector(ids, {30}, DType::kI32);
  const Tensor h = model.forward_layers(tok, iota(0, 30), c1, 0, 4, {.embed = true});
  EXPECT_EQ(h.shape(), Shape({30, 64}));
  const Tensor logits =
      model.forward_layers(h, iota(0, 30), c2, 4, 6, {.head = true, .last_only = true});
  expect_close(logits, ref);
  EXPECT_THROW(model.forward_layers(h, iota(0, 30), c2, 4, 7, {}), InvalidArgument);
  EXPECT_THROW(model.forward_layers(tok, iota(0, 30), c2, 4, 6, {}), InvalidArgument);  // ids
  EXPECT_THROW(model.forward_layers(h, iota(0, 29), c2, 4, 6, {}), InvalidArgument);    // rows
}

TEST_F(HpipeExactness, StageResetFreesTheRequestCache) {
  auto stage = sched::make_stage(stage_json(0, 6, true, true));
  const auto ids = prompt(20, 4);
  std::vector<std::unique_ptr<sched::Stage>> one;
  one.push_back(std::move(stage));
  const Tensor a = run_stages(one, ids, {20}, 1);
  one[0]->reset(1);
  const Tensor b = run_stages(one, ids, {20}, 1);  // from scratch again: identical
  ASSERT_EQ(a.shape(), b.shape());
  EXPECT_TRUE(std::equal(a.data<float>(), a.data<float>() + a.numel(), b.data<float>()));
}

TEST_F(HpipeExactness, BadStageConfigsAndPacketsAreRefused) {
  EXPECT_THROW(sched::make_stage(stage_json(0, 9, true, true)), InvalidArgument);
  EXPECT_THROW(sched::make_stage(stage_json(3, 3, true, true)), InvalidArgument);
  nlohmann::json bad_hash = stage_json(0, 6, true, true);
  bad_hash["sha256"] = std::string(64, '0');
  EXPECT_THROW(sched::make_stage(bad_hash), InvalidArgument);
  nlohmann::json missing = stage_json(0, 6, true, true);
  missing["model"] = dir_->file("absent.gguf");
  EXPECT_THROW(sched::make_stage(missing), Error);
  auto stage = sched::make_stage(stage_json(0, 6, true, true));
  sched::Packet p;
  p.tensors.push_back(Tensor::from_vector(std::vector<int32_t>{1, 2}, {2}, DType::kI32));
  EXPECT_THROW(stage->process(p), InvalidArgument);  // no pos_start
  p.meta = {{"pos_start", 0}};
  p.tensors[0] = Tensor::from_vector(std::vector<int32_t>{1, 999}, {2}, DType::kI32);
  EXPECT_THROW(stage->process(p), InvalidArgument);  // id outside the vocabulary
  p.tensors[0] = Tensor::zeros({1, 2, 2}, DType::kI32);
  try {
    (void)stage->process(p);
    ADD_FAILURE() << "rank-3 token ids were accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(
        std::string(e.what()).find("rank-3 tensor; expected ids of rank 1 (one sequence) or 2"),
        std::string::npos)
        << e.what();
  }
}

// A packet of B prompts (Base's whole batch: ids [B, T]) gives each prompt's logits bit for bit as
// that prompt alone, slice after slice on its own cache.
TEST_F(HpipeExactness, BatchedPacketEqualsItsPromptsAlone) {
  const std::vector<std::vector<int32_t>> ps = {prompt(24, 11), prompt(24, 12)};
  auto run = [&](const std::vector<std::vector<int32_t>>& prompts) {
    auto stage = sched::make_stage(stage_json(0, 6, true, true));
    std::vector<Tensor> out;
    for (int start : {0, 16}) {
      std::vector<int32_t> ids;
      for (const auto& q : prompts)
        ids.insert(ids.end(), q.begin() + start, q.begin() + start + (start ? 8 : 16));
      const int64_t t = start ? 8 : 16, b = static_cast<int64_t>(prompts.size());
      sched::Packet p;
      p.request_id = 1;
      p.meta = {{"pos_start", start}};
      p.tensors.push_back(Tensor::from_vector(ids, b == 1 ? Shape{t} : Shape{b, t}, DType::kI32));
      out.push_back(stage->process(std::move(p)).tensors.at(0));
    }
    return out;
  };
  const auto both = run(ps);
  for (size_t i = 0; i < ps.size(); ++i) {
    const auto alone = run({ps[i]});
    for (size_t k = 0; k < alone.size(); ++k) {
      const Tensor row = both[k].select(0, static_cast<int64_t>(i)).contiguous();
      ASSERT_EQ(row.shape(), alone[k].shape());
      EXPECT_EQ(std::memcmp(row.raw_data(), alone[k].raw_data(), static_cast<size_t>(row.nbytes())),
                0)
          << "prompt " << i << " slice " << k;
    }
  }
}

TEST_F(HpipeExactness, ReplayOfAPlanMatchesAndTimesEveryStage) {
  const Model model = Model::load(path_);
  hpipe::ProfileOptions po;
  po.slice_lengths = {8, 32};
  po.context_lengths = {64};
  po.repeats = 1;
  const hpipe::ModelProfile prof = hpipe::profile_model(model, path_, po);
  ClusterSpec cl = ClusterSpec::from_json(nlohmann::json::parse(R"({
    "devices": [
      {"name": "a", "peak_flops": 1e9, "mem_bandwidth_bytes_per_s": 1e9, "mem_bytes": 1e9, "speed_factor": 0.5, "power_w": 100},
      {"name": "b", "peak_flops": 2e9, "mem_bandwidth_bytes_per_s": 1e9, "mem_bytes": 1e9, "speed_factor": 1.0, "power_w": 200},
      {"name": "c", "peak_flops": 2e9, "mem_bandwidth_bytes_per_s": 1e9, "mem_bytes": 1e9, "speed_factor": 1.0, "power_w": 200}],
    "links": [{"from": "a", "to": "b", "bandwidth_bytes_per_s": 1.25e8, "latency_s": 1e-4},
              {"from": "b", "to": "c", "bandwidth_bytes_per_s": 1.25e8, "latency_s": 1e-4}]})"));
  const sched::PipelinePlan plan = hpipe::make_plan(prof, cl, "test", 96, "hpipe", {});
  const auto ids = prompt(96, 5);
  const hpipe::ReplayResult r = hpipe::replay_plan(plan, cl, prof, ids, {});
  KvCache cache = model.make_cache();
  expect_close(r.last_logits, model.forward(ids, iota(0, 96), cache, {.last_only = true}));
  ASSERT_EQ(r.measured_s.size(), plan.slices.size());
  for (const auto& row : r.measured_s) {
    for (double t : row) EXPECT_GT(t, 0.0);
  }
  EXPECT_GT(r.measured.makespan_s, 0.0);
  EXPECT_GE(r.measured.makespan_s,
            *std::max_element(r.stage_measured_s.begin(), r.stage_measured_s.end()));
  EXPECT_THROW(hpipe::replay_plan(plan, cl, prof, prompt(95, 5), {}), InvalidArgument);
}

TEST(HpipeRealModel, SmolLM2ThreeStagesMatchSingleDevice) {
  std::string path;
  try {
    path = default_model_path();
  } catch (const Error& e) {
    GTEST_SKIP() << "SmolLM2 model unavailable: " << e.what();
  }
  const Model model = Model::load(path);
  std::mt19937 rng(9);
  std::vector<int32_t> ids(40);
  for (int32_t& t : ids) t = static_cast<int32_t>(rng() % 49152);
  std::vector<int32_t> pos(40);
  std::iota(pos.begin(), pos.end(), 0);
  KvCache cache = model.make_cache();
  const Tensor ref = model.forward(ids, pos, cache);
  std::vector<std::unique_ptr<sched::Stage>> stages;
  const std::vector<int> cuts = {0, 7, 19, 30};
  for (size_t j = 0; j + 1 < cuts.size(); ++j) {
    stages.push_back(sched::make_stage({{"kind", "llm.layers"},
                                        {"model", path},
                                        {"sha256", ""},
                                        {"first_layer", cuts[j]},
                                        {"last_layer", cuts[j + 1]},
                                        {"embed", j == 0},
                                        {"head", j + 2 == cuts.size()}}));
  }
  const Tensor got = run_stages(stages, ids, {17, 8, 15}, 3);
  ASSERT_EQ(got.shape(), ref.shape());
  double max_ref = 0, max_diff = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    max_ref = std::max(max_ref, double(std::abs(ref.data<float>()[i])));
    max_diff = std::max(max_diff, double(std::abs(got.data<float>()[i] - ref.data<float>()[i])));
  }
  EXPECT_LE(max_diff, 1e-4 * max_ref) << "max |diff| " << max_diff << " of max |logit| " << max_ref;
}

}  // namespace
}  // namespace tandem::llm
