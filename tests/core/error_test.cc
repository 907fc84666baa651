#include <gtest/gtest.h>

#include "sceptre/core/result.h"

namespace sceptre {
namespace {

TEST(Error, ToStringHasCodeMessageAndContextOutermostFirst) {
  Error e(Code::kUnavailable, "connection refused");
  e.with_context("dial tcp:h:1");
  e.with_context("send to actor 3");
  EXPECT_EQ(e.to_string(), "UNAVAILABLE: connection refused [send to actor 3; dial tcp:h:1]");
}

TEST(Result, HoldsValueOrError) {
  Result<int> good = 7;
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(*good, 7);
  Result<int> bad = Error(Code::kDataLoss, "x");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code(), Code::kDataLoss);
}

TEST(Result, ReadingTheValueOfAnErrorAborts) {
  Result<int> bad = Error(Code::kInternal, "boom");
  EXPECT_DEATH((void)bad.value(), "boom");
}

Status fails_then_returns() {
  SCEPTRE_RETURN_IF_ERROR(Status(Error(Code::kAborted, "inner")));
  return Error(Code::kInternal, "not reached");
}

TEST(Result, ReturnIfErrorPropagates) {
  EXPECT_EQ(fails_then_returns().error().code(), Code::kAborted);
}

TEST(Code, NamesAreCanonical) {
  EXPECT_EQ(code_name(Code::kDeadlineExceeded), "DEADLINE_EXCEEDED");
  EXPECT_EQ(code_name(Code::kUnauthenticated), "UNAUTHENTICATED");
}

}  // namespace
}  // namespace sceptre
