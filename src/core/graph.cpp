// SPDX-License-Identifier: Apache-2.0
// Graph IR: nodes, edges, deterministic topological order, validation, JSON and DOT.
#include "tandem/core/graph.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <queue>
#include <set>

#include "core/json_reader.h"
#include "tandem/core/error.h"

namespace tandem {

using nlohmann::json;

double OpNode::arithmetic_intensity() const {
  const double b = bytes_moved();
  return b > 0 ? flops / b : 0.0;
}

int64_t OpNode::output_bytes() const {
  int64_t total = 0;
  for (const Shape& s : output_shapes) total += dtype_row_bytes(dtype, s.numel());
  return total;
}

int Graph::add_node(OpNode node) {
  if (node.name.empty())
    throw InvalidArgument(cat("graph '", name_, "': node ", size(), " has no name"));
  if (by_name_.count(node.name))
    throw InvalidArgument(cat("graph '", name_, "': duplicate node name '", node.name, "' (ids ",
                              by_name_.at(node.name), " and ", size(), ")"));
  node.id = size();
  by_name_[node.name] = node.id;
  nodes_.push_back(std::move(node));
  return nodes_.back().id;
}

void Graph::add_edge(int from, int to) {
  if (from < 0 || from >= size())
    throw NotFound(
        cat("graph '", name_, "': add_edge from node ", from, " (graph has ", size(), " nodes)"));
  node(to).inputs.push_back(from);
}

const OpNode& Graph::node(int id) const {
  if (id < 0 || id >= size())
    throw NotFound(cat("graph '", name_, "': no node ", id, " (graph has ", size(), " nodes)"));
  return nodes_[static_cast<size_t>(id)];
}

OpNode& Graph::node(int id) {
  return const_cast<OpNode&>(static_cast<const Graph&>(*this).node(id));
}

int Graph::find(const std::string& name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end() || it->second >= size() || nodes_[it->second].name != name) {
    // Names may have changed through node(id); fall back to a scan.
    for (const auto& n : nodes_)
      if (n.name == name) return n.id;
    return -1;
  }
  return it->second;
}

const OpNode& Graph::node(const std::string& name) const {
  const int id = find(name);
  if (id < 0) throw NotFound(cat("graph '", name_, "': no node named '", name, "'"));
  return nodes_[static_cast<size_t>(id)];
}

std::vector<std::pair<int, int>> Graph::edges() const {
  std::vector<std::pair<int, int>> out;
  for (const auto& n : nodes_)
    for (int in : n.inputs) out.emplace_back(in, n.id);
  return out;
}

std::vector<int> Graph::consumers(int id) const {
  node(id);
  std::vector<int> out;
  for (const auto& n : nodes_)
    if (std::find(n.inputs.begin(), n.inputs.end(), id) != n.inputs.end()) out.push_back(n.id);
  return out;
}

std::vector<int> Graph::sources() const {
  std::vector<int> out;
  for (const auto& n : nodes_)
    if (n.inputs.empty()) out.push_back(n.id);
  return out;
}

std::vector<int> Graph::sinks() const {
  std::vector<char> read(nodes_.size(), 0);
  for (const auto& n : nodes_)
    for (int in : n.inputs)
      if (in >= 0 && in < size()) read[static_cast<size_t>(in)] = 1;
  std::vector<int> out;
  for (const auto& n : nodes_)
    if (!read[static_cast<size_t>(n.id)]) out.push_back(n.id);
  return out;
}

namespace {

std::string node_label(const OpNode& n) { return cat("'", n.name, "' (id ", n.id, ")"); }

}  // namespace

