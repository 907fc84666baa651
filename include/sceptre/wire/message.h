// Message: what every channel carries. A body (the encoded value, usually small) plus zero or
// more Parts (large byte buffers, later tensors) that are sent and received without being
// copied into the body. Which parts belong to which field is recorded in the body.
#pragma once

#include <cstddef>
#include <vector>

#include "sceptre/wire/part.h"

namespace sceptre::wire {

struct Message {
  std::vector<std::byte> body;
  std::vector<Part> parts;

  // Body plus parts: what the message costs on the wire, not counting framing.
  std::size_t byte_size() const {
    std::size_t n = body.size();
    for (const Part& p : parts) n += p.size();
    return n;
  }

  bool operator==(const Message&) const = default;
};

}  // namespace sceptre::wire
