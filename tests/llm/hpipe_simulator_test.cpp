// SPDX-License-Identifier: Apache-2.0
// The discrete-event pipeline simulator against schedules worked out by hand: the header's example,
// the homogeneous pipeline formula (P + N - 1) t, a FIFO link that serialises transfers, stages
// sharing a device, release times, and rejected inputs.
#include "tandem/sched/simulator.h"

#include <gtest/gtest.h>

#include "tandem/core/error.h"

namespace tandem::sched {
namespace {

TEST(PipelineSimulator, HeaderExample) {
  PipelineSimInput in;
  in.compute_s = {{1.0, 2.0}, {1.0, 2.0}};
  in.transfer_s = {{0.5}, {0.5}};
  const PipelineSimResult r = simulate_pipeline(in);
  // p0: s0 [0,1], link [1,1.5], s1 [1.5,3.5]; p1: s0 [1,2], link [2,2.5], s1 [3.5,5.5].
  EXPECT_DOUBLE_EQ(r.makespan_s, 5.5);
  EXPECT_DOUBLE_EQ(r.packet_done_s[0], 3.5);
  EXPECT_DOUBLE_EQ(r.device_busy_s[1], 4.0);
  EXPECT_DOUBLE_EQ(r.link_busy_s[0], 1.0);
  EXPECT_DOUBLE_EQ(r.stage_first_start_s[1], 1.5);
  EXPECT_DOUBLE_EQ(bubble_fraction(r, 0), 1.0 - 2.0 / 5.5);
  EXPECT_EQ(r.timeline.size(), 6u);
}

TEST(PipelineSimulator, HomogeneousPipelineFormula) {
  for (int n_stages : {1, 3, 8, 64}) {
    for (int n_packets : {1, 5, 32}) {
      PipelineSimInput in;
      in.compute_s.assign(n_packets, std::vector<double>(n_stages, 0.25));
      in.transfer_s.assign(n_packets, std::vector<double>(n_stages - 1, 0.0));
      const PipelineSimResult r = simulate_pipeline(in);
      EXPECT_DOUBLE_EQ(r.makespan_s, (n_packets + n_stages - 1) * 0.25)
          << n_stages << " stages, " << n_packets << " packets";
    }
  }
}

TEST(PipelineSimulator, SlowestStageBoundsAndLinkSerialises) {
  PipelineSimInput in;
  // A link slower than both stages becomes the bottleneck: transfers queue one after another.
  in.compute_s.assign(4, {0.1, 0.1});
  in.transfer_s.assign(4, {1.0});
  const PipelineSimResult r = simulate_pipeline(in);
  EXPECT_DOUBLE_EQ(r.makespan_s, 0.1 + 4 * 1.0 + 0.1);
  EXPECT_DOUBLE_EQ(r.link_busy_s[0], 4.0);
}

TEST(PipelineSimulator, StagesSharingADeviceRunOneAtATime) {
  PipelineSimInput in;
  in.compute_s.assign(2, {1.0, 1.0});
  in.transfer_s.assign(2, {0.0});
  in.stage_device = {0, 0};
  const PipelineSimResult r = simulate_pipeline(in);
  EXPECT_DOUBLE_EQ(r.makespan_s, 4.0);
  ASSERT_EQ(r.device_busy_s.size(), 1u);
  EXPECT_DOUBLE_EQ(r.device_busy_s[0], 4.0);
}

TEST(PipelineSimulator, ReleaseTimesDelayPackets) {
  PipelineSimInput in;
  in.compute_s = {{1.0}, {1.0}};
  in.transfer_s = {{}, {}};
  in.release_s = {0.0, 5.0};
  EXPECT_DOUBLE_EQ(simulate_pipeline(in).makespan_s, 6.0);
}

TEST(PipelineSimulator, RejectsBadInput) {
  PipelineSimInput in;
  EXPECT_THROW(simulate_pipeline(in), InvalidArgument);
  in.compute_s = {{1.0, 1.0}, {1.0}};
  in.transfer_s = {{0.0}, {}};
  EXPECT_THROW(simulate_pipeline(in), InvalidArgument);  // ragged
  in.compute_s = {{1.0, -1.0}};
  in.transfer_s = {{0.0}};
  EXPECT_THROW(simulate_pipeline(in), InvalidArgument);  // negative
  in.compute_s = {{1.0, 1.0}};
  in.stage_device = {0};
  EXPECT_THROW(simulate_pipeline(in), InvalidArgument);
  in.stage_device = {};
  PipelineSimResult r = simulate_pipeline(in);
  EXPECT_THROW(bubble_fraction(r, 2), InvalidArgument);
}

}  // namespace
}  // namespace tandem::sched
