// SPDX-License-Identifier: Apache-2.0
// The "llm.layers" stage kind: decoder layers [first_layer, last_layer) of a GGUF model as a
// sched::Stage (pipeline plan contract, hpipe.h). Config:
//   {"kind": "llm.layers", "model": "<gguf path>", "sha256": "<hex>" (checked when non-empty),
//    "first_layer": a, "last_layer": b, "embed": bool, "head": bool}
// Packets: meta {"pos_start": p} (positions p .. p+T-1), optional "last_only"; the first stage
// takes I32 token ids [T], the others F32 hidden [T, d_model]; the last returns F32 logits. A
// packet may carry B sequences of one request at once (Base's whole batch as one packet): ids
// [B, T], hidden [B, T, d_model], logits [B, rows, vocab]; each sequence runs alone through the
// same kernels, in order. The stage keeps one KvCache per request_id and sequence (so slice i
// attends to the slices before it) and frees them in reset(). Stages of one process share the
// loaded model (one mapping per path).
#include <sys/stat.h>

#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>

#include "../sha256.h"
#include "tandem/core/error.h"
#include "tandem/llm/hpipe.h"
#include "tandem/llm/model.h"
#include "tandem/sched/stage.h"

namespace tandem::llm {
namespace {

// What tells one file's contents from another's without reading it: a file replaced at the path
// has another inode, and one rewritten in place another change time (which no user can set back).
// Empty when the path cannot be stat'ed (sha256_file and Model::load then say why).
std::string file_identity(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "";
  return cat(st.st_dev, ':', st.st_ino, ':', st.st_size, ':', st.st_mtim.tv_sec, '.',
             st.st_mtim.tv_nsec, ':', st.st_ctim.tv_sec, '.', st.st_ctim.tv_nsec);
}

// One Model per file while any stage uses it. A worker lives across runs, so a hash or a model is
// reused only while the file at the path is the same file: a model replaced between runs is
// hashed and loaded afresh.
std::shared_ptr<const Model> shared_model(const std::string& path, const std::string& sha256) {
  static std::mutex mu;
  static std::map<std::string, std::weak_ptr<const Model>> models;  // by path + identity
  static std::map<std::string, std::string> hashes;                 // by path + identity
  std::lock_guard<std::mutex> lock(mu);
  const std::string id = file_identity(path);
  const std::string key = cat(path, '\n', id);
  if (!sha256.empty()) {
    auto h = hashes.find(key);
    if (h == hashes.end() || id.empty()) h = hashes.insert_or_assign(key, sha256_file(path)).first;
    if (h->second != sha256) {
      throw InvalidArgument(cat("llm.layers: model '", path, "' has sha256 ", h->second,
                                ", the plan expects ", sha256));
    }
  }
  if (auto m = models[key].lock(); m && !id.empty()) return m;
  auto m = std::make_shared<const Model>(Model::load(path));
  models[key] = m;
  return m;
}

// A layer index: checked in 64 bits before it is narrowed (2^40 must not wrap to 0).
int int_config(const nlohmann::json& c, const char* key) {
  if (!c.contains(key) || !c[key].is_number_integer()) {
    throw InvalidArgument(cat("llm.layers: config '", key, "' missing or not an integer"));
  }
  const nlohmann::json& v = c[key];
  if (v.is_number_unsigned() ? v.get<uint64_t>() > uint64_t{1} << 20
                             : (v.get<int64_t>() < 0 || v.get<int64_t>() > int64_t{1} << 20)) {
    throw InvalidArgument(
        cat("llm.layers: config '", key, "' = ", v.dump(), " is not a layer index in [0, 2^20]"));
  }
  return v.get<int>();
}

bool bool_config(const nlohmann::json& c, const char* key) {
  if (!c.contains(key)) return false;
  if (!c[key].is_boolean()) throw InvalidArgument(cat("llm.layers: config '", key, "' not a bool"));
  return c[key].get<bool>();
}

class LayerStage : public sched::Stage {
 public:
  explicit LayerStage(const nlohmann::json& c) {
    if (!c.contains("model") || !c["model"].is_string()) {
      throw InvalidArgument("llm.layers: config 'model' (a GGUF path) missing");
    }
    const std::string sha =
        c.contains("sha256") && c["sha256"].is_string() ? c["sha256"].get<std::string>() : "";
    model_ = shared_model(c["model"].get<std::string>(), sha);
    first_ = int_config(c, "first_layer");
    last_ = int_config(c, "last_layer");
    options_.embed = bool_config(c, "embed");
    options_.head = bool_config(c, "head");
    const int n = model_->config().n_layers;
    if (first_ < 0 || last_ > n || first_ >= last_) {
      throw InvalidArgument(
          cat("llm.layers: layers [", first_, ", ", last_, ") outside the model's ", n, " layers"));
    }
    // The embedding feeds layer 0 and the head reads the last layer: a pipeline whose ends are
    // elsewhere would skip layers.
    if (options_.embed && first_ != 0)
      throw InvalidArgument(
          cat("llm.layers: a stage with \"embed\" must start at layer 0, not ", first_));
    if (options_.head && last_ != n)
      throw InvalidArgument(
          cat("llm.layers: a stage with \"head\" must end at the model's last "
              "layer ",
              n, ", not ", last_));
  }
  std::string kind() const override { return "llm.layers"; }

