// SPDX-License-Identifier: Apache-2.0
// ShapedLink: a real slow link for the edge/cloud tests. A network namespace (the "cloud") joined
// to this one (the "edge") by a veth pair, 10.213.<k>.1 here and .2 there, the edge side's egress
// (the uplink) shaped by a tbf qdisc: the kernel, not the runtime's token bucket, paces the bytes.
// Needs root (CAP_NET_ADMIN) and iproute2's `ip` and `tc`; unavailable() says why not, so a test
// can skip with the reason. The namespace (and with it the veth pair) is deleted on destruction.
//
//   std::string why;
//   auto link = ShapedLink::make(50, &why);     // Mbit/s
//   if (!link) GTEST_SKIP() << why;
//   // run a process in it: {"ip", "netns", "exec", link->ns(), ...}; reach it at link->cloud_ip()
//   link->set_rate(10);                         // tc qdisc change, mid-run
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>

namespace tandem::cnn::testing {

class ShapedLink {
 public:
  // Why this process cannot build one ("" when it can).
  static std::string unavailable() {
    if (geteuid() != 0) return "not root: a network namespace and tc need CAP_NET_ADMIN";
    if (std::system("command -v ip >/dev/null 2>&1 && command -v tc >/dev/null 2>&1") != 0)
      return "iproute2's ip and tc are not installed";
    return "";
  }

  // A link at `mbit_per_s`, or nullptr with *why set when this machine cannot make one (not root,
  // no iproute2, or a namespace, veth or tbf the kernel or container refuses): tests skip then.
  static std::unique_ptr<ShapedLink> make(double mbit_per_s, std::string* why) {
    *why = unavailable();
    if (!why->empty()) return nullptr;
    try {
      return std::make_unique<ShapedLink>(mbit_per_s);
    } catch (const std::exception& e) {
      *why = e.what();
      return nullptr;
    }
  }

  explicit ShapedLink(double mbit_per_s) {
    const int k = 1 + static_cast<int>(getpid() % 250);
    ns_ = "tandem-cloud-" + std::to_string(getpid());
    edge_dev_ = "vte" + std::to_string(getpid() % 100000);
    const std::string cloud_dev = "vtc" + std::to_string(getpid() % 100000);
    edge_ip_ = "10.213." + std::to_string(k) + ".1";
    cloud_ip_ = "10.213." + std::to_string(k) + ".2";
    std::system(("ip netns del " + ns_ + " 2>/dev/null").c_str());  // a previous run's leftover
    try {
      build(cloud_dev, mbit_per_s);
    } catch (...) {
      std::system(("ip netns del " + ns_ + " 2>/dev/null").c_str());
      throw;
    }
  }
  ~ShapedLink() { std::system(("ip netns del " + ns_ + " 2>/dev/null").c_str()); }
  ShapedLink(const ShapedLink&) = delete;
  ShapedLink& operator=(const ShapedLink&) = delete;

  const std::string& ns() const { return ns_; }
  const std::string& cloud_ip() const { return cloud_ip_; }
  // The uplink's new rate, at once (tc qdisc change).
  void set_rate(double mbit_per_s) {
    run("tc qdisc change dev " + edge_dev_ + " root " + tbf(mbit_per_s));
  }
  // Bytes the tbf qdisc has sent on the uplink so far (its statistics).
  long long sent_bytes() const {
    const std::string cmd = "tc -s qdisc show dev " + edge_dev_;
    FILE* p = popen(cmd.c_str(), "r");
    if (!p) throw std::runtime_error("cannot run " + cmd);
    char line[512];
    long long sent = -1;
    while (fgets(line, sizeof line, p))
      if (std::sscanf(line, " Sent %lld bytes", &sent) == 1) break;
    pclose(p);
    return sent;
  }

 private:
  void build(const std::string& cloud_dev, double mbit_per_s) {
    run("ip netns add " + ns_);
    run("ip link add " + edge_dev_ + " type veth peer name " + cloud_dev);
    run("ip link set " + cloud_dev + " netns " + ns_);
    run("ip addr add " + edge_ip_ + "/30 dev " + edge_dev_);
    run("ip link set " + edge_dev_ + " up");
    run("ip netns exec " + ns_ + " ip addr add " + cloud_ip_ + "/30 dev " + cloud_dev);
    run("ip netns exec " + ns_ + " ip link set " + cloud_dev + " up");
    run("ip netns exec " + ns_ + " ip link set lo up");
    run("tc qdisc add dev " + edge_dev_ + " root " + tbf(mbit_per_s));
  }
  static std::string tbf(double mbit_per_s) {
    // A 32 KiB bucket (about two MTU-size bursts at these rates) and 200 ms of queue.
    return "tbf rate " + std::to_string(static_cast<long long>(mbit_per_s * 1e6)) +
           "bit burst 32kb latency 200ms";
  }
  static void run(const std::string& cmd) {
    if (std::system((cmd + " >/dev/null 2>&1").c_str()) != 0)
      throw std::runtime_error("ShapedLink: '" + cmd + "' failed");
  }

  std::string ns_, edge_dev_, edge_ip_, cloud_ip_;
};

}  // namespace tandem::cnn::testing
