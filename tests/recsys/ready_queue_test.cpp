// SPDX-License-Identifier: Apache-2.0
// The op-level scheduler's ready queue (src/recsys/ready_queue.h): the two ordering regimes (least
// slack for urgent ops, earliest deadline for the rest), FIFO without keys, and horizontal fusion's
// take_same_node, against a brute-force pick over the live entries on random operations.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <random>
#include <vector>

#include "recsys/ready_queue.h"

namespace tandem::rec {
namespace {

using Queue = ReadyQueue<int>;
using Entry = Queue::Entry;

Entry entry(double deadline, double cp, int64_t seq, int node, int64_t priority = 0) {
  return {.slack_key = deadline - cp,
          .deadline = deadline,
          .cp = cp,
          .priority = priority,
          .seq = seq,
          .node = node,
          .item = static_cast<int>(seq * 100 + node)};
}

TEST(RecReadyQueue, NotUrgentGoesByDeadlineUrgentByLeastSlack) {
  Queue q(/*two_regimes=*/true, /*urgent_slack_us=*/50, /*node_index=*/false);
  q.push(entry(1000, 10, 1, 0));   // old query, short critical path left: slack 990 - now
  q.push(entry(1100, 400, 2, 0));  // newer query, long critical path: slack 700 - now
  q.push(entry(1000, 30, 1, 1));   // the old query's longer branch
  // now = 0: nothing is urgent, so the oldest deadline first, its longer critical path first.
  EXPECT_EQ(q.pop(0).item, 101);
  // now = 660: the newer query's slack (700 - 660 = 40) is under 50: it overtakes.
  EXPECT_EQ(q.pop(660).item, 200);
  EXPECT_EQ(q.pop(660).item, 100);
  EXPECT_TRUE(q.empty());
}

TEST(RecReadyQueue, InfiniteThresholdIsLeastSlackAndZeroKeysAreFifo) {
  Queue llf(false, std::numeric_limits<double>::infinity(), false);
  llf.push(entry(1000, 10, 1, 0));
  llf.push(entry(1100, 400, 2, 0));
  EXPECT_EQ(llf.pop(0).item, 200);  // slack 700 before 990, whatever the arrival
  Queue fifo(false, 0, false);
  for (int64_t seq : {3, 1, 2}) fifo.push(entry(0, 0, seq, 0));
  for (int64_t seq : {1, 2, 3}) EXPECT_EQ(fifo.pop(0).seq, seq);
}

TEST(RecReadyQueue, TakeSameNodeTakesOnlyThatNodeAndLeavesTheRestInOrder) {
  Queue q(true, 0, /*node_index=*/true);
  for (int64_t seq = 0; seq < 6; ++seq) q.push(entry(100.0 * seq, 5, seq, seq % 2 ? 7 : 3));
  // Node 7 of queries 1, 3, 5; room for two; the filter refuses query 3.
  const auto got = q.take_same_node(7, 2, [](const Entry& e) { return e.seq != 3; });
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].seq, 1);
  EXPECT_EQ(got[1].seq, 5);
  EXPECT_EQ(q.size(), 4u);
  std::vector<int64_t> order;
  while (!q.empty()) order.push_back(q.pop(0).seq);
  EXPECT_EQ(order, (std::vector<int64_t>{0, 2, 3, 4}));
  EXPECT_TRUE(q.take_same_node(7, 8, [](const Entry&) { return true; }).empty());
}

// Random pushes, pops at advancing times and takes: every pop returns the entry a brute-force
// search over the live entries picks, and nothing is returned twice or lost.
TEST(RecReadyQueue, RandomOperationsMatchBruteForce) {
  std::mt19937_64 rng(11);
  const double urgent = 30;
  Queue q(true, urgent, true);
  std::vector<Entry> live;
  int64_t seq = 0;
  double now = 0;
  auto better_slack = [](const Entry& a, const Entry& b) {
    if (a.slack_key != b.slack_key) return a.slack_key < b.slack_key;
    if (a.priority != b.priority) return a.priority < b.priority;
    if (a.seq != b.seq) return a.seq < b.seq;
    return a.node < b.node;
  };
  auto better_deadline = [](const Entry& a, const Entry& b) {
    if (a.deadline != b.deadline) return a.deadline < b.deadline;
    if (a.priority != b.priority) return a.priority < b.priority;
    if (a.seq != b.seq) return a.seq < b.seq;
    if (a.cp != b.cp) return a.cp > b.cp;
    return a.node < b.node;
  };
  for (int step = 0; step < 4000; ++step) {
    const int what = static_cast<int>(rng() % 10);
    if (what < 5 || live.empty()) {
      Entry e = entry(now + double(rng() % 200), double(rng() % 150), seq++, int(rng() % 5),
                      int64_t(rng() % 3));
      q.push(e);
      live.push_back(e);
    } else if (what < 9) {
      now += double(rng() % 5);
      auto slack = std::min_element(live.begin(), live.end(), better_slack);
      auto pick = slack->slack_key - now < urgent
                      ? slack
                      : std::min_element(live.begin(), live.end(), better_deadline);
      const Entry got = q.pop(now);
      ASSERT_EQ(got.item, pick->item) << "step " << step;
      live.erase(pick);
    } else {
      const int node = int(rng() % 5);
      const auto got = q.take_same_node(node, 2, [](const Entry&) { return true; });
      for (const auto& g : got) {
        auto it = std::find_if(live.begin(), live.end(),
                               [&](const Entry& e) { return e.item == g.item; });
        ASSERT_NE(it, live.end());
        EXPECT_EQ(it->node, node);
        live.erase(it);
      }
    }
    ASSERT_EQ(q.size(), live.size());
  }
}

}  // namespace
}  // namespace tandem::rec
