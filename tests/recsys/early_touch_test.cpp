// SPDX-License-Identifier: Apache-2.0
// Early touch (early_touch.h, EmbeddingTable::touch_rows, RecModel::touch): touching a mapped
// table's row makes its page resident (checked with mincore after the page was dropped from the
// page cache), a mapped model's query touches pages and an in-memory one none, and a policy behind
// the early-touch wrapper answers every query with its sequential scores.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "recsys_device.h"
#include "tandem/core/error.h"
#include "tandem/recsys/early_touch.h"
#include "tandem/recsys/embedding.h"
#include "tandem/recsys/executor.h"
#include "tandem/recsys/workload.h"

namespace tandem::rec {
namespace {

std::string scratch(const std::string& name) {
  const auto dir = std::filesystem::path(testing::TempDir()) / "tandem_early_touch";
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

// Whether the page holding p is in the page cache.
bool resident(const uint8_t* p) {
  const long page = ::sysconf(_SC_PAGESIZE);
  auto* start = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(p) & ~uintptr_t(page - 1));
  unsigned char v = 0;
  EXPECT_EQ(::mincore(start, static_cast<size_t>(page), &v), 0);
  return (v & 1) != 0;
}

TEST(RecEarlyTouch, TouchingARowMakesItsPageResident) {
  const std::string path = scratch("touch.temb");
  EmbeddingTable::write_generated_file(path, "t", 8192, 64, DType::kF32, 3, 0.1f);  // 2 MiB
  {  // write back and drop the file's pages from the page cache
    const int fd = ::open(path.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
  const EmbeddingTable t = EmbeddingTable::map_file(path);
  ASSERT_TRUE(t.mapped());
  const int64_t row = 5000;  // 256 bytes a row: page 312 of the data
  if (resident(t.row_data(row))) GTEST_SKIP() << "the kernel kept the page cached (no eviction)";
  const int64_t rows[] = {row, -1, 8192};  // out-of-range rows are skipped
  EXPECT_EQ(t.touch_rows(rows, 3), 1);
  EXPECT_TRUE(resident(t.row_data(row)));
  // A table in memory has nothing to fetch.
  const EmbeddingTable mem = EmbeddingTable::generate("m", 16, 8, DType::kF32, 1, 0.1f);
  EXPECT_EQ(mem.touch_rows(rows, 1), 0);
}

TEST(RecEarlyTouch, PolicyBehindItAnswersEveryQueryWithItsScores) {
  const ModelConfig cfg = zoo_config("tiny-din");
  const RecModel mapped = RecModel::generate_mapped(cfg, scratch(""));
  const RecModel in_memory = RecModel::generate(cfg);
  QueryFactory qf(cfg, WorkloadOptions{});
  std::vector<std::shared_ptr<const QueryInputs>> queries;
  for (int i = 0; i < 24; ++i) queries.push_back(std::make_shared<QueryInputs>(qf.make(i, 3)));
  EXPECT_GT(mapped.touch(*queries[0]), 0);
  EXPECT_EQ(in_memory.touch(*queries[0]), 0);

  CpuExecutor ex(test_cpu_profile());
  PolicyOptions po;
  po.policy = "stream-pool";
  po.streams = 2;
  auto policy = with_early_touch(make_policy(mapped, ex, po), mapped, {.max_queued = 8});
  std::vector<std::future<Response>> answers;
  for (const auto& q : queries) answers.push_back(policy->submit(q));
  for (size_t i = 0; i < queries.size(); ++i)
    EXPECT_EQ(answers[i].get().scores, in_memory.forward(*queries[i])) << "query " << i;
  const auto st = policy->stats()["early_touch"];
  // Every query was queued for a touch or skipped (the queue holds 8); the touches still queued
  // when the answers arrived may not have run yet.
  EXPECT_LE(st["queries"].get<int64_t>() + st["skipped"].get<int64_t>(), 24);
  EXPECT_GE(st["queries"].get<int64_t>() + st["skipped"].get<int64_t>() + 8, 24);
  EXPECT_THROW(with_early_touch(make_policy(mapped, ex, po), mapped, {.max_queued = 0}),
               InvalidArgument);
}

}  // namespace
}  // namespace tandem::rec
