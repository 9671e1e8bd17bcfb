// SPDX-License-Identifier: Apache-2.0
#include "tandem/core/error.h"

#include <gtest/gtest.h>

#include "tandem/core/device.h"
#include "tandem/core/shape.h"

namespace tandem {
namespace {

TEST(Error, CheckThrowsWithFileLineConditionAndMessage) {
  const int n = 33;
  try {
    TANDEM_CHECK(n % 32 == 0) << "n=" << n;
    FAIL() << "no throw";
  } catch (const ContractError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("error_test.cpp:"), std::string::npos) << msg;
    EXPECT_NE(msg.find("check failed: n % 32 == 0: n=33"), std::string::npos) << msg;
  }
  EXPECT_NO_THROW({ TANDEM_CHECK(n == 33) << "never evaluated"; });
}

TEST(Error, ParseErrorNamesSourceAndOffset) {
  const ParseError e("model.gguf", 1234, "bad magic");
  EXPECT_STREQ(e.what(), "model.gguf at byte 1234: bad magic");
  EXPECT_EQ(e.offset(), 1234);
  EXPECT_STREQ(ParseError("cfg.json", -1, "x").what(), "cfg.json: x");
}

TEST(Device, ParsesAndPrints) {
  EXPECT_EQ(Device::parse("cpu"), Device::cpu());
  EXPECT_EQ(Device::parse("cuda"), Device::cuda(0));
  EXPECT_EQ(Device::parse("cuda:3"), Device::cuda(3));
  EXPECT_EQ(Device::cuda(2).to_string(), "cuda:2");
  for (const char* bad : {"gpu", "cuda:", "cuda:x", "cuda:-1", "cpu:1", "cuda:1x", ""})
    EXPECT_THROW(Device::parse(bad), InvalidArgument) << bad;
}

TEST(Shape, BasicsAndErrors) {
  Shape s{2, 3, 4};
  EXPECT_EQ(s.rank(), 3);
  EXPECT_EQ(s.numel(), 24);
  EXPECT_EQ(s[-1], 4);
  EXPECT_EQ(s.contiguous_strides(), (Shape{12, 4, 1}));
  EXPECT_EQ(s.to_string(), "[2, 3, 4]");
  EXPECT_THROW(s[3], InvalidArgument);
  EXPECT_THROW((Shape{1, 2, 3, 4, 5, 6, 7, 8, 9}), InvalidArgument);
  EXPECT_THROW((Shape{2, -1}), InvalidArgument);
  EXPECT_EQ(Shape{}.numel(), 1);  // a scalar
}

}  // namespace
}  // namespace tandem
