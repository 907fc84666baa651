#include "sceptre/mesh/slice.h"

#include <stdexcept>
#include <string>

namespace sceptre {
namespace {

Status check_dim(const Slice& s, std::size_t dim, const char* what) {
  if (dim < s.ndim()) return ok_status();
  return Error(Code::kInvalidArgument, std::string(what) + " of dimension " + std::to_string(dim) +
                                           " of a slice of " + std::to_string(s.ndim()) + " dimensions");
}

}  // namespace

Slice Slice::of(const Extent& extent) {
  Slice s;
  s.sizes = extent.sizes();
  s.strides.resize(s.sizes.size());
  std::size_t stride = 1;
  for (std::size_t i = s.sizes.size(); i-- > 0;) {
    s.strides[i] = stride;
    stride *= s.sizes[i];
  }
  return s;
}

std::size_t Slice::num_ranks() const {
  std::size_t n = 1;
  for (std::size_t size : sizes) n *= size;
  return n;
}

std::size_t Slice::base_rank(std::size_t view_rank) const {
  SCEPTRE_CHECK(sizes.size() == strides.size());
  if (view_rank >= num_ranks()) {
    throw std::out_of_range("view rank " + std::to_string(view_rank) + " is out of range for a slice of " +
                            std::to_string(num_ranks()) + " ranks");
  }
  std::size_t base = offset;
  for (std::size_t i = sizes.size(); i-- > 0;) {
    base += (view_rank % sizes[i]) * strides[i];
    view_rank /= sizes[i];
  }
  return base;
}

std::size_t Slice::base_rank(std::span<const std::size_t> coords) const {
  SCEPTRE_CHECK(sizes.size() == strides.size());
  if (coords.size() != sizes.size()) {
    throw std::out_of_range(std::to_string(coords.size()) + " coordinates for a slice of " +
                            std::to_string(sizes.size()) + " dimensions");
  }
  std::size_t base = offset;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (coords[i] >= sizes[i]) {
      throw std::out_of_range("coordinate " + std::to_string(coords[i]) + " is out of range for dimension " +
                              std::to_string(i) + " of size " + std::to_string(sizes[i]));
    }
    base += coords[i] * strides[i];
  }
  return base;
}

std::vector<std::size_t> Slice::base_ranks() const {
  SCEPTRE_CHECK(sizes.size() == strides.size());
  std::size_t n = num_ranks();
  std::vector<std::size_t> out;
  out.reserve(n);
  // An odometer over the coordinates: O(1) amortized per rank instead of a division per dim.
  std::vector<std::size_t> coords(sizes.size(), 0);
  std::size_t base = offset;
  for (std::size_t r = 0; r < n; ++r) {
    out.push_back(base);
    for (std::size_t i = sizes.size(); i-- > 0;) {
      base += strides[i];
      if (++coords[i] < sizes[i]) break;
      base -= coords[i] * strides[i];
      coords[i] = 0;
    }
  }
  return out;
}

Result<Slice> Slice::index(std::size_t dim, std::size_t i) const {
  SCEPTRE_RETURN_IF_ERROR(check_dim(*this, dim, "index"));
  if (i >= sizes[dim]) {
    return Error(Code::kOutOfRange, "index " + std::to_string(i) + " is out of range for dimension " +
                                        std::to_string(dim) + " of size " + std::to_string(sizes[dim]));
  }
  Slice out = *this;
  out.offset += i * strides[dim];
  out.sizes.erase(out.sizes.begin() + static_cast<std::ptrdiff_t>(dim));
  out.strides.erase(out.strides.begin() + static_cast<std::ptrdiff_t>(dim));
  return out;
}

Result<Slice> Slice::range(std::size_t dim, std::size_t begin, std::size_t end, std::size_t step) const {
  SCEPTRE_RETURN_IF_ERROR(check_dim(*this, dim, "range"));
  std::string what = "range " + std::to_string(begin) + ":" + std::to_string(end) + ":" +
                     std::to_string(step) + " of dimension " + std::to_string(dim);
  if (step == 0) return Error(Code::kInvalidArgument, what + ": the step is 0");
  if (begin >= end) return Error(Code::kInvalidArgument, what + ": the range is empty");
  if (end > sizes[dim]) {
    return Error(Code::kOutOfRange,
                 what + ": the end is past the dimension's size " + std::to_string(sizes[dim]));
  }
  Slice out = *this;
  out.offset += begin * strides[dim];
  out.sizes[dim] = 1 + (end - begin - 1) / step;  // not (n + step - 1) / step: that can overflow
  out.strides[dim] *= step;
  return out;
}

}  // namespace sceptre
