// SPDX-License-Identifier: Apache-2.0
// An edge-cloud plan as JSON and as a markdown table (tandem/cnn/edge/edge_cloud.h).
#include <cstdio>

#include "tandem/cnn/edge/edge_cloud.h"

namespace tandem::cnn::edge {
namespace {

std::string format_number(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// "first .. last (n)" of a node list, or "-".
std::string node_span(const Graph& g, const std::vector<int>& nodes) {
  if (nodes.empty()) return "-";
  return g.node(nodes.front()).name + " .. " + g.node(nodes.back()).name + " (" +
         std::to_string(nodes.size()) + ")";
}

}  // namespace

nlohmann::json EdgeCloudPlan::to_json(const EdgeCloudProblem& pb, bool lists) const {
  const Graph& g = *pb.graph;
  const EdgeCloudMetrics& m = metrics;
  nlohmann::json j = {{"system", system},
                      {"edge", pb.edge.name},
                      {"cloud", pb.cloud.name},
                      {"link",
                       {{"bandwidth_bytes_per_s", pb.link.bandwidth_bytes_per_s},
                        {"latency_s", pb.link.latency_s}}},
                      {"predicted",
                       {{"edge_s", m.edge_s},
                        {"upload_s", m.upload_s},
                        {"cloud_s", m.cloud_s},
                        {"serial_s", m.serial_s},
                        {"makespan_s", m.makespan_s},
                        {"bytes_up", m.bytes_up}}},
                      {"planner_s", m.planner_s},
                      {"notes", notes}};
  if (!lists) {
    j["edge_nodes"] = edge_nodes.size();
    j["cloud_nodes"] = cloud_nodes.size();
    nlohmann::json up = nlohmann::json::array();
    for (int t : uploads) up.push_back(g.tensor(t).name);
    j["uploads"] = up;
    return j;
  }
  nlohmann::json e = nlohmann::json::array(), c = nlohmann::json::array(),
                 u = nlohmann::json::array();
  for (int v : edge_nodes) e.push_back(g.node(v).name);
  for (int v : cloud_nodes) c.push_back(g.node(v).name);
  for (int t : uploads) u.push_back({{"tensor", g.tensor(t).name}, {"bytes", pb.tensor_bytes(t)}});
  j["edge_nodes"] = e;
  j["uploads"] = u;
  j["cloud_nodes"] = c;
  return j;
}

std::string format_table(const EdgeCloudPlan& p, const EdgeCloudProblem& pb) {
  const Graph& g = *pb.graph;
  const EdgeCloudMetrics& m = p.metrics;
  std::string s = "| " + p.system + " | nodes, in order | predicted s |\n|---|---|---:|\n";
  s += "| edge (" + pb.edge.name + ") | " + node_span(g, p.edge_nodes) + " | " +
       format_number("%.4f", m.edge_s) + " |\n";
  std::string up;
  for (int t : p.uploads)
    up += (up.empty() ? "" : ", ") + g.tensor(t).name + " " +
          format_number("%.3f MB", pb.tensor_bytes(t) / 1e6);
  s += "| uplink " + format_number("%.2f Mbps", pb.link.bandwidth_bytes_per_s * 8 / 1e6) + " | " +
       (up.empty() ? "-" : up) + " | " + format_number("%.4f", m.upload_s) + " |\n";
  s += "| cloud (" + pb.cloud.name + ") | " + node_span(g, p.cloud_nodes) + " | " +
       format_number("%.4f", m.cloud_s) + " |\n";
  s += "| T_e + T_t + T_c | | " + format_number("%.4f", m.serial_s) + " |\n";
  s += "| **end-to-end delay** (pipelined) | | **" + format_number("%.4f", m.makespan_s) + "** |\n";
  if (!p.notes.empty()) s += "\nnotes: " + p.notes.dump() + "\n";
  return s;
}

}  // namespace tandem::cnn::edge
