#include <gtest/gtest.h>

#include "sceptre/channel/addr.h"

namespace sceptre::channel {
namespace {

TEST(ChannelAddr, ParsesAndPrintsEveryForm) {
  for (const char* text : {"local:actors", "unix:/tmp/x.sock", "unix:@abstract", "tcp:127.0.0.1:80",
                           "tcp:host.example:0", "tcp:[::1]:9000"}) {
    auto a = ChannelAddr::parse(text);
    ASSERT_TRUE(a.ok()) << text << ": " << a.error().to_string();
    EXPECT_EQ(a->to_string(), text);
  }
  auto v6 = ChannelAddr::parse("tcp:[::1]:9000");
  EXPECT_EQ(v6->location, "::1");
  EXPECT_EQ(v6->port, 9000);
}

TEST(ChannelAddr, RejectsMalformedAddressesWithAReason) {
  for (const char* text : {"", "tcp", "tcp:host", "tcp:host:99999", "tcp:host:-1", "tcp::80",
                           "udp:host:1", "unix:", "local:", "tcp:[::1:80", "tcp:host:8x"}) {
    auto a = ChannelAddr::parse(text);
    ASSERT_FALSE(a.ok()) << text;
    EXPECT_EQ(a.error().code(), Code::kInvalidArgument);
    EXPECT_NE(a.error().message().find("bad channel address"), std::string::npos);
  }
  auto long_path = ChannelAddr::parse("unix:/" + std::string(200, 'x'));
  EXPECT_FALSE(long_path.ok());
}

}  // namespace
}  // namespace sceptre::channel
