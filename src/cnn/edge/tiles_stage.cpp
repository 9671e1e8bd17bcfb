// SPDX-License-Identifier: Apache-2.0
// The "cnn.tiles" stage kind: runs a segment of an edge plan (tandem/cnn/edge/plan.h,
// to_pipeline_plan) on one device, and its split / stitch for stages that run on a group of
// devices (sched/stage.h GroupOps), so `sched::Pipeline` and `tandem worker` run PICO, LW, EFL,
// OFL and PipeEdge plans.
//
// Config: {"kind": "cnn.tiles", "model": ONNX path, "from": tensor name, "to": tensor name,
//          "threads": T (optional), "share": {"rows": [h0, h1], "cols": [w0, w1]}
//                                           | {"tiles": [{"rows", "cols"}, ...]} (optional),
//          with "channels": [c0, c1] in the share (optional; alone for a rank-2 `to`)}.
// A packet carries one tensor: the stage's input `from`, whole, or (a group member's part) the
// region meta["region"] = [h0, h1, w0, w1] of it. A member computes its share's tiles of `to`
// with Executor::run_region from that input alone (halo recomputed) and returns them with
// meta["regions"]; without a share the stage computes the whole `to`. A share with channels
// computes only those output channels of `to` (spec cnn.md §3.3: channel mode with the whole map,
// hybrid with a row band or tile; for a dense `to`, LW's output features): every earlier node
// runs on what they need (all channels, the halo'd region) and the engine slices the last convs
// or gemm; the tiles carry meta["channels"]. Split checks that the shares cover `to` exactly once
// (region x channels) and crops, for each member, the input region its tiles need (the hull over
// its tiles; channel shares receive every input channel); stitch writes every tile straight into
// its place in the whole `to` (a strided channel x row slice). Row bands and channel slices are
// bit-identical to the single-device run (the engine's guarantee; one-group slices of a grouped
// conv within 1e-5, executor.h). Departure: Winograd is off in these stages, so coordinator and
// workers agree on every region without a kernel-choice step.
#include <map>
#include <memory>
#include <mutex>

#include "cnn/edge/graph_cache.h"
#include "tandem/cnn/executor.h"
#include "tandem/cnn/region.h"
#include "tandem/core/error.h"
#include "tandem/core/registry.h"
#include "tandem/sched/stage.h"

