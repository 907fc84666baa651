// Sends one message to itself through an installed sceptre: proves the headers, the library
// and its dependencies are all found through the package config.
#include <sceptre/channel/rx.h>
#include <sceptre/channel/tx.h>
#include <sceptre/wire/codec.h>

#include <cstdio>

int main() {
  using namespace sceptre;
  channel::Context ctx;
  channel::ChannelOptions options;
  options.secret = "consumer";
  auto rx = channel::serve(ctx, *channel::ChannelAddr::parse("local:consumer"), options);
  auto tx = channel::dial(ctx, (*rx)->address(), options);
  if (!(*tx)->send(wire::encode(std::string("installed"))).ok()) return 1;
  auto m = (*rx)->recv(std::chrono::seconds(10));
  if (!m) return 1;
  std::printf("%s\n", wire::decode<std::string>(*m)->c_str());
  return *wire::decode<std::string>(*m) == "installed" ? 0 : 1;
}
