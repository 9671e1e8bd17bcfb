// SPDX-License-Identifier: Apache-2.0
// DeviceProfile / LinkProfile / ClusterSpec: JSON round trip with strict, path-naming validation.
#include "tandem/core/cluster.h"

#include <cmath>
#include <set>
#include <utility>

#include "core/json_reader.h"
#include "tandem/core/error.h"

namespace tandem {
namespace {

using detail::JsonField;
using nlohmann::json;

// Plausible ranges for what a cluster file states; values outside them (a bandwidth of 1e-300
// B/s predicts latencies of 1e305 s) are refused as typos rather than planned with.
struct Range {
  double lo, hi;
  bool holds(double v) const { return v >= lo && v <= hi; }
};
constexpr Range kFlops{1e3, 1e18};      // FLOP/s
constexpr Range kBandwidth{1e3, 1e15};  // bytes/s, memory and links
constexpr Range kMemBytes{1e3, 1e16};   // bytes
constexpr Range kPowerW{0, 1e6};        // watts
constexpr Range kSpeedFactor{1e-3, 1e3};
constexpr Range kSeconds{0, 3600};  // link latency, profiled op latency

double read_in(const JsonField& f, Range r) { return f.in_range(f.number(), r.lo, r.hi); }
double read_positive_in(const JsonField& f, Range r) {
  return f.in_range(f.positive_number(), r.lo, r.hi);
}

DeviceProfile read_device(const JsonField& f) {
  f.expect_object({"name", "kind", "description", "peak_flops", "mem_bandwidth_bytes_per_s",
                   "mem_bytes", "power_w", "threads", "speed_factor", "op_latency_s"});
  DeviceProfile d;
  d.name = f.at("name").non_empty_string();
  if (f.has("kind")) {
    const JsonField k = f.at("kind");
    d.kind = k.string();
    if (d.kind != "cpu" && d.kind != "cuda")
      k.fail(cat("expected \"cpu\" or \"cuda\", got ", k.shown()));
  }
  if (f.has("description")) d.description = f.at("description").string();
  d.peak_flops = read_positive_in(f.at("peak_flops"), kFlops);
  d.mem_bandwidth_bytes_per_s = read_positive_in(f.at("mem_bandwidth_bytes_per_s"), kBandwidth);
  d.mem_bytes = read_positive_in(f.at("mem_bytes"), kMemBytes);
  if (f.has("power_w")) d.power_w = read_in(f.at("power_w"), kPowerW);
  if (f.has("threads")) {
    const JsonField t = f.at("threads");
    const int64_t n = t.positive_integer();
    if (n > (1 << 20)) t.fail(cat("expected a thread count, got ", n));
    d.threads = static_cast<int>(n);
  }
  if (f.has("speed_factor")) d.speed_factor = read_positive_in(f.at("speed_factor"), kSpeedFactor);
  if (f.has("op_latency_s")) {
    for (const auto& [key, v] : f.at("op_latency_s").members()) {
      if (key.empty()) v.fail("empty op key");
      d.op_latency_s[key] = read_positive_in(v, kSeconds);
    }
  }
  return d;
}

LinkProfile read_link(const JsonField& f) {
  f.expect_object({"from", "to", "bandwidth_bytes_per_s", "latency_s", "description"});
  LinkProfile l;
  l.from = f.at("from").non_empty_string();
  l.to = f.at("to").non_empty_string();
  l.bandwidth_bytes_per_s = read_positive_in(f.at("bandwidth_bytes_per_s"), kBandwidth);
  l.latency_s = read_in(f.at("latency_s"), kSeconds);
  if (f.has("description")) l.description = f.at("description").string();
  return l;
}

ClusterSpec read_cluster(const JsonField& f) {
  f.expect_object({"description", "devices", "links"});
  ClusterSpec c;
  if (f.has("description")) c.description = f.at("description").string();
  const JsonField devices = f.at("devices");
  const size_t nd = devices.array_size();
  if (nd == 0) devices.fail("expected at least one device");
  std::set<std::string> names;
  for (size_t i = 0; i < nd; ++i) {
    const JsonField df = devices[i];
    c.devices.push_back(read_device(df));
    if (!names.insert(c.devices.back().name).second)
      df.at("name").fail(cat("duplicate device name '", c.devices.back().name, "'"));
  }
  if (f.has("links")) {
    const JsonField links = f.at("links");
    const size_t nl = links.array_size();
    std::set<std::pair<std::string, std::string>> seen;
    for (size_t i = 0; i < nl; ++i) {
      const JsonField lf = links[i];
      LinkProfile l = read_link(lf);
      if (!names.count(l.from)) lf.at("from").fail(cat("unknown device '", l.from, "'"));
      if (!names.count(l.to)) lf.at("to").fail(cat("unknown device '", l.to, "'"));
      if (l.from == l.to) lf.at("to").fail(cat("link from '", l.from, "' to itself"));
      if (!seen.insert({l.from, l.to}).second)
        lf.fail(cat("duplicate link '", l.from, "' -> '", l.to, "'"));
      c.links.push_back(std::move(l));
    }
  }
  return c;
}

}  // namespace

// ---- DeviceProfile ----

json DeviceProfile::to_json() const {
  json j = json::object();
  j["name"] = name;
  j["kind"] = kind;
  if (!description.empty()) j["description"] = description;
  j["peak_flops"] = peak_flops;
  j["mem_bandwidth_bytes_per_s"] = mem_bandwidth_bytes_per_s;
  j["mem_bytes"] = mem_bytes;
  j["power_w"] = power_w;
  j["threads"] = threads;
  j["speed_factor"] = speed_factor;
  json ops = json::object();
  for (const auto& [k, v] : op_latency_s) ops[k] = v;
  j["op_latency_s"] = std::move(ops);
  return j;
}

DeviceProfile DeviceProfile::from_json(const json& j, const std::string& where) {
  return read_device(JsonField(j, where, ""));
}

DeviceProfile DeviceProfile::from_json_file(const std::string& path) {
  const json j = detail::read_json_file(path);
  return read_device(JsonField(j, path, ""));
}

void DeviceProfile::save(const std::string& path) const {
  detail::write_text_file(path, to_json().dump(2) + "\n");
}

// ---- LinkProfile ----

json LinkProfile::to_json() const {
  json j = json::object();
  j["from"] = from;
  j["to"] = to;
  j["bandwidth_bytes_per_s"] = bandwidth_bytes_per_s;
  j["latency_s"] = latency_s;
  if (!description.empty()) j["description"] = description;
  return j;
}

LinkProfile LinkProfile::from_json(const json& j, const std::string& where) {
  return read_link(JsonField(j, where, ""));
}

// ---- ClusterSpec ----

const DeviceProfile& ClusterSpec::device(const std::string& name) const {
  for (const auto& d : devices)
    if (d.name == name) return d;
  std::string known;
  for (const auto& d : devices) known += known.empty() ? d.name : ", " + d.name;
  throw NotFound(cat("cluster has no device '", name, "' (devices: ", known, ")"));
}

bool ClusterSpec::has_device(const std::string& name) const {
  for (const auto& d : devices)
    if (d.name == name) return true;
  return false;
}

namespace {
const LinkProfile* find_link(const std::vector<LinkProfile>& links, const std::string& from,
                             const std::string& to) {
  for (const auto& l : links)
    if (l.from == from && l.to == to) return &l;
  for (const auto& l : links)
    if (l.from == to && l.to == from) return &l;
  return nullptr;
}
}  // namespace

const LinkProfile& ClusterSpec::link(const std::string& from, const std::string& to) const {
  if (const LinkProfile* l = find_link(links, from, to)) return *l;
  throw NotFound(cat("cluster has no link between '", from, "' and '", to, "'"));
}

bool ClusterSpec::has_link(const std::string& from, const std::string& to) const {
  return find_link(links, from, to) != nullptr;
}

double ClusterSpec::transfer_time_s(const std::string& from, const std::string& to,
                                    double bytes) const {
  if (from == to) {
    device(from);  // NotFound for unknown names
    return 0.0;
  }
  return link(from, to).transfer_time_s(bytes);
}

void ClusterSpec::validate() const {
  auto positive = [](double v) { return std::isfinite(v) && v > 0; };
  if (devices.empty()) throw InvalidArgument("cluster spec: no devices");
  std::set<std::string> names;
  for (size_t i = 0; i < devices.size(); ++i) {
    const DeviceProfile& d = devices[i];
    const std::string at = cat("cluster spec: device ", i, " '", d.name, "'");
    if (d.name.empty()) throw InvalidArgument(cat(at, ": empty name"));
    if (!names.insert(d.name).second) throw InvalidArgument(cat(at, ": duplicate device name"));
    if (d.kind != "cpu" && d.kind != "cuda")
      throw InvalidArgument(cat(at, ": kind '", d.kind, "'"));
    if (!kFlops.holds(d.peak_flops)) throw InvalidArgument(cat(at, ": peak_flops ", d.peak_flops));
    if (!kBandwidth.holds(d.mem_bandwidth_bytes_per_s))
      throw InvalidArgument(cat(at, ": mem_bandwidth_bytes_per_s ", d.mem_bandwidth_bytes_per_s));
    if (!kMemBytes.holds(d.mem_bytes)) throw InvalidArgument(cat(at, ": mem_bytes ", d.mem_bytes));
    if (!kPowerW.holds(d.power_w)) throw InvalidArgument(cat(at, ": power_w ", d.power_w));
    if (d.threads < 1) throw InvalidArgument(cat(at, ": threads ", d.threads));
    if (!kSpeedFactor.holds(d.speed_factor))
      throw InvalidArgument(cat(at, ": speed_factor ", d.speed_factor));
    for (const auto& [k, v] : d.op_latency_s)
      if (k.empty() || !positive(v) || !kSeconds.holds(v))
        throw InvalidArgument(cat(at, ": op_latency_s['", k, "'] = ", v));
  }
  std::set<std::pair<std::string, std::string>> seen;
  for (size_t i = 0; i < links.size(); ++i) {
    const LinkProfile& l = links[i];
    const std::string at = cat("cluster spec: link ", i, " '", l.from, "' -> '", l.to, "'");
    if (!names.count(l.from) || !names.count(l.to))
      throw InvalidArgument(cat(at, ": unknown device"));
    if (l.from == l.to) throw InvalidArgument(cat(at, ": link to itself"));
    if (!seen.insert({l.from, l.to}).second) throw InvalidArgument(cat(at, ": duplicate link"));
    if (!kBandwidth.holds(l.bandwidth_bytes_per_s))
      throw InvalidArgument(cat(at, ": bandwidth_bytes_per_s ", l.bandwidth_bytes_per_s));
    if (!kSeconds.holds(l.latency_s)) throw InvalidArgument(cat(at, ": latency_s ", l.latency_s));
  }
}

json ClusterSpec::to_json() const {
  json j = json::object();
  if (!description.empty()) j["description"] = description;
  json ds = json::array();
  for (const auto& d : devices) ds.push_back(d.to_json());
  j["devices"] = std::move(ds);
  json ls = json::array();
  for (const auto& l : links) ls.push_back(l.to_json());
  j["links"] = std::move(ls);
  return j;
}

ClusterSpec ClusterSpec::from_json(const json& j, const std::string& where) {
  return read_cluster(JsonField(j, where, ""));
}

ClusterSpec ClusterSpec::from_json_file(const std::string& path) {
  const json j = detail::read_json_file(path);
  return read_cluster(JsonField(j, path, ""));
}

void ClusterSpec::save(const std::string& path) const {
  validate();
  detail::write_text_file(path, to_json().dump(2) + "\n");
}

}  // namespace tandem
