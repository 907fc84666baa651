// Selection: a set of points of an extent, written as text, so that a command line, a config
// file or a cast message can say which members of a mesh it means.
//
// One term per dimension, in order, separated by ','; dimensions left out at the end mean '*':
//   *        every index             N        the index N
//   A:B      A, A+1, ... below B     A:B:S    A, A+S, A+2S, ... below B
//   :B  A:  ::S  (a bound left out is the start or the end of the dimension)
//   ?        one index, picked at random (see eval's seed)
// Whole selections combine with '|' (union) and '&' (intersection, binding tighter than '|'),
// grouped with parentheses; spaces are allowed around tokens:
//   "*,0"  "0:2,1:4:2 | 3,*"  "(0,* | 1,*) & *,0:2"  "?"  "?,*"
// Like Python slicing, a range past the end of a dimension is clipped to it (and may select
// nothing); a single index past the end is an error. A selection is checked against an extent only
// when it is evaluated, so one text can select from meshes of different shapes. A lone '*' also
// selects the one point of an extent of zero dimensions.
//
// A Selection is an immutable value, cheap to copy and safe to share between threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "sceptre/core/result.h"
#include "sceptre/mesh/extent.h"

namespace sceptre {

namespace detail {
struct SelectionNode;

// The index that the '?' numbered `ordinal` (0 for the first '?' of the text, counting left to
// right) picks in a dimension of `size` under `seed`. A fixed function of its arguments: the same
// seed picks the same indices in every process and every build.
std::size_t random_index(std::uint64_t seed, std::size_t ordinal, std::size_t size);
}  // namespace detail

class Selection {
 public:
  // Selects everything (all()).
  Selection();

  // kInvalidArgument naming the text and the 1-based column of the error.
  static Result<Selection> parse(std::string_view text);
  // "*": every point of any extent.
  static Selection all();

  // The view ranks (row-major in `extent`) selected, sorted and unique. `seed` picks the indices
  // of the '?' terms. kInvalidArgument when a term list has more terms than `extent` has
  // dimensions; kOutOfRange when a single index is past its dimension (the error names the
  // dimension and its size).
  Result<std::vector<std::size_t>> eval(const Extent& extent, std::uint64_t seed = 0) const;

  // The text the selection was parsed from.
  const std::string& text() const { return text_; }

 private:
  Selection(std::string text, std::shared_ptr<const detail::SelectionNode> root);

  std::string text_;
  // The parsed form, immutable once built; copies of this Selection share it.
  std::shared_ptr<const detail::SelectionNode> root_;
};

}  // namespace sceptre