std::vector<int> Graph::topological_order() const {
  const size_t n = nodes_.size();
  std::vector<int> indegree(n, 0);
  std::vector<std::vector<int>> out_edges(n);
  for (const auto& node : nodes_) {
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const int in = node.inputs[i];
      if (in < 0 || in >= size())
        throw InvalidArgument(cat("graph '", name_, "': node ", node_label(node), " input ", i,
                                  " is node ", in, ", which does not exist (graph has ", n,
                                  " nodes)"));
      ++indegree[static_cast<size_t>(node.id)];
      out_edges[static_cast<size_t>(in)].push_back(node.id);
    }
  }
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (size_t i = 0; i < n; ++i)
    if (indegree[i] == 0) ready.push(static_cast<int>(i));
  std::vector<int> order;
  order.reserve(n);
  while (!ready.empty()) {
    const int u = ready.top();
    ready.pop();
    order.push_back(u);
    for (int v : out_edges[static_cast<size_t>(u)])
      if (--indegree[static_cast<size_t>(v)] == 0) ready.push(v);
  }
  if (order.size() == n) return order;

  // Every node left has an unprocessed input; walking back along those inputs must revisit a node,
  // and the revisited stretch is a cycle.
  int start = -1;
  for (size_t i = 0; i < n && start < 0; ++i)
    if (indegree[i] > 0) start = static_cast<int>(i);
  std::vector<int> walk;
  std::vector<int> pos(n, -1);
  int u = start;
  while (pos[static_cast<size_t>(u)] < 0) {
    pos[static_cast<size_t>(u)] = static_cast<int>(walk.size());
    walk.push_back(u);
    int next = -1;
    for (int in : nodes_[static_cast<size_t>(u)].inputs)
      if (indegree[static_cast<size_t>(in)] > 0) {
        next = in;
        break;
      }
    u = next;
  }
  // walk[pos[u]..] follows inputs backwards; print it in data-flow direction.
  std::vector<int> cycle(walk.begin() + pos[static_cast<size_t>(u)], walk.end());
  std::reverse(cycle.begin(), cycle.end());
  std::string text;
  for (int id : cycle) text += cat("'", nodes_[static_cast<size_t>(id)].name, "' -> ");
  text += cat("'", nodes_[static_cast<size_t>(cycle.front())].name, "'");
  throw InvalidArgument(cat("graph '", name_, "': cycle through node ",
                            node_label(nodes_[static_cast<size_t>(cycle.front())]), ": ", text));
}

void Graph::validate() const {
  std::set<std::string> names;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const OpNode& node = nodes_[i];
    const std::string at = cat("graph '", name_, "': node ", node_label(node));
    if (node.id != static_cast<int>(i))
      throw InvalidArgument(cat(at, ": stored at position ", i, " but has id ", node.id));
    if (node.name.empty())
      throw InvalidArgument(cat("graph '", name_, "': node ", i, " has no name"));
    if (!names.insert(node.name).second) throw InvalidArgument(cat(at, ": duplicate node name"));
    if (node.kind.empty()) throw InvalidArgument(cat(at, ": empty op kind"));
    const std::pair<const char*, double> costs[] = {{"flops", node.flops},
                                                    {"bytes_read", node.bytes_read},
                                                    {"bytes_written", node.bytes_written},
                                                    {"param_bytes", node.param_bytes}};
    for (const auto& [field, v] : costs)
      if (!std::isfinite(v) || v < 0) throw InvalidArgument(cat(at, ": ", field, " is ", v));
    for (const Shape& s : node.output_shapes)
      for (int64_t d : s)
        if (d < 0) throw InvalidArgument(cat(at, ": negative output dimension in ", s.to_string()));
  }
  topological_order();  // dangling inputs and cycles
}

double Graph::total_flops() const {
  double t = 0;
  for (const auto& n : nodes_) t += n.flops;
  return t;
}
double Graph::total_bytes_read() const {
  double t = 0;
  for (const auto& n : nodes_) t += n.bytes_read;
  return t;
}
double Graph::total_bytes_written() const {
  double t = 0;
  for (const auto& n : nodes_) t += n.bytes_written;
  return t;
}
double Graph::total_param_bytes() const {
  double t = 0;
  for (const auto& n : nodes_) t += n.param_bytes;
  return t;
}

// ---- JSON ----

json Graph::to_json() const {
  json nodes = json::array();
  for (const auto& n : nodes_) {
    json j = json::object();
    j["name"] = n.name;
    j["kind"] = n.kind;
    json ins = json::array();
    for (int in : n.inputs) {
      if (in < 0 || in >= size())
        throw InvalidArgument(cat("graph '", name_, "': cannot serialise node ", node_label(n),
                                  ": input ", in, " does not exist"));
      ins.push_back(nodes_[static_cast<size_t>(in)].name);
    }
    j["inputs"] = std::move(ins);
    json outs = json::array();
    for (const Shape& s : n.output_shapes) outs.push_back(s.to_vector());
    j["outputs"] = std::move(outs);
    j["dtype"] = std::string(dtype_name(n.dtype));
    j["flops"] = n.flops;
    j["bytes_read"] = n.bytes_read;
    j["bytes_written"] = n.bytes_written;
    j["param_bytes"] = n.param_bytes;
    json attrs = json::object();
    for (const auto& [k, v] : n.attrs) attrs[k] = v;
    j["attrs"] = std::move(attrs);
    nodes.push_back(std::move(j));
  }
  return json{{"name", name_}, {"nodes", std::move(nodes)}};
}

