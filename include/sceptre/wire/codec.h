// encode/decode: any supported value to and from a Message.
//
// Supported without hand-written code: arithmetic types, bool, enums, std::string, vector,
// array, map/unordered_map, set/unordered_set, optional, variant, tuple/pair, chrono
// durations and time points, Part (as a zero-copy part), Error, and structs that list their
// fields with SCEPTRE_FIELDS(...). decode() never trusts the bytes: a value that does not
// decode, or leaves bytes unread, is an Error with code kDataLoss saying what was wrong.
#pragma once

#include <exception>
#include <string>

#include "sceptre/core/result.h"
#include "sceptre/wire/archive.h"

namespace sceptre::wire {

template <class... Ts>
Message encode(const Ts&... values) {
  Message msg;
  {
    OutputArchive ar(msg);
    ar(values...);
  }
  return msg;
}

// Appends more values to an existing message's body (used to add a header and a payload).
template <class... Ts>
void encode_into(Message& msg, const Ts&... values) {
  OutputArchive ar(msg);
  ar(values...);
}

namespace detail {
Error decode_error(const char* type_name, const std::string& what);
}  // namespace detail

template <class T>
Result<T> decode(std::span<const std::byte> body, std::span<const Part> parts) {
  try {
    T value{};
    InputArchive ar(body, parts);
    ar(value);
    if (ar.remaining() != 0) {
      return detail::decode_error(typeid(T).name(),
                                  std::to_string(ar.remaining()) + " trailing bytes after the value");
    }
    return value;
  } catch (const DecodeError& e) {
    return detail::decode_error(typeid(T).name(), e.what());
  } catch (const cereal::Exception& e) {
    return detail::decode_error(typeid(T).name(), e.what());
  } catch (const std::length_error& e) {
    return detail::decode_error(typeid(T).name(), e.what());
  }
}

template <class T>
Result<T> decode(const Message& msg) {
  return decode<T>(msg.body, msg.parts);
}

}  // namespace sceptre::wire
