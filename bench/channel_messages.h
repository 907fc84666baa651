// The messages the channel benchmarks send, shared by channel_bench and actor_bench's floor.
#pragma once

#include <cstddef>
#include <span>
#include <string>

#include "sceptre/wire/message.h"

namespace bench {

// A message of `size` payload bytes: in the body when small, as one zero-copy part when large.
inline sceptre::wire::Message payload_message(std::size_t size, const sceptre::wire::Part& large) {
  sceptre::wire::Message m;
  if (size >= (64 << 10)) {
    m.parts.push_back(large);
  } else {
    m.body.assign(size, std::byte{'x'});
  }
  return m;
}

inline sceptre::wire::Message text_message(const std::string& text) {
  sceptre::wire::Message m;
  auto b = std::as_bytes(std::span(text.data(), text.size()));
  m.body.assign(b.begin(), b.end());
  return m;
}

inline std::string text_of(const sceptre::wire::Message& m) {
  return {reinterpret_cast<const char*>(m.body.data()), m.body.size()};
}

}  // namespace bench