Graph Graph::from_json(const json& j, const std::string& where) {
  using detail::JsonField;
  const JsonField root(j, where, "");
  root.expect_object({"name", "nodes"});
  Graph g(root.has("name") ? root.at("name").string() : "graph");
  const JsonField nodes = root.at("nodes");
  const size_t count = nodes.array_size();
  std::vector<std::vector<std::pair<std::string, JsonField>>> input_names(count);
  for (size_t i = 0; i < count; ++i) {
    const JsonField f = nodes[i];
    f.expect_object({"name", "kind", "inputs", "outputs", "dtype", "flops", "bytes_read",
                     "bytes_written", "param_bytes", "attrs"});
    OpNode n;
    const JsonField name = f.at("name");
    n.name = name.non_empty_string();
    if (g.find(n.name) >= 0) name.fail(cat("duplicate node name '", n.name, "'"));
    n.kind = f.at("kind").non_empty_string();
    if (f.has("inputs")) {
      const JsonField ins = f.at("inputs");
      for (size_t k = 0, e = ins.array_size(); k < e; ++k)
        input_names[i].emplace_back(ins[k].non_empty_string(), ins[k]);
    }
    if (f.has("outputs")) {
      const JsonField outs = f.at("outputs");
      for (size_t k = 0, e = outs.array_size(); k < e; ++k) {
        const JsonField dims = outs[k];
        const size_t rank = dims.array_size();
        if (rank > static_cast<size_t>(kMaxRank))
          dims.fail(cat("rank ", rank, " exceeds ", kMaxRank));
        Shape s;
        for (size_t d = 0; d < rank; ++d) s.push_back(dims[d].non_negative_integer());
        n.output_shapes.push_back(s);
      }
    }
    if (f.has("dtype")) {
      const JsonField dt = f.at("dtype");
      try {
        n.dtype = parse_dtype(dt.string());
      } catch (const InvalidArgument&) {
        dt.fail(cat("unknown dtype ", dt.shown()));
      }
    }
    if (f.has("flops")) n.flops = f.at("flops").non_negative_number();
    if (f.has("bytes_read")) n.bytes_read = f.at("bytes_read").non_negative_number();
    if (f.has("bytes_written")) n.bytes_written = f.at("bytes_written").non_negative_number();
    if (f.has("param_bytes")) n.param_bytes = f.at("param_bytes").non_negative_number();
    if (f.has("attrs"))
      for (const auto& [k, v] : f.at("attrs").members()) n.attrs[k] = v.value();
    g.add_node(std::move(n));
  }
  for (size_t i = 0; i < count; ++i)
    for (const auto& [in_name, field] : input_names[i]) {
      const int id = g.find(in_name);
      if (id < 0) field.fail(cat("unknown node '", in_name, "'"));
      g.nodes_[i].inputs.push_back(id);
    }
  try {
    g.validate();
  } catch (const InvalidArgument& e) {
    throw ParseError(where, -1, e.what());
  }
  return g;
}

// ---- DOT ----

namespace {

std::string dot_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

}  // namespace

std::string Graph::to_dot() const {
  std::string s =
      cat("digraph \"", dot_escape(name_), "\" {\n  node [shape=box, fontname=\"monospace\"];\n");
  for (const auto& n : nodes_) {
    std::string label = cat(n.name, "\n", n.kind);
    for (const Shape& o : n.output_shapes) label += cat("\n", o.to_string());
    if (n.flops > 0) {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%.3g GFLOP", n.flops / 1e9);
      label += cat("\n", buf);
    }
    s += cat("  n", n.id, " [label=\"", dot_escape(label), "\"];\n");
  }
  for (const auto& [from, to] : edges()) s += cat("  n", from, " -> n", to, ";\n");
  s += "}\n";
  return s;
}

}  // namespace tandem
