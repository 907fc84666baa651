// Part: an immutable byte buffer that travels beside a message body, never copied into it.
// Sending writes it with scatter-gather I/O straight from where it lives; receiving reads it
// into a buffer of its own. Copying a Part copies a reference, not the bytes.
//
// Thread-safety: a Part's bytes never change once it is shared, so copies may be read from
// any thread.
#pragma once

#include <cstddef>
#include <cstring>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

namespace sceptre::wire {

class Part {
 public:
  Part() = default;

  // A new, uninitialised buffer of `size` bytes; fill it through mutable_data() before sharing.
  static Part allocate(std::size_t size) {
    Part p;
    if (size == 0) return p;
    auto buffer = std::make_shared_for_overwrite<std::byte[]>(size);
    p.data_ = buffer.get();
    p.size_ = size;
    p.owner_ = std::move(buffer);
    return p;
  }

  static Part copy_of(std::span<const std::byte> bytes) {
    Part p = allocate(bytes.size());
    if (!bytes.empty()) std::memcpy(p.mutable_data(), bytes.data(), bytes.size());
    return p;
  }

  static Part copy_of(std::string_view text) {
    return copy_of(std::as_bytes(std::span(text.data(), text.size())));
  }

  // Takes ownership of a vector's bytes without copying them.
  static Part adopt(std::vector<std::byte>&& bytes) {
    Part p;
    if (bytes.empty()) return p;
    auto owned = std::make_shared<std::vector<std::byte>>(std::move(bytes));
    p.data_ = owned->data();
    p.size_ = owned->size();
    p.owner_ = std::move(owned);
    return p;
  }

  // Refers to bytes owned elsewhere (a tensor, a mapped file); `keep_alive` keeps them valid.
  static Part view(const void* data, std::size_t size, std::shared_ptr<const void> keep_alive) {
    Part p;
    p.data_ = static_cast<const std::byte*>(data);
    p.size_ = size;
    p.owner_ = std::move(keep_alive);
    return p;
  }

  const std::byte* data() const { return data_; }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  std::span<const std::byte> bytes() const { return {data_, size_}; }
  std::string_view text() const { return {reinterpret_cast<const char*>(data_), size_}; }

  // Writable access, for the creator of an allocate()d Part before anyone else holds it.
  std::byte* mutable_data() { return const_cast<std::byte*>(data_); }

  bool operator==(const Part& other) const {
    return size_ == other.size_ && (size_ == 0 || std::memcmp(data_, other.data_, size_) == 0);
  }

 private:
  // Shared with every copy of this Part: a message held for resending, the receiver, a
  // decoded value. The last holder frees the bytes.
  std::shared_ptr<const void> owner_;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace sceptre::wire
