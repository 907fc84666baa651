// The wire layer's cereal archives: a compact little-endian binary body, Parts carried beside
// it, and a bounded decoder.
//
// Why cereal: it already knows every standard type the runtime sends (containers, optional,
// variant, tuple, chrono, ...) and user structs need one line (SCEPTRE_FIELDS). Its own binary
// archive trusts lengths it reads, so these archives add what hostile input needs: every read
// is checked against the bytes actually present, every container length against what remains
// (so no length can make the decoder allocate more than a small multiple of the frame), and
// bools and part indices are validated. Failures throw DecodeError, which decode() turns into
// an Error; nothing here crashes, hangs, or allocates without bound.
#pragma once

#include <cereal/cereal.hpp>
#include <cereal/types/chrono.hpp>
#include <cereal/types/map.hpp>
#include <cereal/types/optional.hpp>
#include <cereal/types/set.hpp>
#include <cereal/types/string.hpp>
#include <cereal/types/tuple.hpp>
#include <cereal/types/unordered_map.hpp>
#include <cereal/types/unordered_set.hpp>
#include <cereal/types/utility.hpp>
#include <cereal/types/variant.hpp>
#include <cereal/types/vector.hpp>
#include <cereal/types/array.hpp>
#include <cstdint>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>

#include "sceptre/wire/message.h"

static_assert(std::endian::native == std::endian::little,
              "the wire format is little-endian; big-endian hosts need byte swapping here");

namespace sceptre::wire {

// Thrown inside decoding when the bytes are not a valid encoding; decode() catches it.
class DecodeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class OutputArchive : public cereal::OutputArchive<OutputArchive, cereal::AllowEmptyClassElision> {
 public:
  // A body starts with room for a typical small message, so that encoding field by field does
  // not reallocate it once per doubling.
  static constexpr std::size_t kInitialBody = 256;

  explicit OutputArchive(Message& out)
      : cereal::OutputArchive<OutputArchive, cereal::AllowEmptyClassElision>(this), out_(out) {
    if (out_.body.capacity() == 0) out_.body.reserve(kInitialBody);
  }

  void write_bytes(const void* data, std::size_t size) {
    if (size == 0) return;
    const auto* bytes = static_cast<const std::byte*>(data);
    out_.body.insert(out_.body.end(), bytes, bytes + size);  // within the reserve: no zero-fill
  }

  // Appends a part to the message; returns its index (what the body records).
  std::uint32_t add_part(Part part) {
    out_.parts.push_back(std::move(part));
    return static_cast<std::uint32_t>(out_.parts.size() - 1);
  }

 private:
  Message& out_;
};

class InputArchive : public cereal::InputArchive<InputArchive, cereal::AllowEmptyClassElision> {
 public:
  InputArchive(std::span<const std::byte> body, std::span<const Part> parts)
      : cereal::InputArchive<InputArchive, cereal::AllowEmptyClassElision>(this),
        body_(body),
        parts_(parts) {}

  void read_bytes(void* data, std::size_t size) {
    if (size > remaining()) {
      throw DecodeError("truncated body: need " + std::to_string(size) + " bytes at offset " +
                        std::to_string(pos_) + ", only " + std::to_string(remaining()) + " left");
    }
    if (size) std::memcpy(data, body_.data() + pos_, size);
    pos_ += size;
  }

  // A container length: each element takes at least one byte, so a length larger than what
  // is left cannot be honest. This is what keeps allocations bounded by the frame size.
  void check_length(std::uint64_t count) const {
    if (count > remaining()) {
      throw DecodeError("length " + std::to_string(count) + " at offset " + std::to_string(pos_) +
                        " exceeds the " + std::to_string(remaining()) + " bytes left");
    }
  }

  const Part& part(std::uint32_t index) const {
    if (index >= parts_.size()) {
      throw DecodeError("part index " + std::to_string(index) + " out of range (message has " +
                        std::to_string(parts_.size()) + " parts)");
    }
    return parts_[index];
  }