  sched::Packet process(sched::Packet in) override {
    if (in.tensors.empty()) {
      throw InvalidArgument(cat("llm.layers: packet of request ", in.request_id, " has no tensor"));
    }
    if (!in.meta.contains("pos_start") || !in.meta["pos_start"].is_number_integer() ||
        in.meta["pos_start"].get<int64_t>() < 0) {
      throw InvalidArgument(cat("llm.layers: packet of request ", in.request_id,
                                " lacks a non-negative integer meta.pos_start"));
    }
    const Tensor& x = in.tensors[0];
    // One sequence: ids [T] or hidden [T, d]; a batch of them has one more (leading) dimension.
    const int one = options_.embed ? 1 : 2;
    if (x.rank() != one && x.rank() != one + 1) {
      throw InvalidArgument(cat("llm.layers: packet of request ", in.request_id, " has a rank-",
                                x.rank(), " tensor; expected ", options_.embed ? "ids" : "hidden",
                                " of rank ", one, " (one sequence) or ", one + 1, " (a batch)"));
    }
    const bool batched = x.rank() == one + 1;
    const int64_t start = in.meta["pos_start"].get<int64_t>();
    Model::LayerRangeOptions opt = options_;
    opt.last_only = options_.head && in.meta.contains("last_only") &&
                    in.meta["last_only"].is_boolean() && in.meta["last_only"].get<bool>();
    sched::Packet out;
    out.request_id = in.request_id;
    out.micro = in.micro;
    out.n_micro = in.n_micro;
    out.meta = std::move(in.meta);
    if (!batched) {
      out.tensors.push_back(run_sequence(x, start, {in.request_id, 0}, opt));
      return out;
    }
    const int64_t b = x.size(0);
    if (b < 1 || b > hpipe::kMaxBatch) {
      throw InvalidArgument(cat("llm.layers: packet of request ", in.request_id, " holds ", b,
                                " sequences (expected 1..", hpipe::kMaxBatch, ")"));
    }
    Tensor y;
    for (int64_t i = 0; i < b; ++i) {
      const Tensor yi = run_sequence(x.select(0, i).contiguous(), start, {in.request_id, i}, opt);
      if (i == 0) {
        std::vector<int64_t> dims = {b};
        for (int d = 0; d < yi.rank(); ++d) dims.push_back(yi.size(d));
        y = Tensor::empty(Shape(dims), yi.dtype());
      }
      std::memcpy(static_cast<char*>(y.raw_data()) + i * yi.nbytes(), yi.raw_data(),
                  static_cast<size_t>(yi.nbytes()));
    }
    out.tensors.push_back(std::move(y));
    return out;
  }

  void reset(uint64_t request_id) override {
    caches_.erase(caches_.lower_bound({request_id, 0}),
                  caches_.upper_bound({request_id, hpipe::kMaxBatch}));
  }

 private:
  using CacheKey = std::pair<uint64_t, int64_t>;  // request id, sequence in the packet

  // One sequence's slice at positions start.. through the layers, on its own cache.
  Tensor run_sequence(const Tensor& x, int64_t start, const CacheKey& key,
                      const Model::LayerRangeOptions& opt) {
    const int64_t t = x.size(0);
    if (start + t > std::numeric_limits<int32_t>::max()) {
      throw InvalidArgument(cat("llm.layers: positions ", start, " + ", t, " overflow"));
    }
    std::vector<int32_t> pos(static_cast<size_t>(t));
    for (int64_t i = 0; i < t; ++i) pos[i] = static_cast<int32_t>(start + i);
    auto it = caches_.find(key);
    if (it == caches_.end()) it = caches_.emplace(key, model_->make_cache()).first;
    return model_->forward_layers(x, pos, it->second, first_, last_, opt);
  }

  std::shared_ptr<const Model> model_;
  int first_ = 0, last_ = 0;
  Model::LayerRangeOptions options_;
  std::map<CacheKey, KvCache> caches_;
};

const sched::StageKindRegistration kLayerStage("llm.layers", [](const nlohmann::json& c) {
  return std::make_unique<LayerStage>(c);
});

}  // namespace
}  // namespace tandem::llm