namespace tandem::cnn::edge {
namespace {

struct Segment {
  std::shared_ptr<const Graph> graph;
  int from = -1, to = -1;
  std::vector<int> nodes;
};

std::string str(const nlohmann::json& c, const char* key) {
  if (!c.contains(key) || !c[key].is_string())
    throw InvalidArgument(cat("cnn.tiles: '", key, "' must be a string"));
  return c[key].get<std::string>();
}

// The segment a config names, built once per (model, from, to) in this process: every stage and
// every frame's split and stitch share it (the ONNX import and the node walk are not repeated).
std::shared_ptr<const Segment> segment_of(const nlohmann::json& c) {
  const std::string model = str(c, "model"), from = str(c, "from"), to = str(c, "to");
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<const Segment>> segments;
  std::lock_guard lock(mutex);
  auto& seg = segments[model + '\n' + from + '\n' + to];
  if (seg) return seg;
  const std::shared_ptr<const Graph> g = detail::cached_edge_graph(model);
  auto s = std::make_shared<Segment>();
  s->graph = g;
  s->from = g->find_tensor(from);
  s->to = g->find_tensor(to);
  if (s->from < 0 || s->to < 0)
    throw InvalidArgument(
        cat("cnn.tiles: tensor '", s->from < 0 ? from : to, "' is not in ", model));
  s->nodes = nodes_between(*g, s->from, s->to);
  seg = s;
  return seg;
}

Region region_of(const nlohmann::json& j, const Region& full) {
  auto pair = [&](const char* key, int64_t lo, int64_t hi) {
    if (!j.contains(key)) return std::pair{lo, hi};
    const auto& v = j[key];
    if (!v.is_array() || v.size() != 2 || !v[0].is_number_integer() || !v[1].is_number_integer() ||
        v[0].get<int64_t>() < lo || v[1].get<int64_t>() > hi ||
        v[0].get<int64_t>() >= v[1].get<int64_t>())
      throw InvalidArgument(
          cat("cnn.tiles: share '", key, "' ", v.dump(), " is not inside [", lo, ", ", hi, ")"));
    return std::pair{v[0].get<int64_t>(), v[1].get<int64_t>()};
  };
  const auto [h0, h1] = pair("rows", full.h0, full.h1);
  const auto [w0, w1] = pair("cols", full.w0, full.w1);
  return Region{h0, h1, w0, w1};
}

// One piece of a member's share of the segment's output: a region over a channel range.
struct Cell {
  Region region;
  Channels channels;
};

Channels channels_of(const nlohmann::json& share, const Shape& out, const Channels& all) {
  if (!share.contains("channels")) return all;
  const auto& v = share["channels"];
  if (!v.is_array() || v.size() != 2 || !v[0].is_number_integer() || !v[1].is_number_integer() ||
      v[0].get<int64_t>() < 0 || v[1].get<int64_t>() > full_channels(out).c1 ||
      v[0].get<int64_t>() >= v[1].get<int64_t>())
    throw InvalidArgument(cat("cnn.tiles: share 'channels' ", v.dump(),
                              " is not a non-empty range inside the output's ",
                              full_channels(out).c1, " channels ", out.to_string()));
  return {v[0].get<int64_t>(), v[1].get<int64_t>()};
}

// The cells a share asks for (the whole output without one): its region or each of its "tiles",
// over the tile's "channels", else the share's, else every channel.
std::vector<Cell> share_of(const nlohmann::json& share, const Shape& out) {
  const Region full = full_region(out);
  if (share.is_null() || share.empty()) return {{full, full_channels(out)}};
  if (!share.is_object()) throw InvalidArgument("cnn.tiles: a share must be an object");
  const Channels all = channels_of(share, out, full_channels(out));
  if (!share.contains("tiles")) return {{region_of(share, full), all}};
  if (!share["tiles"].is_array() || share["tiles"].empty())
    throw InvalidArgument("cnn.tiles: 'tiles' must be a non-empty array");
  std::vector<Cell> cells;
  for (const auto& t : share["tiles"])
    cells.push_back({region_of(t, full), channels_of(t, out, all)});
  return cells;
}

// The shares must cover every output element (row x column x channel) exactly once, or the
// stitched output would have holes or two writers.
void check_cover(const std::vector<std::vector<Cell>>& shares, const Shape& out) {
  std::vector<std::pair<Cell, size_t>> seen;
  int64_t covered = 0;
  for (size_t k = 0; k < shares.size(); ++k)
    for (const Cell& a : shares[k]) {
      for (const auto& [b, j] : seen)
        if (!intersect(a.region, b.region).empty() && a.channels.c0 < b.channels.c1 &&
            b.channels.c0 < a.channels.c1)
          throw InvalidArgument(cat("cnn.tiles: the shares of the stage's devices #", j, " and #",
                                    k, " (0-based, in plan order) overlap: ", b.region.to_string(),
                                    " ", b.channels.to_string(), " and ", a.region.to_string(), " ",
                                    a.channels.to_string()));
      seen.emplace_back(a, k);
      covered += a.region.rows() * a.region.cols() * a.channels.size();
    }
  const Region full = full_region(out);
  const int64_t total = full.rows() * full.cols() * full_channels(out).size();
  if (covered != total)
    throw InvalidArgument(cat("cnn.tiles: the shares cover ", covered, " of the ", total,
                              " (rows x columns x channels) elements of the output ",
                              out.to_string(), "; every one must be computed by one device"));
}

nlohmann::json to_json(const Region& r) { return {r.h0, r.h1, r.w0, r.w1}; }

Region from_json(const nlohmann::json& j) {
  if (!j.is_array() || j.size() != 4)
    throw InvalidArgument("cnn.tiles: a packet region must be [h0, h1, w0, w1]");
  return Region{j[0].get<int64_t>(), j[1].get<int64_t>(), j[2].get<int64_t>(), j[3].get<int64_t>()};
}

Tensor crop(const Tensor& t, const Region& r) {
  if (t.rank() != 4) return t;
  return t.slice(2, r.h0, r.h1).slice(3, r.w0, r.w1).contiguous();
}

// The input region `cells` of the segment's output need (every channel of it is sent).
Region input_needed(const Segment& s, const std::vector<Cell>& cells) {
  Region need;
  for (const Cell& c : cells)
    need = hull(need, required_regions(*s.graph, s.nodes, {{s.to, c.region}})[s.from]);
  return need;
}

nlohmann::json to_json(const Channels& c) { return {c.c0, c.c1}; }

class TilesStage final : public sched::Stage {
 public:
  explicit TilesStage(const nlohmann::json& c)
      : seg_(*segment_of(c)),
        exec_(*seg_.graph, {.threads = c.value("threads", 1), .winograd = false}),
        cells_(share_of(c.value("share", nlohmann::json()), seg_.graph->tensor(seg_.to).shape)) {}

