// Hostile bytes for the actor layer: every truncation of a call header fails cleanly, and a
// proc that receives garbage over an authenticated channel drops it and keeps serving.
#include <gtest/gtest.h>

#include "actor/envelope.h"
#include "actor/test_actors.h"
#include "sceptre/channel/tx.h"

namespace sceptre::testing {
namespace {

TEST(EnvelopeTest, CallHeaderRoundTripsAndEveryTruncationFails) {
  ActorId to{ProcId{"unix:@dest"}, "trainer", 7};
  PortId reply{ProcId{"unix:@src"}, 42};
  std::optional<ActorId> sender = ActorId{ProcId{"unix:@src"}, "caller", 3};
  wire::Message msg = detail::encode_call_header(to, "step", reply, ProcId{"unix:@src"}, sender);
  wire::encode_into(msg, std::tuple<int>(5));
  auto parsed = detail::parse_envelope(msg);
  ASSERT_TRUE(parsed.ok()) << parsed.error().to_string();
  auto& h = std::get<detail::CallHeader>(parsed->header);
  EXPECT_EQ(h.to_name, "trainer");
  EXPECT_EQ(h.to_index, 7u);
  EXPECT_EQ(h.endpoint, "step");
  EXPECT_EQ(h.from, "unix:@src");
  EXPECT_EQ(h.reply, reply);
  EXPECT_EQ(h.sender, sender);
  auto args = wire::decode<std::tuple<int>>(std::span(msg.body).subspan(parsed->offset), msg.parts);
  ASSERT_TRUE(args.ok());
  EXPECT_EQ(std::get<0>(*args), 5);

  std::size_t header_size = parsed->offset;
  for (std::size_t n = 0; n < header_size; ++n) {
    wire::Message cut;
    cut.body.assign(msg.body.begin(), msg.body.begin() + n);
    auto r = detail::parse_envelope(cut);
    EXPECT_FALSE(r.ok()) << "prefix of " << n << " bytes parsed";
    if (!r.ok()) {
      EXPECT_EQ(r.error().code(), Code::kDataLoss);
    }
  }
  // A length that points past the end.
  wire::Message lying = msg;
  lying.body[1] = std::byte{0xff};
  lying.body[4] = std::byte{0x7f};
  EXPECT_FALSE(detail::parse_envelope(lying).ok());
}

TEST(EnvelopeTest, ProcDropsGarbageAndKeepsServing) {
  Proc proc(test_options());
  ProcScope scope(proc);
  auto c = proc.spawn<Counter>("c", 1);
  channel::Context ctx;
  auto tx = channel::dial(ctx, *channel::ChannelAddr::parse(proc.id().addr), test_options().channel);
  ASSERT_TRUE(tx.ok());
  for (int kind = 0; kind < 8; ++kind) {
    wire::Message junk;
    junk.body.assign(40, std::byte{0xab});
    junk.body[0] = static_cast<std::byte>(kind);
    ASSERT_TRUE((*tx)->send(std::move(junk)).ok());
  }
  ASSERT_TRUE((*tx)->flush(10s).ok());
  EXPECT_EQ(c.call<&Counter::add>(1).get(10s), 2);
}

}  // namespace
}  // namespace sceptre::testing
