// SPDX-License-Identifier: Apache-2.0
// HpipeDist: the fixture of the multi-process HPipe tests (test_hpipe_dist.cpp, fault_test.cpp): a
// generated 6-layer LLaMA GGUF per suite, a cluster key and `tandem worker` children per test, an
// HPipe plan over dev0..dev2, prompts cut into token slices, and the checks against
// Model::forward and against a fault-free run (bit for bit).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <numeric>
#include <random>

#include "../src/llm/sha256.h"
#include "sched/child_worker.h"
#include "sched/sched_test_util.h"
#include "tandem/llm/hpipe.h"
#include "tandem/llm/hpipe_profile.h"
#include "tandem/llm/model.h"
#include "tandem/llm/synthetic_model.h"
#include "tandem/sched/client.h"
#include "tandem/sched/pipeline.h"

namespace tandem::sched::test {

namespace fs = std::filesystem;

class HpipeDist : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    suite_dir_ = fs::temp_directory_path() / ("tandem_hpipe_dist_" + std::to_string(::getpid()));
    fs::create_directories(suite_dir_);
    model_path_ = (suite_dir_ / "tiny.gguf").string();
    write_model(model_path_, 13);
  }
  // The suite's 6-layer LLaMA shape with F32 weights; another seed makes another model.
  static void write_model(const std::string& path, uint64_t seed) {
    llm::SyntheticLlamaConfig c;
    c.name = "hpipe-dist";
    c.n_layers = 6;
    c.d_model = 64;
    c.d_ff = 128;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.vocab_size = 300;
    c.context_length = 256;
    c.weight_dtype = DType::kF32;
    c.seed = seed;
    llm::write_synthetic_llama(c, path);
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(suite_dir_, ec);
  }
  void SetUp() override {
    if (!zmq_has_curve()) GTEST_SKIP() << "libzmq without CURVE";
    if (!fs::exists(TANDEM_CLI_PATH)) GTEST_SKIP() << "no tandem binary at " << TANDEM_CLI_PATH;
    dir_ = suite_dir_ / ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::create_directories(dir_);
    key_path_ = (dir_ / "cluster.key").string();
    key_ = ClusterKey::generate();
    key_.save(key_path_);
  }
  void TearDown() override { workers_.clear(); }

  std::map<std::string, std::string> start_workers(int n) {
    return test::start_workers(workers_, dir_, key_path_, n);
  }
  PipelineOptions options() const { return test::worker_pipeline_options(key_, 120); }

  // An HPipe plan (cuts, token slices, model path + sha256) over dev0..dev2.
  static PipelinePlan hpipe_plan(const std::string& model, const std::vector<int>& cuts,
                                 const std::vector<int>& slices) {
    std::vector<llm::hpipe::StagePlan> stages;
    for (size_t j = 0; j + 1 < cuts.size(); ++j)
      stages.push_back(
          {"dev" + std::to_string(j), cuts[j], cuts[j + 1], j == 0, j + 2 == cuts.size()});
    PipelinePlan plan = llm::hpipe::layer_plan(model, llm::sha256_file(model), stages);
    plan.system = "hpipe";
    plan.cluster = "loopback3";
    plan.prompt_len = std::accumulate(slices.begin(), slices.end(), 0);
    plan.slices.assign(slices.begin(), slices.end());
    return plan;
  }
  static std::vector<int32_t> prompt(int n, uint32_t seed, int vocab) {
    std::mt19937 rng(seed);
    std::vector<int32_t> ids(n);
    for (int32_t& t : ids) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
    return ids;
  }
  // Request first_id + r holds prompts[r], cut into the slices.
  static std::vector<Request> requests(const std::vector<std::vector<int32_t>>& prompts,
                                       const std::vector<int>& slices, uint64_t first_id = 200) {
    std::vector<Request> rs;
    for (size_t r = 0; r < prompts.size(); ++r) {
      Request q;
      q.id = first_id + r;
      int off = 0;
      for (size_t m = 0; m < slices.size(); ++m) {
        Packet p;
        p.tensors.push_back(Tensor::from_vector(
            std::vector<int32_t>(prompts[r].begin() + off, prompts[r].begin() + off + slices[m]),
            {slices[m]}, DType::kI32));
        p.meta = {{"pos_start", off}, {"seq", m}};
        off += slices[m];
        q.micros.push_back(std::move(p));
      }
      rs.push_back(std::move(q));
    }
    return rs;
  }
  // Every request's slice logits, stacked, against Model::forward over the whole prompt.
  static void expect_matches_forward(const std::string& model_path,
                                     const std::vector<std::vector<int32_t>>& prompts,
                                     const std::map<uint64_t, std::vector<Packet>>& got,
                                     double rel_tol) {
    const llm::Model model = llm::Model::load(model_path);
    ASSERT_EQ(got.size(), prompts.size());
    for (size_t r = 0; r < prompts.size(); ++r) {
      const auto& ids = prompts[r];
      std::vector<int32_t> pos(ids.size());
      std::iota(pos.begin(), pos.end(), 0);
      llm::KvCache cache = model.make_cache();
      const Tensor ref = model.forward(ids, pos, cache);
      ASSERT_TRUE(got.count(200 + r)) << "request " << 200 + r << " missing";
      const float* y = ref.data<float>();
      const int64_t vocab = ref.size(1);
      double max_ref = 0, max_diff = 0;
      int64_t row = 0;
      for (const Packet& p : got.at(200 + r)) {
        ASSERT_EQ(p.tensors.size(), 1u);
        const Tensor& t = p.tensors[0];
        ASSERT_EQ(t.size(1), vocab);
        const float* x = t.data<float>();
        for (int64_t i = 0; i < t.numel(); ++i) {
          const double want = y[row * vocab + i];
          max_ref = std::max(max_ref, std::abs(want));
          max_diff = std::max(max_diff, std::abs(double(x[i]) - want));
        }
        row += t.size(0);
      }
      EXPECT_EQ(row, static_cast<int64_t>(ids.size())) << "request " << 200 + r;
      EXPECT_GT(max_ref, 0.0);
      EXPECT_LE(max_diff, rel_tol * std::max(1.0, max_ref))
          << "request " << 200 + r << ": max |diff| " << max_diff << " vs max |logit| " << max_ref;
    }
  }
  static void expect_bit_equal(const std::map<uint64_t, std::vector<Packet>>& got,
                               const std::map<uint64_t, std::vector<Packet>>& want) {
    ASSERT_EQ(got.size(), want.size());
    for (const auto& [id, ps] : want) {
      ASSERT_TRUE(got.count(id)) << "request " << id;
      ASSERT_EQ(got.at(id).size(), ps.size());
      for (size_t m = 0; m < ps.size(); ++m) {
        const Tensor& a = got.at(id)[m].tensors.at(0);
        const Tensor& b = ps[m].tensors.at(0);
        ASSERT_EQ(a.shape(), b.shape());
        EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), static_cast<size_t>(a.nbytes())), 0)
            << "request " << id << " slice " << m;
      }
    }
  }
  // dev1 slow so that slices are in flight when it dies.
  static ClusterSpec slow_middle_cluster() { return test::slow_middle_cluster(0.1); }
  // The same devices linked dev0 - dev1 - dev2 and dev0 - dev2 (the planners need a link between
  // consecutive devices, also after dev1 is lost); runs leave the links unemulated so that every
  // hop stays worker to worker.
  static ClusterSpec linked_cluster(double slow = 0.1) {
    ClusterSpec c = test::slow_middle_cluster(slow);
    for (const auto& [a, b] : std::vector<std::pair<int, int>>{{0, 1}, {1, 2}, {0, 2}})
      c.links.push_back({"dev" + std::to_string(a), "dev" + std::to_string(b), 1e10, 1e-5, ""});
    return c;
  }
  // The suite model's HPipe profile, measured here once on a coarse grid (milliseconds).
  static const llm::hpipe::ModelProfile& profile() {
    static const llm::hpipe::ModelProfile p = [] {
      llm::hpipe::ProfileOptions po;
      po.slice_lengths = {8, 32};
      po.context_lengths = {32, 64};
      po.repeats = 3;  // best of 3: one slow sample on a loaded machine would skew the fit
      return llm::hpipe::profile_model(llm::Model::load(model_path_), model_path_, po);
    }();
    return p;
  }
  // A planned batch's requests: micro_batches requests of batch / micro_batches prompts each
  // (ids [T] for one prompt, [P, T] for P), prompts[r * P + i] the i-th of request first_id + r.
  static std::vector<Request> plan_requests(const PipelinePlan& plan,
                                            const std::vector<std::vector<int32_t>>& prompts,
                                            uint64_t first_id = 200) {
    const int64_t per = plan.batch / plan.micro_batches;
    std::vector<Request> rs;
    for (int64_t r = 0; r < plan.micro_batches; ++r) {
      Request q;
      q.id = first_id + static_cast<uint64_t>(r);
      int64_t off = 0;
      for (size_t m = 0; m < plan.slices.size(); ++m) {
        const int64_t t = plan.slices[m];
        std::vector<int32_t> ids;
        for (int64_t i = 0; i < per; ++i) {
          const auto& pr = prompts[static_cast<size_t>(r * per + i)];
          ids.insert(ids.end(), pr.begin() + off, pr.begin() + off + t);
        }
        Packet p;
        p.tensors.push_back(
            Tensor::from_vector(ids, per == 1 ? Shape{t} : Shape{per, t}, DType::kI32));
        p.meta = {{"pos_start", off}, {"seq", m}};
        off += t;
        q.micros.push_back(std::move(p));
      }
      rs.push_back(std::move(q));
    }
    return rs;
  }
  // The outputs of plan_requests' requests per prompt (request first_id + r * P + i holds the i-th
  // prompt's slices of request first_id + r), as expect_matches_forward reads them.
  static std::map<uint64_t, std::vector<Packet>> per_prompt(
      const PipelinePlan& plan, const std::map<uint64_t, std::vector<Packet>>& outputs,
      uint64_t first_id = 200) {
    const int64_t per = plan.batch / plan.micro_batches;
    std::map<uint64_t, std::vector<Packet>> out;
    for (const auto& [id, packets] : outputs)
      for (const Packet& p : packets)
        for (int64_t i = 0; i < per; ++i) {
          Packet one;
          one.tensors.push_back(per == 1 ? p.tensors.at(0)
                                         : p.tensors.at(0).select(0, i).contiguous());
          out[first_id + (id - first_id) * static_cast<uint64_t>(per) + static_cast<uint64_t>(i)]
              .push_back(std::move(one));
        }
    return out;
  }

  inline static fs::path suite_dir_;
  inline static std::string model_path_;
  fs::path dir_;
  std::string key_path_;
  ClusterKey key_;
  std::vector<std::unique_ptr<ChildWorker>> workers_;
};

inline const std::vector<int> kCuts = {0, 1, 4, 6};          // uneven layer split
inline const std::vector<int> kSlices = {7, 33, 1, 23, 32};  // uneven token slices, 96 tokens

}  // namespace tandem::sched::test