  std::string kind() const override { return "cnn.tiles"; }

  sched::Packet process(sched::Packet p) override {
    if (p.tensors.size() != 1) throw InvalidArgument("cnn.tiles: a packet carries one tensor");
    const Shape& in_shape = seg_.graph->tensor(seg_.from).shape;
    const Region have =
        p.meta.contains("region") ? from_json(p.meta["region"]) : full_region(in_shape);
    std::map<int, Tile> inputs{{seg_.from, Tile{p.tensors[0], have}}};
    std::vector<Tensor> out;
    nlohmann::json regions = nlohmann::json::array(), channels = nlohmann::json::array();
    const Channels all = full_channels(seg_.graph->tensor(seg_.to).shape);
    for (const Cell& c : cells_) {
      std::map<int, Channels> part;
      if (!(c.channels == all)) part[seg_.to] = c.channels;
      out.push_back(
          exec_.run_region(seg_.nodes, inputs, {{seg_.to, c.region}}, part).at(seg_.to).data);
      regions.push_back(to_json(c.region));
      channels.push_back(to_json(c.channels));
    }
    p.tensors = std::move(out);
    p.meta.erase("region");
    p.meta["regions"] = regions;
    p.meta["channels"] = channels;
    return p;
  }

 private:
  Segment seg_;
  Executor exec_;
  std::vector<Cell> cells_;
};

std::vector<sched::Packet> split(const sched::Packet& in, const nlohmann::json& config,
                                 const std::vector<nlohmann::json>& shares) {
  const std::shared_ptr<const Segment> held = segment_of(config);
  const Segment& seg = *held;
  const Shape& out = seg.graph->tensor(seg.to).shape;
  if (in.tensors.size() != 1) throw InvalidArgument("cnn.tiles: a packet carries one tensor");
  std::vector<std::vector<Cell>> asked;
  for (const auto& share : shares) asked.push_back(share_of(share, out));
  check_cover(asked, out);
  std::vector<sched::Packet> parts;
  for (const std::vector<Cell>& cells : asked) {
    const Region need = input_needed(seg, cells);
    sched::Packet p = in;
    p.tensors = {crop(in.tensors[0], need)};
    p.meta["region"] = to_json(need);
    parts.push_back(std::move(p));
  }
  return parts;
}

sched::Packet stitch(std::vector<sched::Packet> parts, const nlohmann::json& config,
                     const std::vector<nlohmann::json>&) {
  const std::shared_ptr<const Segment> held = segment_of(config);
  const Segment& seg = *held;
  const Shape& shape = seg.graph->tensor(seg.to).shape;
  Tensor whole = Tensor::zeros(shape, DType::kF32);
  const Region full = full_region(shape);
  for (const sched::Packet& p : parts) {
    const auto& regions = p.meta.at("regions");
    const nlohmann::json channels = p.meta.value("channels", nlohmann::json::array());
    if (regions.size() != p.tensors.size() || channels.size() != p.tensors.size())
      throw InvalidArgument("cnn.tiles: a part's tiles, regions and channels differ in number");
    for (size_t i = 0; i < p.tensors.size(); ++i) {
      const Region r = from_json(regions[i]);
      const Channels c = channels_of({{"channels", channels[i]}}, shape, {});
      if (!full.contains(r))
        throw InvalidArgument(
            cat("cnn.tiles: a part's tile ", r.to_string(), " is outside ", full.to_string()));
      if (shape.rank() < 2) {
        whole = p.tensors[i];
        continue;
      }
      Tensor dst = whole.slice(1, c.c0, c.c1);  // the channel slice, then the rows and columns
      if (shape.rank() == 4) dst = dst.slice(2, r.h0, r.h1).slice(3, r.w0, r.w1);
      if (!(dst.shape() == p.tensors[i].shape()))
        throw InvalidArgument(cat("cnn.tiles: a part's tile ", p.tensors[i].shape().to_string(),
                                  " does not fit ", r.to_string(), " ", c.to_string(), " of ",
                                  shape.to_string()));
      dst.copy_from(p.tensors[i]);  // strided: written in place
    }
  }
  sched::Packet out = std::move(parts.at(0));
  out.tensors = {whole};
  out.meta.erase("regions");
  out.meta.erase("channels");
  return out;
}

const sched::StageKindRegistration kTiles("cnn.tiles", [](const nlohmann::json& c) {
  return std::make_unique<TilesStage>(c);
});
const Registration kTilesGroup(sched::group_ops_registry(), "cnn.tiles",
                               sched::GroupOps{split, stitch});

}  // namespace
}  // namespace tandem::cnn::edge
