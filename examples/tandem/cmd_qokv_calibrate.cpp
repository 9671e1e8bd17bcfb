// SPDX-License-Identifier: Apache-2.0
// `tandem qokv-calibrate -m MODEL -f TEXT -o FILE`: QoKV's offline calibration (spec llm.md 2.3)
// on samples of a text: each sample of --seqlen tokens is prefilled once; a ScopedAttentionTap
// records every layer's post-RoPE queries and the cache gives its keys and values; per layer,
// calibrate_qokv_layer() derives the contiguous group fractions (1-D k-means of the most attended
// positions) and the per-channel K/V scales (clipping sweep minimising the QK^T error of 4-bit
// keys). The JSON file is what `--kv-policy qokv --kv-calibration FILE` reads.
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "commands.h"
#include "model_path.h"
#include "report.h"
#include "tandem/core/backend.h"
#include "tandem/core/error.h"
#include "tandem/llm/kv_quant.h"
#include "tandem/llm/model.h"
#include "tandem/llm/tokenizer.h"
#include "tandem/llm/vocab.h"

namespace tandem::cli {
namespace {

struct QokvCalibrateOptions {
  std::string model, file, output;
  int samples = 4;
  int seqlen = 512;
  int groups = 10;
  int value_group = 64;
  int threads = 0;
  bool no_scales = false;
  bool no_progress = false;
};

int run_qokv_calibrate(const QokvCalibrateOptions& o) {
  if (o.threads > 0) set_cpu_num_threads(o.threads);
  const std::string path = resolve_model_path(o.model, !o.no_progress);
  const llm::Model model = llm::Model::load(path);
  const llm::ModelConfig& c = model.config();
  std::ifstream in(o.file, std::ios::binary);
  if (!in) throw IoError(cat("qokv-calibrate: cannot open text file '", o.file, "'"));
  std::ostringstream ss;
  ss << in.rdbuf();
  const llm::Tokenizer tokenizer(llm::load_vocab(model.file()));
  const std::vector<int32_t> tokens = tokenizer.encode(ss.str(), true, false);
  const int64_t need = int64_t{o.samples} * o.seqlen;
  if (static_cast<int64_t>(tokens.size()) < need) {
    throw InvalidArgument(cat("qokv-calibrate: '", o.file, "' has ", tokens.size(), " tokens; ",
                              o.samples, " samples of ", o.seqlen, " need ", need));
  }
  llm::KvCache probe = model.make_cache();
  const llm::KvCacheShape cs = probe.shape();
  const int64_t d = cs.head_dim, hkv = cs.n_kv_heads;
  // samples[layer][sample]
  std::vector<std::vector<llm::QokvSample>> per_layer(static_cast<size_t>(cs.n_layers));
  const int64_t stride = static_cast<int64_t>(tokens.size()) / o.samples;  // spread over the text
  Progress progress(!o.no_progress);
  for (int s = 0; s < o.samples; ++s) {
    progress.update(cat("qokv-calibrate: sample ", s + 1, "/", o.samples));
    const auto first = tokens.begin() + s * stride;
    std::vector<int32_t> ids(first, first + o.seqlen), pos(static_cast<size_t>(o.seqlen));
    for (int i = 0; i < o.seqlen; ++i) pos[i] = i;
    std::vector<std::vector<float>> q(static_cast<size_t>(cs.n_layers));
    llm::KvCache cache = model.make_cache();
    {
      llm::ScopedAttentionTap tap(
          [&](const llm::KvCache&, int layer, const Tensor& qt, std::span<const int32_t>) {
            const Tensor qc = qt.contiguous();
            q[layer].insert(q[layer].end(), qc.data<float>(), qc.data<float>() + qc.numel());
          });
      model.forward(ids, pos, cache, {.last_only = true});
    }
    for (int l = 0; l < cs.n_layers; ++l) {
      llm::QokvSample smp;
      smp.n = o.seqlen;
      smp.q = std::move(q[l]);
      smp.k.resize(static_cast<size_t>(o.seqlen * hkv * d));
      smp.v.resize(smp.k.size());
      std::vector<float> k, v;
      for (int h = 0; h < hkv; ++h) {
        int64_t t = 0;
        for (const llm::KvBlock& b : cache.blocks(l, h)) {
          llm::kv_block_rows(cache, l, h, b, k, v);
          for (int r = 0; r < b.used; ++r, ++t) {
            std::copy_n(k.data() + r * d, d, smp.k.data() + (t * hkv + h) * d);
            std::copy_n(v.data() + r * d, d, smp.v.data() + (t * hkv + h) * d);
          }
        }
      }
      per_layer[l].push_back(std::move(smp));
    }
  }
  llm::QokvCalibration cal;
  cal.model = cat(c.name, " on ", o.file, ": ", o.samples, " x ", o.seqlen, " tokens");
  cal.n_layers = cs.n_layers;
  cal.n_kv_heads = cs.n_kv_heads;
  cal.head_dim = cs.head_dim;
  llm::QokvCalibrationOptions co;
  co.groups = o.groups;
  co.channel_scales = !o.no_scales;
  co.value_group = o.value_group;
  cal.value_group = o.value_group;
  for (int l = 0; l < cs.n_layers; ++l) {
    progress.update(cat("qokv-calibrate: layer ", l + 1, "/", cs.n_layers));
    cal.layers.push_back(
        llm::calibrate_qokv_layer(per_layer[l], c.n_heads, cs.n_kv_heads, cs.head_dim, co));
    per_layer[l].clear();
  }
  llm::save_qokv_calibration(cal, o.output);
  std::printf("| model | text | samples | seqlen | groups | scaled K channels | file |\n");
  std::printf("|---|---|---:|---:|---:|---:|---|\n");
  int64_t scaled = 0;
  for (const auto& l : cal.layers) {
    for (const auto& h : l.k_scale) {
      for (float x : h) scaled += x > 1.0f;
    }
  }
  std::printf("| %s | %s | %d | %d | %d | %lld | %s |\n", c.name.c_str(), o.file.c_str(), o.samples,
              o.seqlen, o.groups, static_cast<long long>(scaled), o.output.c_str());
  return 0;
}

const CommandRegistration kReg([](CLI::App& app) {
  auto o = std::make_shared<QokvCalibrateOptions>();
  CLI::App* sub = app.add_subcommand(
      "qokv-calibrate",
      "QoKV offline calibration (group fractions, channel scales) to a JSON file");
  sub->add_option("-m,--model", o->model,
                  "GGUF model file (default: SmolLM2-135M-Instruct, fetched on first use)");
  sub->add_option("-f,--file", o->file, "Calibration text (UTF-8)")
      ->required()
      ->check(CLI::ExistingFile);
  sub->add_option("-o,--output", o->output, "Calibration file to write (JSON)")->required();
  sub->add_option("--samples", o->samples, "Samples taken evenly from the text")
      ->check(CLI::Range(1, 4096));
  sub->add_option("--seqlen", o->seqlen, "Tokens per sample")->check(CLI::Range(16, 1 << 16));
  sub->add_option("--groups", o->groups, "Contiguous position groups")->check(CLI::Range(1, 256));
  sub->add_flag("--no-scales", o->no_scales, "All channel scales 1 (the ablation)");
  sub->add_option("--value-group", o->value_group,
                  "Value quantizer the V scales are searched for (and the policy's default): 0 "
                  "symmetric per token, else affine 4-bit per this many channels")
      ->check(CLI::Range(0, 4096));
  sub->add_option("-t,--threads", o->threads, "CPU threads (0: the default)")
      ->check(CLI::NonNegativeNumber);
  sub->add_flag("--no-progress", o->no_progress, "No progress on stderr");
  return Command{sub, [o] { return run_qokv_calibrate(*o); }};
});

}  // namespace
}  // namespace tandem::cli
