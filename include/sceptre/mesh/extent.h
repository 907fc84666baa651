// Extent and Point: the shape of a mesh and one place in it.
//
// An Extent is an ordered list of named dimensions ({hosts=2, gpus=4}); its points are numbered
// row-major (the last dimension varies fastest), so rank 5 of {hosts=2, gpus=4} is {hosts=1, gpus=1}.
// An extent of zero dimensions is a single point (num_ranks() == 1): it is the shape of one actor.
//
// Both are plain values, safe to share read-only between threads. Building an extent from runtime
// input goes through make()/parse(), which return errors; the initializer-list constructor is for
// literals in code and throws std::invalid_argument on bad input, like the accessors below that
// take a name or a rank (a bad one there is the caller's bug, not a runtime condition).
#pragma once

#include <cstddef>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sceptre/core/result.h"

namespace sceptre {

class Point;

class Extent {
 public:
  Extent() = default;
  // Extent{{"hosts", 2}, {"gpus", 4}}. Throws std::invalid_argument with make()'s message.
  Extent(std::initializer_list<std::pair<std::string, std::size_t>> dims);

  // kInvalidArgument unless there is one size per name, the names are unique, non-empty and made
  // of [A-Za-z0-9_], every size is at least 1 and the number of ranks fits in a std::size_t.
  static Result<Extent> make(std::vector<std::string> names, std::vector<std::size_t> sizes);
  // "{hosts=2, gpus=4}" or "hosts=2,gpus=4" (spaces allowed around tokens); "{}" or "" is the
  // extent of zero dimensions. kInvalidArgument naming the text and what is wrong with it.
  static Result<Extent> parse(std::string_view text);

  const std::vector<std::string>& names() const { return names_; }
  const std::vector<std::size_t>& sizes() const { return sizes_; }
  std::size_t ndim() const { return names_.size(); }
  // The product of the sizes; 1 for zero dimensions.
  std::size_t num_ranks() const;

  // The index of dimension `name`, if the extent has one.
  std::optional<std::size_t> dim(std::string_view name) const;
  // The size of dimension `name`; throws std::invalid_argument naming it and the known dims.
  std::size_t size(std::string_view name) const;
  // Like dim(), but throws std::invalid_argument as size() does.
  std::size_t dim_or_throw(std::string_view name) const;

  // The point of `rank`; throws std::out_of_range unless rank < num_ranks().
  Point point(std::size_t rank) const;
  // The rank of `coords`; throws std::out_of_range unless there is one coordinate per dimension
  // and each is below its dimension's size.
  std::size_t rank(std::span<const std::size_t> coords) const;

  // "{hosts=2, gpus=4}"; "{}" for zero dimensions. parse() reads it back.
  std::string to_string() const;

  bool operator==(const Extent&) const = default;

  // Fields in declaration order. Decoding does not validate: check decoded input with make().
  template <class Ar>
  void serialize(Ar& ar) { ar(names_, sizes_); }

 private:
  std::vector<std::string> names_;
  std::vector<std::size_t> sizes_;
};

// A point of an extent: its coordinates, one per dimension, and the rank they number.
class Point {
 public:
  Point() = default;
  // Throws std::out_of_range unless `coords` is a point of `extent` (see Extent::rank).
  Point(Extent extent, std::vector<std::size_t> coords);

  const Extent& extent() const { return extent_; }
  const std::vector<std::size_t>& coords() const { return coords_; }
  // The row-major rank of the point in its extent.
  std::size_t rank() const;
  // The coordinate along dimension `dim`; throws std::invalid_argument as Extent::size does.
  std::size_t operator[](std::string_view dim) const;
  // The coordinate along dimension `i`; throws std::out_of_range unless i < ndim.
  std::size_t coord(std::size_t i) const { return coords_.at(i); }

  // "{hosts=1, gpus=3}"; "{}" for the point of zero dimensions.
  std::string to_string() const;

  bool operator==(const Point&) const = default;

  template <class Ar>
  void serialize(Ar& ar) { ar(extent_, coords_); }

 private:
  Extent extent_;
  std::vector<std::size_t> coords_;
};

}  // namespace sceptre
