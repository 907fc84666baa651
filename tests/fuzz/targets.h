// The fuzz targets' bodies, shared by the libFuzzer entry points (clang, scripts/fuzz.sh) and
// the regression test that replays every saved input under the normal build.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "sceptre/wire/codec.h"
#include "sceptre/wire/frame.h"

namespace sceptre::fuzz {

struct Inner {
  std::string name;
  std::vector<std::int32_t> values;
  std::optional<bool> flag;
  SCEPTRE_FIELDS(name, values, flag)
};

struct Everything {
  std::uint16_t a = 0;
  double b = 0;
  std::map<std::string, Inner> inners;
  std::variant<std::monostate, std::int64_t, std::string, Inner> choice;
  std::vector<wire::Part> parts;
  std::pair<std::string, std::vector<std::string>> pair;
  Error error;
  SCEPTRE_FIELDS(a, b, inners, choice, parts, pair, error)
};

// Tries every decoding a receiver would try on a message.
inline void decode_all(const wire::Message& msg) {
  (void)wire::decode<Everything>(msg);
  (void)wire::decode<Inner>(msg);
  (void)wire::decode<std::vector<std::string>>(msg);
  (void)wire::decode<std::map<std::int32_t, std::vector<double>>>(msg);
}

// Frame decoder: the input is split into chunks whose sizes come from the input itself.
inline void fuzz_frame(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return;
  std::size_t chunk = 1 + data[0] % 64;
  wire::FrameDecoder decoder(wire::FrameLimits{1 << 16, 8});
  std::vector<wire::Frame> frames;
  auto bytes = std::as_bytes(std::span(data + 1, size - 1));
  for (std::size_t i = 0; i < bytes.size(); i += chunk) {
    if (!decoder.feed(bytes.subspan(i, std::min(chunk, bytes.size() - i)), frames).ok()) break;
  }
  for (const wire::Frame& f : frames) decode_all(f.msg);
}

// Message decoder: the input is a body; two small parts are attached.
inline void fuzz_message(const std::uint8_t* data, std::size_t size) {
  wire::Message msg;
  auto bytes = std::as_bytes(std::span(data, size));
  msg.body.assign(bytes.begin(), bytes.end());
  msg.parts.push_back(wire::Part::copy_of(std::string("part0")));
  msg.parts.push_back(wire::Part());
  decode_all(msg);
}

}  // namespace sceptre::fuzz
