// SPDX-License-Identifier: Apache-2.0
// The "cnn.tiles" stage kind: runs a segment of an edge plan (tandem/cnn/edge/plan.h,
// to_pipeline_plan) on one device, and its split / stitch for stages that run on a group of
// devices (sched/stage.h GroupOps), so `sched::Pipeline` and `tandem worker` run PICO, LW, EFL,
// OFL and PipeEdge plans.
//
// Config: {"kind": "cnn.tiles", "model": ONNX path, "from": tensor name, "to": tensor name,
//          "threads": T (optional), "share": {"rows": [h0, h1], "cols": [w0, w1]}
//                                           | {"tiles": [{"rows", "cols"}, ...]} (optional)}.
// A packet carries one tensor: the stage's input `from`, whole, or (a group member's part) the
// region meta["region"] = [h0, h1, w0, w1] of it. A member computes its share's tiles of `to`
// with Executor::run_region from that input alone (halo recomputed) and returns them with
// meta["regions"]; without a share the stage computes the whole `to`. Split crops, for each
// member, the input region its tiles need (the hull over its tiles); stitch copies the tiles into
// the whole `to`. Row bands are bit-identical to the single-device run (the engine's guarantee).
// Departures: Winograd is off in these stages, so coordinator and workers agree on every region
// without a kernel-choice step; feature shares (LW's fully connected split) are not run (refused).
#include <map>
#include <memory>
#include <mutex>

#include "tandem/cnn/executor.h"
#include "tandem/cnn/onnx_import.h"
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
  static std::map<std::string, std::shared_ptr<const Graph>> graphs;
  static std::map<std::string, std::shared_ptr<const Segment>> segments;
  std::lock_guard lock(mutex);
  auto& seg = segments[model + '\n' + from + '\n' + to];
  if (seg) return seg;
  auto& g = graphs[model];
  if (!g) g = std::make_shared<const Graph>(import_onnx(model));
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

// The output tiles a share asks for (the whole output without one).
std::vector<Region> tiles_of(const nlohmann::json& share, const Region& full) {
  if (share.is_null() || share.empty()) return {full};
  if (!share.is_object()) throw InvalidArgument("cnn.tiles: a share must be an object");
  if (share.contains("channels"))
    throw InvalidArgument(
        "cnn.tiles: channel shares (a layer split by output channels or features) "
        "are not run yet");
  if (!share.contains("tiles")) return {region_of(share, full)};
  std::vector<Region> out;
  if (!share["tiles"].is_array() || share["tiles"].empty())
    throw InvalidArgument("cnn.tiles: 'tiles' must be a non-empty array");
  for (const auto& t : share["tiles"]) out.push_back(region_of(t, full));
  return out;
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

// The input region `tiles` of the segment's output need.
Region input_needed(const Segment& s, const std::vector<Region>& tiles) {
  Region need;
  for (const Region& t : tiles)
    need = hull(need, required_regions(*s.graph, s.nodes, {{s.to, t}})[s.from]);
  return need;
}

class TilesStage final : public sched::Stage {
 public:
  explicit TilesStage(const nlohmann::json& c)
      : seg_(*segment_of(c)),
        exec_(*seg_.graph, {.threads = c.value("threads", 1), .winograd = false}),
        tiles_(tiles_of(c.value("share", nlohmann::json()),
                        full_region(seg_.graph->tensor(seg_.to).shape))) {}

  std::string kind() const override { return "cnn.tiles"; }

  sched::Packet process(sched::Packet p) override {
    if (p.tensors.size() != 1) throw InvalidArgument("cnn.tiles: a packet carries one tensor");
    const Shape& in_shape = seg_.graph->tensor(seg_.from).shape;
    const Region have =
        p.meta.contains("region") ? from_json(p.meta["region"]) : full_region(in_shape);
    std::map<int, Tile> inputs{{seg_.from, Tile{p.tensors[0], have}}};
    std::vector<Tensor> out;
    nlohmann::json regions = nlohmann::json::array();
    for (const Region& t : tiles_) {
      out.push_back(exec_.run_region(seg_.nodes, inputs, {{seg_.to, t}}).at(seg_.to).data);
      regions.push_back(to_json(t));
    }
    p.tensors = std::move(out);
    p.meta.erase("region");
    p.meta["regions"] = regions;
    return p;
  }

 private:
  Segment seg_;
  Executor exec_;
  std::vector<Region> tiles_;
};

std::vector<sched::Packet> split(const sched::Packet& in, const nlohmann::json& config,
                                 const std::vector<nlohmann::json>& shares) {
  const std::shared_ptr<const Segment> held = segment_of(config);
  const Segment& seg = *held;
  const Region full_out = full_region(seg.graph->tensor(seg.to).shape);
  if (in.tensors.size() != 1) throw InvalidArgument("cnn.tiles: a packet carries one tensor");
  std::vector<sched::Packet> parts;
  for (const auto& share : shares) {
    const Region need = input_needed(seg, tiles_of(share, full_out));
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
  for (const sched::Packet& p : parts) {
    const auto& regions = p.meta.at("regions");
    if (regions.size() != p.tensors.size())
      throw InvalidArgument("cnn.tiles: a part's tiles and regions differ in number");
    for (size_t i = 0; i < p.tensors.size(); ++i) {
      const Region r = from_json(regions[i]);
      if (shape.rank() != 4) {
        whole = p.tensors[i];
        continue;
      }
      Tensor dst = whole.slice(2, r.h0, r.h1).slice(3, r.w0, r.w1);
      dst.copy_from(p.tensors[i]);
    }
  }
  sched::Packet out = std::move(parts.at(0));
  out.tensors = {whole};
  out.meta.erase("regions");
  return out;
}

const sched::StageKindRegistration kTiles("cnn.tiles", [](const nlohmann::json& c) {
  return std::make_unique<TilesStage>(c);
});
const Registration kTilesGroup(sched::group_ops_registry(), "cnn.tiles",
                               sched::GroupOps{split, stitch});

}  // namespace
}  // namespace tandem::cnn::edge
