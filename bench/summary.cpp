// SPDX-License-Identifier: Apache-2.0
#include "summary.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>

namespace tandem::bench {
namespace {

// Best of the repetitions: a shared machine only ever slows a run down, so the maximum rate is the
// steadiest estimate of what the code can do (the JSON report keeps the medians as well).
double best(const std::vector<double>& v) {
  return v.empty() ? NAN : *std::max_element(v.begin(), v.end());
}

std::string fmt(double v, int decimals = 1) {
  if (std::isnan(v)) return "–";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, v);
  return buf;
}

std::string pct(double share) { return std::isnan(share) ? "–" : fmt(100.0 * share, 0) + "%"; }

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep)) parts.push_back(item);
  return parts;
}

struct Key {
  std::string kind, case_name, threads, impl;
};

bool parse_name(const std::string& name, Key* key) {
  const auto parts = split(name, '/');
  if (parts.size() != 4) return false;
  *key = {parts[0], parts[1], parts[2], parts[3]};
  return true;
}

}  // namespace

CollectingReporter::CollectingReporter(std::unique_ptr<benchmark::BenchmarkReporter> display)
    : display_(std::move(display)) {}

bool CollectingReporter::ReportContext(const Context& context) {
  return display_->ReportContext(context);
}

void CollectingReporter::ReportRuns(const std::vector<Run>& report) {
  for (const Run& r : report) {
    if (r.run_type != Run::RT_Iteration) continue;
    std::string name = r.run_name.str();
    const std::string suffix = "/real_time";
    if (name.size() > suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      name.resize(name.size() - suffix.size());
    }
    auto [it, inserted] = runs_.try_emplace(name);
    if (inserted) order_.push_back(name);
    Samples& s = it->second;
    s.family_index = r.family_index;
    if (r.error_occurred) {
      s.error = r.error_message;
      continue;
    }
    auto take = [&](const char* counter, std::vector<double>& into) {
      auto c = r.counters.find(counter);
      if (c != r.counters.end()) into.push_back(c->second.value);
    };
    take("gflops", s.gflops);
    take("gbytes", s.gbytes);
    take("peak_share", s.peak_share);
    take("bw_share", s.bw_share);
  }
  display_->ReportRuns(report);
}

void CollectingReporter::Finalize() { display_->Finalize(); }

void CollectingReporter::print_summary(std::ostream& os) const {
  // Group compute-bound cases (several implementations) and tandem-only cases.
  const std::set<std::string> compared_kinds{"gemm", "conv3x3"};
  std::vector<std::string> compared_order, single_order;
  std::map<std::string, std::map<std::string, const Samples*>>
      compared;  // group -> impl -> samples
  std::vector<std::string> errors;
  // Random interleaving reports in random order: list in registration order.
  std::vector<std::string> order = order_;
  std::stable_sort(order.begin(), order.end(), [&](const std::string& a, const std::string& b) {
    return runs_.at(a).family_index < runs_.at(b).family_index;
  });
  for (const std::string& name : order) {
    const Samples& s = runs_.at(name);
    if (!s.error.empty()) errors.push_back(name + ": " + s.error);
    Key k;
    if (!parse_name(name, &k)) continue;
    if (compared_kinds.count(k.kind)) {
      const std::string group = k.kind + "/" + k.case_name + "/" + k.threads;
      if (!compared.count(group)) compared_order.push_back(group);
      compared[group][k.impl] = &s;
    } else {
      single_order.push_back(name);
    }
  }

  auto top = [](const Samples* s, int which) {
    if (!s) return static_cast<double>(NAN);
    switch (which) {
      case 0:
        return best(s->gflops);
      case 1:
        return best(s->gbytes);
      case 2:
        return best(s->peak_share);
      default:
        return best(s->bw_share);
    }
  };

  if (!compared_order.empty()) {
    os << "\n## Compute-bound: GFLOP/s (best of the repetitions) and ratios\n\n"
       << "| kind | case | threads | tandem | oneDNN | OpenBLAS | oneDNN blocked | tandem/oneDNN | "
          "tandem/OpenBLAS | tandem/best | tandem % FMA peak |\n"
       << "|---|---|---|---|---|---|---|---|---|---|---|\n";
    // Geometric mean of tandem/best per kind and thread count.
    std::map<std::string, std::pair<double, int>> geo;
    std::map<std::string, int> below;
    for (const std::string& group : compared_order) {
      const auto parts = split(group, '/');
      const auto& impls = compared.at(group);
      auto get = [&](const char* impl) {
        auto it = impls.find(impl);
        return it == impls.end() ? static_cast<const Samples*>(nullptr) : it->second;
      };
      const double t = top(get("tandem"), 0), d = top(get("onednn"), 0),
                   b = top(get("openblas"), 0), db = top(get("onednn_blocked"), 0);
      double peer = NAN;
      if (!std::isnan(d)) peer = d;
      if (!std::isnan(b) && (std::isnan(peer) || b > peer)) peer = b;
      const double ratio = t / peer;
      os << "| " << parts[0] << " | " << parts[1] << " | " << parts[2].substr(1) << " | " << fmt(t)
         << " | " << fmt(d) << " | " << fmt(b) << " | " << fmt(db) << " | " << fmt(t / d, 2)
         << " | " << fmt(t / b, 2) << " | " << fmt(ratio, 2) << " | " << pct(top(get("tandem"), 2))
         << " |\n";
      if (!std::isnan(ratio) && ratio > 0) {
        auto& g = geo[parts[0] + " t" + parts[2].substr(1)];
        g.first += std::log(ratio);
        g.second += 1;
        if (ratio < 0.9) below[parts[0] + " t" + parts[2].substr(1)] += 1;
      }
    }
    os << "\n| kind, threads | cases | geomean tandem/best | cases below 0.9x "
          "|\n|---|---|---|---|\n";
    for (const auto& [key, g] : geo) {
      os << "| " << key << " | " << g.second << " | " << fmt(std::exp(g.first / g.second), 2)
         << " | " << (below.count(key) ? below.at(key) : 0) << " |\n";
    }
  }

  if (!single_order.empty()) {
    os << "\n## Memory-bound and attention (tandem): best of the repetitions\n\n"
       << "| kind | case | threads | GFLOP/s | % FMA peak | GB/s | % triad bandwidth |\n"
       << "|---|---|---|---|---|---|---|\n";
    for (const std::string& name : single_order) {
      Key k;
      parse_name(name, &k);
      const Samples* s = &runs_.at(name);
      os << "| " << k.kind << " | " << k.case_name << " | " << k.threads.substr(1) << " | "
         << fmt(top(s, 0)) << " | " << pct(top(s, 2)) << " | " << fmt(top(s, 1)) << " | "
         << pct(top(s, 3)) << " |\n";
    }
  }

  if (!errors.empty()) {
    os << "\n## Failed or skipped benchmarks\n\n";
    for (const std::string& e : errors) os << "- " << e << "\n";
  }
}

}  // namespace tandem::bench
