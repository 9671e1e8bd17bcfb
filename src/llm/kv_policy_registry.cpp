// SPDX-License-Identifier: Apache-2.0
// The KV-policy registry and the chain policy that runs several policies' hooks in order.
#include "tandem/llm/kv_policy_registry.h"

#include <algorithm>
#include "tandem/core/error.h"
#include "tandem/core/registry.h"

namespace tandem::llm {
namespace {

struct Entry {
  std::string description;
  KvPolicyFactory factory;
  std::vector<std::string> settings;  // the extra keys the factory reads
};

Registry<Entry>& registry() {
  static Registry<Entry> r("KV policy");  // built on first use: registrations in any order work
  return r;
}

// Runs the hooks of its members left to right.
class ChainPolicy final : public KvPolicy {
 public:
  explicit ChainPolicy(std::vector<std::shared_ptr<KvPolicy>> members)
      : members_(std::move(members)) {}
  std::string name() const override {
    std::string n;
    for (const auto& m : members_) {
      if (!n.empty()) n += '+';
      n += m->name();
    }
    return n;
  }
  void on_prefill_done(KvCache& cache) override {
    for (auto& m : members_) m->on_prefill_done(cache);
  }
  void on_decode_step(KvCache& cache) override {
    for (auto& m : members_) m->on_decode_step(cache);
  }
  int query_window() const override {
    int w = 0;
    for (const auto& m : members_) w = std::max(w, m->query_window());
    return w;
  }
  bool observes_decode_queries() const override {
    return std::any_of(members_.begin(), members_.end(),
                       [](const auto& m) { return m->observes_decode_queries(); });
  }
  void observe_queries(const KvCache& cache, int layer, const Tensor& q,
                       std::span<const int32_t> positions, bool prefill) override {
    const int64_t rows = q.shape()[0];
    for (auto& m : members_) {
      if (!prefill) {
        if (m->observes_decode_queries()) m->observe_queries(cache, layer, q, positions, false);
        continue;
      }
      const int w = m->query_window();
      if (w <= 0) continue;
      if (w < rows) {  // the member asked for fewer rows: give it the last w
        m->observe_queries(cache, layer, q.slice(0, rows - w, rows),
                           positions.subspan(positions.size() - w), true);
      } else {
        m->observe_queries(cache, layer, q, positions, true);
      }
    }
  }

 private:
  std::vector<std::shared_ptr<KvPolicy>> members_;
};

std::string names_list() {
  std::string s;
  for (const std::string& name : registry().names()) s += (s.empty() ? "" : ", ") + name;
  return s.empty() ? "(none)" : s;
}

}  // namespace

void register_kv_policy(const std::string& name, const std::string& description,
                        KvPolicyFactory factory, std::vector<std::string> settings) {
  if (name.empty() || name.find('+') != std::string::npos)
    throw InvalidArgument("register_kv_policy: bad policy name '" + name + "'");
  if (!factory) throw InvalidArgument("register_kv_policy: '" + name + "' has no factory");
  registry().add(name, Entry{description, std::move(factory), std::move(settings)});
}

namespace {

std::string joined(const std::vector<std::string>& items) {
  std::string s;
  for (const std::string& item : items) {
    if (!s.empty()) s += ", ";
    s += item;
  }
  return s;
}

// The members of a spec ("clusterattn+qokv" -> clusterattn, qokv).
std::vector<std::string> spec_parts(const std::string& spec) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    const size_t plus = spec.find('+', start);
    parts.push_back(spec.substr(start, plus == std::string::npos ? plus : plus - start));
    if (plus == std::string::npos) break;
    start = plus + 1;
  }
  return parts;
}

// The registry entry of one member; InvalidArgument naming the spec for an unknown name.
Entry entry_of(const std::string& part, const std::string& spec) {
  if (!registry().contains(part))
    throw InvalidArgument("unknown KV policy '" + part + "' in '" + spec +
                          "' (registered: " + names_list() + ")");
  return registry().get(part);
}

}  // namespace

void check_kv_settings(const std::vector<std::string>& specs,
                       const std::map<std::string, std::string>& extra, const std::string& flag) {
  std::vector<std::string> known;
  for (const std::string& spec : specs)
    for (const std::string& part : spec_parts(spec))
      for (const std::string& s : entry_of(part, spec).settings) known.push_back(s);
  for (const auto& [key, value] : extra) {
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    throw InvalidArgument(cat(flag, " '", key, "=", value, "': '", key, "' is not a setting of ",
                              joined(specs), " (settings: ", known.empty() ? "none" : joined(known),
                              ")"));
  }
}

std::shared_ptr<KvPolicy> make_kv_policy(const std::string& spec, const KvPolicyOptions& options,
                                         const KvCacheShape& shape) {
  std::vector<std::shared_ptr<KvPolicy>> members;
  for (const std::string& part : spec_parts(spec)) {
    const KvPolicyFactory factory = entry_of(part, spec).factory;
    KvPolicyOptions member_options = options;
    if (auto c = options.calibration_by_policy.find(part); c != options.calibration_by_policy.end())
      member_options.calibration_path = c->second;
    auto policy = factory(member_options, shape);
    if (!policy) throw InvalidArgument("KV policy '" + part + "': factory returned nothing");
    members.push_back(std::move(policy));
  }
  if (members.size() == 1) return members.front();
  return std::make_shared<ChainPolicy>(std::move(members));
}

void set_kv_calibration(KvPolicyOptions& options, const std::string& arg) {
  size_t start = 0;
  while (start <= arg.size()) {
    const size_t comma = arg.find(',', start);
    const std::string item =
        arg.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (item.empty()) throw InvalidArgument("--kv-calibration '" + arg + "': empty item");
    const size_t eq = item.find('=');
    const std::string name = eq == std::string::npos ? "" : item.substr(0, eq);
    const bool named = !name.empty() && name.find('/') == std::string::npos;
    if (named) {
      if (!registry().contains(name))
        throw InvalidArgument("--kv-calibration '" + item + "': unknown KV policy '" + name +
                              "' (registered: " + names_list() + ")");
      if (eq + 1 >= item.size())
        throw InvalidArgument("--kv-calibration '" + item + "': no file after '='");
      options.calibration_by_policy[name] = item.substr(eq + 1);
    } else {
      options.calibration_path = item;
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
}

std::vector<KvPolicyInfo> kv_policies() {
  std::vector<KvPolicyInfo> out;
  for (const auto& [name, e] : registry().entries()) out.push_back({name, e.description});
  return out;
}

// The baseline: keeps everything.
static KvPolicyRegistration full_registration("full",
                                              "keeps every token (the uncompressed reference)",
                                              [](const KvPolicyOptions&, const KvCacheShape&) {
                                                return std::make_shared<FullCachePolicy>();
                                              });

}  // namespace tandem::llm
