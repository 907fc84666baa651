// Slice: how the points of a view lie in the ranks of the mesh it was cut from.
//
// A view of sizes (s_0, ..., s_n-1) maps its point (c_0, ..., c_n-1) to the base rank
//   offset + sum(c_i * strides_i)
// so a view cut from a view is again a Slice of the base mesh: index() and range() compose, and a
// view of any depth costs O(ndim) to hold and to address. View ranks are row-major over `sizes`
// (the last dimension varies fastest), like Extent ranks.
//
// A plain value. Methods that take a dimension or index from a caller return errors; the
// base_rank() accessors throw std::out_of_range, as Extent's do, since a bad rank there is a bug.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "sceptre/core/result.h"
#include "sceptre/mesh/extent.h"

namespace sceptre {

struct Slice {
  std::size_t offset = 0;
  std::vector<std::size_t> sizes;
  std::vector<std::size_t> strides;  // one per size

  // The whole of `extent`, contiguous and row-major: offset 0, strides (prod of later sizes).
  static Slice of(const Extent& extent);

  std::size_t ndim() const { return sizes.size(); }
  // The product of the sizes; 1 for zero dimensions, 0 when a size is 0.
  std::size_t num_ranks() const;

  // The base rank of the view's point of row-major rank `view_rank`.
  std::size_t base_rank(std::size_t view_rank) const;
  // The base rank of the view's point `coords`, one coordinate per dimension.
  std::size_t base_rank(std::span<const std::size_t> coords) const;
  // Every base rank, in view-rank order.
  std::vector<std::size_t> base_ranks() const;

  // The view with dimension `dim` fixed at `i` and dropped. kInvalidArgument for a dim past
  // ndim(), kOutOfRange for an index past its size.
  Result<Slice> index(std::size_t dim, std::size_t i) const;
  // The view keeping the indices begin, begin+step, ... below `end` of dimension `dim`.
  // kInvalidArgument for a dim past ndim(), step 0 or an empty range (begin >= end);
  // kOutOfRange when end is past the dimension's size. Nothing is clipped.
  Result<Slice> range(std::size_t dim, std::size_t begin, std::size_t end, std::size_t step = 1) const;

  bool operator==(const Slice&) const = default;

  template <class Ar>
  void serialize(Ar& ar) { ar(offset, sizes, strides); }
};

}  // namespace sceptre
