// SPDX-License-Identifier: Apache-2.0
// The op-level scheduler's ready queue: which ready op instance goes out next.
//
// RecOS's priority (recsys spec §2.3) is least slack first, σ = d_j − now − CP_j(i), then business
// priority, then arrival. Measured on SimGPU and the CPU executor, least slack among queries that
// all have ample slack behaves like processor sharing: a newer query's long remaining critical path
// overtakes an older query's short one, every in-flight query advances together, and the tail
// grows (p99 above B2's at 16 and 64 clients with a mean below it). So the order has two regimes:
//   - urgent ops (σ < urgent_slack_us): least slack first, as the spec writes it;
//   - the others: earliest query deadline first (for equal SLAs, the oldest query), then business
//     priority, then the longer remaining critical path (within a query: the critical path first).
// urgent_slack_us = +infinity is the spec's rule alone; the default is chosen by the sweep in
// docs/results (see PolicyOptions::urgent_slack_ms). Without slack ordering (RACE's anchor B4)
// every key is 0 and the order is arrival, then node.
//
// Two binary heaps hold every ready entry (one by slack, one by deadline); an entry taken through
// one, or by take_same_node (RecOS's horizontal fusion), is left in the heaps and skipped there
// when it surfaces (only live tickets count).
//
//   ReadyQueue<Query*> r(/*two_regimes=*/true, /*urgent_slack_us=*/0, /*node_index=*/false);
//   r.push({.slack_key = d - cp, .deadline = d, .cp = cp, .priority = 0, .seq = 7, .node = 3, .item
//   = q}); if (!r.empty()) auto e = r.pop(now_us);
#pragma once

#include <algorithm>
#include <cstdint>
#include <queue>
#include <unordered_map>
#include <vector>

namespace tandem::rec {

template <class Item>
class ReadyQueue {
 public:
  struct Entry {
    double slack_key = 0;  // d_j - CP_j(i): sigma + now
    double deadline = 0;   // d_j
    double cp = 0;         // CP_j(i)
    int64_t priority = 0, seq = 0;
    int node = 0;
    Item item{};
    int64_t ticket = 0;  // set by push
  };

  // two_regimes false: the slack heap alone (least slack, or FIFO when every key is 0).
  // node_index: keep the per-node index take_same_node needs.
  ReadyQueue(bool two_regimes, double urgent_slack_us, bool node_index)
      : two_(two_regimes), node_index_(node_index), urgent_us_(urgent_slack_us) {}

  bool empty() const { return live_.empty(); }
  size_t size() const { return live_.size(); }

  void push(Entry e) {
    e.ticket = next_ticket_++;
    if (two_) by_deadline_.push(e);
    by_slack_.push(e);
    if (node_index_) by_node_[e.node].push_back(e.ticket);
    live_.emplace(e.ticket, e);
  }

  // The entry pop(now_us) would return. Requires !empty().
  const Entry& peek(double now_us) {
    drop_stale(by_slack_);
    if (!two_) return by_slack_.top();
    drop_stale(by_deadline_);
    return by_slack_.top().slack_key - now_us < urgent_us_ ? by_slack_.top() : by_deadline_.top();
  }

  Entry pop(double now_us) {
    const Entry e = peek(now_us);
    live_.erase(e.ticket);
    if (node_index_) {  // a node has at most one ready entry per query in flight
      auto& t = by_node_[e.node];
      t.erase(std::find(t.begin(), t.end(), e.ticket));
    }
    return e;
  }

  // Takes (in push order) up to `max` ready entries of graph node `node` that `accept(entry)`
  // takes. Needs node_index.
  template <class Accept>
  std::vector<Entry> take_same_node(int node, size_t max, Accept&& accept) {
    std::vector<Entry> out;
    auto it = by_node_.find(node);
    if (it == by_node_.end()) return out;
    auto& tickets = it->second;
    size_t keep = 0;
    for (size_t k = 0; k < tickets.size(); ++k) {
      auto e = live_.find(tickets[k]);
      if (out.size() < max && accept(e->second)) {
        out.push_back(e->second);
        live_.erase(e);
      } else {
        tickets[keep++] = tickets[k];
      }
    }
    tickets.resize(keep);
    return out;
  }

 private:
  // priority_queue keeps the "largest" on top, so each order says when a is worse than b.
  struct WorseSlack {
    bool operator()(const Entry& a, const Entry& b) const {
      if (a.slack_key != b.slack_key) return a.slack_key > b.slack_key;
      if (a.priority != b.priority) return a.priority > b.priority;
      if (a.seq != b.seq) return a.seq > b.seq;
      return a.node > b.node;
    }
  };
  struct WorseDeadline {
    bool operator()(const Entry& a, const Entry& b) const {
      if (a.deadline != b.deadline) return a.deadline > b.deadline;
      if (a.priority != b.priority) return a.priority > b.priority;
      if (a.seq != b.seq) return a.seq > b.seq;
      if (a.cp != b.cp) return a.cp < b.cp;
      return a.node > b.node;
    }
  };
  template <class Heap>
  void drop_stale(Heap& h) {
    while (!h.empty() && !live_.contains(h.top().ticket)) h.pop();
  }

  bool two_, node_index_;
  double urgent_us_;
  std::priority_queue<Entry, std::vector<Entry>, WorseSlack> by_slack_;
  std::priority_queue<Entry, std::vector<Entry>, WorseDeadline> by_deadline_;
  std::unordered_map<int64_t, Entry> live_;                // ticket -> entry not yet taken
  std::unordered_map<int, std::vector<int64_t>> by_node_;  // node -> tickets (some taken)
  int64_t next_ticket_ = 0;
};

}  // namespace tandem::rec
