#include <gtest/gtest.h>

#include "sceptre/wire/codec.h"
#include "sceptre/wire/frame.h"

namespace sceptre::wire {
namespace {

Message sample(std::size_t part_size) {
  Message m = encode(std::string("body"), std::uint64_t{42});
  m.parts.push_back(Part::copy_of(std::string(part_size, 'p')));
  m.parts.push_back(Part());  // an empty part survives too
  m.parts.push_back(Part::copy_of(std::string("tail")));
  return m;
}

TEST(Frame, RoundTripsWhateverTheChunking) {
  Message m = sample(100'000);
  std::vector<std::byte> bytes = encode_frame(FrameKind::kData, 77, m);
  bytes.insert(bytes.end(), bytes.begin(), bytes.end());  // two frames back to back
  for (std::size_t chunk : {std::size_t{1}, std::size_t{7}, std::size_t{4096}, bytes.size()}) {
    FrameDecoder decoder;
    std::vector<Frame> out;
    for (std::size_t i = 0; i < bytes.size(); i += chunk) {
      auto piece = std::span(bytes).subspan(i, std::min(chunk, bytes.size() - i));
      ASSERT_TRUE(decoder.feed(piece, out).ok());
    }
    ASSERT_EQ(out.size(), 2u) << "chunk " << chunk;
    EXPECT_EQ(out[0].seq, 77u);
    EXPECT_EQ(out[0].kind, FrameKind::kData);
    EXPECT_EQ(out[0].msg, m);
    EXPECT_EQ(out[1].msg, m);
    EXPECT_TRUE(decoder.idle());
  }
}

TEST(Frame, SmallFramesWholeOrSplitAnywhereDecodeTheSame) {
  // Part-less frames that arrive whole take the decoder's fast path; split ones the slow path.
  std::vector<std::byte> bytes;
  std::vector<Message> sent;
  for (int i = 0; i < 5; ++i) {
    sent.push_back(encode(std::string(static_cast<std::size_t>(i * 7), 'a' + i)));
    auto f = encode_frame(FrameKind::kData, static_cast<std::uint64_t>(i), sent.back());
    bytes.insert(bytes.end(), f.begin(), f.end());
  }
  for (std::size_t split = 0; split <= bytes.size(); ++split) {
    FrameDecoder decoder;
    std::vector<Frame> out;
    ASSERT_TRUE(decoder.feed(std::span(bytes).first(split), out).ok());
    ASSERT_TRUE(decoder.feed(std::span(bytes).subspan(split), out).ok());
    ASSERT_EQ(out.size(), sent.size()) << "split at " << split;
    for (std::size_t i = 0; i < out.size(); ++i) {
      EXPECT_EQ(out[i].seq, i);
      EXPECT_EQ(out[i].msg, sent[i]);
    }
    EXPECT_TRUE(decoder.idle());
  }
  auto bad = bytes;
  bad[0] = std::byte{0};
  FrameDecoder decoder;
  std::vector<Frame> out;
  EXPECT_FALSE(decoder.feed(bad, out).ok()) << "the fast path checks the header too";
}

TEST(Frame, LargePartsCanBeReceivedDirectlyIntoTheirBuffer) {
  Message m = sample(1 << 20);
  std::vector<std::byte> bytes = encode_frame(FrameKind::kData, 1, m);
  FrameDecoder decoder;
  std::vector<Frame> out;
  std::size_t at = 0;
  std::size_t direct_bytes = 0;
  while (at < bytes.size()) {
    std::span<std::byte> target = decoder.direct_target();
    if (target.size() > 1000) {
      std::size_t n = std::min(target.size(), bytes.size() - at);
      std::memcpy(target.data(), bytes.data() + at, n);
      ASSERT_TRUE(decoder.commit_direct(n, out).ok());
      direct_bytes += n;
      at += n;
    } else {
      std::size_t n = std::min<std::size_t>(64, bytes.size() - at);
      ASSERT_TRUE(decoder.feed(std::span(bytes).subspan(at, n), out).ok());
      at += n;
    }
  }
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].msg, m);
  EXPECT_GT(direct_bytes, (1u << 20) - 100);
}

TEST(Frame, BadMagicUnknownKindAndLimitsAreStickyErrors) {
  Message m = sample(10);
  auto good = encode_frame(FrameKind::kData, 1, m);

  auto bad_magic = good;
  bad_magic[0] = std::byte{0x00};
  FrameDecoder d1;
  std::vector<Frame> out;
  auto s = d1.feed(bad_magic, out);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("magic"), std::string::npos);
  EXPECT_FALSE(d1.feed(good, out).ok()) << "errors are sticky";

  auto bad_kind = good;
  bad_kind[1] = std::byte{99};
  FrameDecoder d2;
  EXPECT_FALSE(d2.feed(bad_kind, out).ok());

  FrameDecoder small(FrameLimits{1000, 2});
  auto too_many_parts = small.feed(good, out);  // 3 parts > 2
  ASSERT_FALSE(too_many_parts.ok());
  EXPECT_NE(too_many_parts.error().message().find("parts"), std::string::npos);

  Message big = sample(5000);
  FrameDecoder d3(FrameLimits{1000, 16});
  auto too_big = d3.feed(encode_frame(FrameKind::kData, 1, big), out);
  ASSERT_FALSE(too_big.ok());
  EXPECT_NE(too_big.error().message().find("limit"), std::string::npos);
  EXPECT_TRUE(out.empty());
}

TEST(Frame, PartSizesThatOverflowAreRejected) {
  Message m;
  m.parts.push_back(Part::copy_of(std::string("a")));
  m.parts.push_back(Part::copy_of(std::string("b")));
  auto bytes = encode_frame(FrameKind::kData, 1, m);
  std::uint64_t huge = ~std::uint64_t{0};
  std::memcpy(bytes.data() + kFrameHeaderSize, &huge, 8);
  std::memcpy(bytes.data() + kFrameHeaderSize + 8, &huge, 8);
  FrameDecoder d;
  std::vector<Frame> out;
  EXPECT_FALSE(d.feed(bytes, out).ok());
}

TEST(Frame, SenderRefusesMessagesOverTheLimit) {
  Message m = sample(5000);
  std::vector<std::byte> out;
  auto s = append_frame_prefix(FrameKind::kData, 0, m, FrameLimits{1000, 16}, out);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace sceptre::wire
