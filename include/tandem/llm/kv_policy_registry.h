// SPDX-License-Identifier: Apache-2.0
// KV-policy registry: names -> KvPolicy factories, so that `tandem generate --kv-policy NAME`,
// `tandem kv-eval` and library users build eviction (ClusterAttn, SnapKV, H2O, ...) and
// quantization (QoKV, KIVI, ...) policies the same way, and chain them ("clusterattn+qokv": the
// hooks of each run in order, so eviction first, then quantization of what is kept).
//
// Policies register themselves from their own source file with a static KvPolicyRegistration;
// nothing else needs editing to add one.
//
//   llm::KvPolicyOptions opt{.budget_tokens = 256};
//   auto policy = llm::make_kv_policy("clusterattn+qokv", opt, model.cache_shape());
//   llm::KvCache cache = model.make_cache(policy);
//
// Errors: an unknown name raises InvalidArgument listing the registered names; a factory raises
// InvalidArgument for options it cannot honour (e.g. an eviction policy without a budget).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tandem/export.h"
#include "tandem/llm/kv_cache.h"

namespace tandem::llm {

struct KvPolicyOptions {
  int64_t budget_tokens = 0;     // tokens kept per (layer, KV head); 0: use budget_ratio
  double budget_ratio = 0;       // fraction of the prompt kept when budget_tokens == 0
  int window = 32;               // observation window / recent tokens kept (policy-specific)
  std::string calibration_path;  // calibration JSON (ClusterAttn parameters, QoKV scales)
  // Per-policy calibration files for chains: policy name -> file; a member found here gets this
  // file as its calibration_path instead of the one above.
  std::map<std::string, std::string> calibration_by_policy;
  uint64_t seed = 0;                         // for randomised policies
  std::map<std::string, std::string> extra;  // policy-specific key=value settings
};

using KvPolicyFactory =
    std::function<std::shared_ptr<KvPolicy>(const KvPolicyOptions&, const KvCacheShape&)>;

struct KvPolicyInfo {
  std::string name;
  std::string description;  // one line for --help and kv-eval tables
};

// Registers a factory and the KvPolicyOptions::extra keys it reads (`settings`); InvalidArgument
// for an empty or repeated name or a name containing '+'.
TANDEM_API void register_kv_policy(const std::string& name, const std::string& description,
                                   KvPolicyFactory factory, std::vector<std::string> settings = {});
// Builds the policy named by `spec`: one registered name, or names joined by '+' (a chain whose
// hooks run left to right; query_window() is the largest of its members').
TANDEM_API std::shared_ptr<KvPolicy> make_kv_policy(const std::string& spec,
                                                    const KvPolicyOptions& options,
                                                    const KvCacheShape& shape);
// Reads a --kv-calibration argument into `options`: a file ("calib.json", for every member) or a
// comma-separated list of NAME=FILE ("clusterattn=c.json,qokv=q.json"), mixed as needed.
// InvalidArgument for an empty item or a NAME that is not a registered policy.
TANDEM_API void set_kv_calibration(KvPolicyOptions& options, const std::string& arg);
// Registered policies, sorted by name.
TANDEM_API std::vector<KvPolicyInfo> kv_policies();
// InvalidArgument naming `flag` when a key of `extra` is a setting of none of the policies that
// `specs` name (each a name or a '+' chain), or when a spec names an unknown policy. Factories
// ignore keys they do not read, so a typo ("windw=8") would otherwise be silently dropped.
TANDEM_API void check_kv_settings(const std::vector<std::string>& specs,
                                  const std::map<std::string, std::string>& extra,
                                  const std::string& flag);

// Static self-registration: `static KvPolicyRegistration reg("h2o", "...", factory);`
struct TANDEM_API KvPolicyRegistration {
  KvPolicyRegistration(const std::string& name, const std::string& description,
                       KvPolicyFactory factory, std::vector<std::string> settings = {}) {
    register_kv_policy(name, description, std::move(factory), std::move(settings));
  }
};

}  // namespace tandem::llm