  std::size_t remaining() const { return body_.size() - pos_; }

 private:
  std::span<const std::byte> body_;
  std::span<const Part> parts_;
  std::size_t pos_ = 0;
};

// --- how the archives write the primitives cereal hands them ---

template <class T>
  requires std::is_arithmetic_v<T>
void CEREAL_SAVE_FUNCTION_NAME(OutputArchive& ar, const T& value) {
  ar.write_bytes(&value, sizeof(value));
}

template <class T>
  requires(std::is_arithmetic_v<T> && !std::is_same_v<T, bool>)
void CEREAL_LOAD_FUNCTION_NAME(InputArchive& ar, T& value) {
  ar.read_bytes(&value, sizeof(value));
}

inline void CEREAL_LOAD_FUNCTION_NAME(InputArchive& ar, bool& value) {
  std::uint8_t byte = 0;
  ar.read_bytes(&byte, 1);
  if (byte > 1) throw DecodeError("invalid bool byte " + std::to_string(byte));
  value = byte == 1;
}

template <class T>
void CEREAL_SAVE_FUNCTION_NAME(OutputArchive& ar, const cereal::BinaryData<T>& data) {
  ar.write_bytes(data.data, static_cast<std::size_t>(data.size));
}

template <class T>
void CEREAL_LOAD_FUNCTION_NAME(InputArchive& ar, cereal::BinaryData<T>& data) {
  ar.read_bytes(data.data, static_cast<std::size_t>(data.size));
}

template <class T>
void CEREAL_SAVE_FUNCTION_NAME(OutputArchive& ar, const cereal::SizeTag<T>& tag) {
  ar(static_cast<std::uint64_t>(tag.size));
}

template <class T>
void CEREAL_LOAD_FUNCTION_NAME(InputArchive& ar, cereal::SizeTag<T>& tag) {
  std::uint64_t count = 0;
  ar(count);
  ar.check_length(count);
  tag.size = static_cast<std::remove_reference_t<T>>(count);
}

template <class Archive, class T>
  requires(std::is_same_v<Archive, OutputArchive> || std::is_same_v<Archive, InputArchive>)
void CEREAL_SERIALIZE_FUNCTION_NAME(Archive& ar, cereal::NameValuePair<T>& pair) {
  ar(pair.value);
}

// A string_view is written as a std::string is (length, then bytes), so it decodes as one:
// senders can encode text they do not own without copying it into a string first.
inline void CEREAL_SAVE_FUNCTION_NAME(OutputArchive& ar, const std::string_view& text) {
  ar(static_cast<std::uint64_t>(text.size()));
  ar.write_bytes(text.data(), text.size());
}

// A Part inside a value: the body holds its index, the bytes travel beside the body.
inline void CEREAL_SAVE_FUNCTION_NAME(OutputArchive& ar, const Part& part) {
  ar(ar.add_part(part));
}

inline void CEREAL_LOAD_FUNCTION_NAME(InputArchive& ar, Part& part) {
  std::uint32_t index = 0;
  ar(index);
  part = ar.part(index);
}

}  // namespace sceptre::wire

CEREAL_REGISTER_ARCHIVE(sceptre::wire::OutputArchive)
CEREAL_REGISTER_ARCHIVE(sceptre::wire::InputArchive)
CEREAL_SETUP_ARCHIVE_TRAITS(sceptre::wire::InputArchive, sceptre::wire::OutputArchive)

// Inside a struct, lists the fields that travel, in order: `SCEPTRE_FIELDS(name, shape, data)`.
// `SCEPTRE_FIELDS()` marks a struct with no fields (a pure signal).
#define SCEPTRE_FIELDS(...)                                              \
  template <class SceptreArchive>                                        \
  void serialize([[maybe_unused]] SceptreArchive& sceptre_archive) {    \
    __VA_OPT__(sceptre_archive(__VA_ARGS__);)                            \
  }
