#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <variant>

#include "sceptre/wire/codec.h"

namespace sceptre::wire {
namespace {

struct Shape {
  std::string name;
  std::vector<std::int64_t> dims;
  std::optional<double> scale;
  SCEPTRE_FIELDS(name, dims, scale)
  bool operator==(const Shape&) const = default;
};

enum class Color : std::uint8_t { kRed, kBlue };

struct Batch {
  std::uint32_t step = 0;
  Shape shape;
  Part data;  // travels as a part, not in the body
  std::map<std::string, float> metrics;
  std::variant<std::monostate, int, std::string> tag;
  std::chrono::milliseconds deadline{0};
  Color color = Color::kRed;
  std::pair<int, bool> flags;
  SCEPTRE_FIELDS(step, shape, data, metrics, tag, deadline, color, flags)
  bool operator==(const Batch&) const = default;
};

template <class T>
T round_trip(const T& value) {
  Message msg = encode(value);
  auto back = decode<T>(msg);
  EXPECT_TRUE(back.ok()) << back.error().to_string();
  return std::move(back).value();
}

TEST(Codec, RoundTripsScalarsAndStrings) {
  EXPECT_EQ(round_trip(std::int8_t{-3}), -3);
  EXPECT_EQ(round_trip(std::uint64_t{1} << 63), std::uint64_t{1} << 63);
  EXPECT_EQ(round_trip(3.25), 3.25);
  EXPECT_EQ(round_trip(1.5f), 1.5f);
  EXPECT_EQ(round_trip(true), true);
  EXPECT_EQ(round_trip(std::string("")), "");
  EXPECT_EQ(round_trip(std::string("hello\0world", 11)), std::string("hello\0world", 11));
}

TEST(Codec, RoundTripsContainers) {
  std::vector<std::string> v{"a", "bb", ""};
  EXPECT_EQ(round_trip(v), v);
  std::unordered_map<int, std::vector<double>> m{{1, {1.0}}, {2, {}}};
  EXPECT_EQ(round_trip(m), m);
  std::tuple<int, std::string, std::optional<int>> t{1, "x", std::nullopt};
  EXPECT_EQ(round_trip(t), t);
  std::variant<int, std::string> var = std::string("s");
  EXPECT_EQ(round_trip(var), var);
  EXPECT_EQ(round_trip(std::chrono::nanoseconds(123)), std::chrono::nanoseconds(123));
  Error e(Code::kAborted, "peer lost");
  e.with_context("rank 3");
  std::vector<Error> errors{e};  // (a bare Error is not a Result value: Result<Error> is ambiguous)
  EXPECT_EQ(round_trip(errors), errors);
}

TEST(Codec, StructsWithPartsRoundTripAndPartsAreNotCopied) {
  Batch b;
  b.step = 9;
  b.shape = Shape{"w", {2, 3}, 0.5};
  b.data = Part::copy_of(std::string(1 << 20, 'z'));
  b.metrics = {{"loss", 0.25f}};
  b.tag = 42;
  b.deadline = std::chrono::milliseconds(1500);
  b.color = Color::kBlue;
  b.flags = {7, true};
  Message msg = encode(b);
  ASSERT_EQ(msg.parts.size(), 1u);
  EXPECT_EQ(msg.parts[0].data(), b.data.data()) << "the part must be referenced, not copied";
  EXPECT_LT(msg.body.size(), 200u) << "the part's bytes must not be in the body";
  auto back = decode<Batch>(msg);
  ASSERT_TRUE(back.ok()) << back.error().to_string();
  EXPECT_EQ(*back, b);
  EXPECT_EQ(back->data.data(), msg.parts[0].data()) << "decoding must not copy the part";
}

TEST(Codec, TruncatedBodyIsAnError) {
  Message msg = encode(std::string("hello world"));
  msg.body.resize(msg.body.size() - 1);
  auto r = decode<std::string>(msg);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), Code::kDataLoss);
  EXPECT_NE(r.error().message().find("length"), std::string::npos) << r.error().message();
}

TEST(Codec, HugeLengthIsRejectedBeforeAllocating) {
  Message msg = encode(std::uint64_t{1} << 60);  // looks like a vector length of 2^60
  auto r = decode<std::vector<std::uint64_t>>(msg);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("exceeds"), std::string::npos) << r.error().message();
  auto s = decode<std::string>(msg);
  ASSERT_FALSE(s.ok());
}

TEST(Codec, TrailingBytesAreAnError) {
  Message msg = encode(std::int32_t{1}, std::int32_t{2});
  auto r = decode<std::int32_t>(msg);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("trailing"), std::string::npos);
}

TEST(Codec, InvalidBoolVariantAndPartIndexAreErrors) {
  Message b;
  b.body = {std::byte{2}};
  EXPECT_FALSE(decode<bool>(b).ok());

  Message v = encode(std::int32_t{5}, std::int32_t{0});  // variant index 5 of 2 alternatives
  EXPECT_FALSE((decode<std::variant<int, float>>(v).ok()));
  Message neg = encode(std::int32_t{-1}, std::int32_t{0});
  EXPECT_FALSE((decode<std::variant<int, float>>(neg).ok()));

  Message p = encode(std::uint32_t{3});  // part index 3, but no parts
  auto r = decode<Part>(p);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("part index"), std::string::npos);
}

TEST(Codec, EveryTruncationOfAValidEncodingFailsCleanly) {
  Batch b;
  b.shape = Shape{"name", {1, 2, 3}, std::nullopt};
  b.metrics = {{"a", 1.0f}, {"b", 2.0f}};
  b.tag = std::string("tag");
  Message msg = encode(b);
  for (std::size_t n = 0; n < msg.body.size(); ++n) {
    auto r = decode<Batch>(std::span(msg.body.data(), n), msg.parts);
    EXPECT_FALSE(r.ok()) << "prefix of " << n << " bytes decoded";
  }
}

}  // namespace
}  // namespace sceptre::wire
