#include "sceptre/mesh/extent.h"

#include <charconv>
#include <limits>
#include <stdexcept>

namespace sceptre {
namespace {

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string known_dims(const std::vector<std::string>& names) {
  if (names.empty()) return "none";
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// "{a=2, b=3}" from parallel lists; shared by Extent and Point.
std::string braces(const std::vector<std::string>& names, const std::vector<std::size_t>& values) {
  std::string out = "{";
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i) out += ", ";
    out += names[i] + "=" + std::to_string(values[i]);
  }
  return out + "}";
}

}  // namespace

Extent::Extent(std::initializer_list<std::pair<std::string, std::size_t>> dims) {
  std::vector<std::string> names;
  std::vector<std::size_t> sizes;
  for (const auto& [name, size] : dims) {
    names.push_back(name);
    sizes.push_back(size);
  }
  auto made = make(std::move(names), std::move(sizes));
  if (!made) throw std::invalid_argument(made.error().message());
  *this = std::move(made).value();
}

Result<Extent> Extent::make(std::vector<std::string> names, std::vector<std::size_t> sizes) {
  auto invalid = [](std::string message) { return Error(Code::kInvalidArgument, std::move(message)); };
  if (names.size() != sizes.size()) {
    return invalid("an extent needs one size per dimension name: got " + std::to_string(names.size()) +
                   " names and " + std::to_string(sizes.size()) + " sizes");
  }
  std::size_t ranks = 1;
  for (std::size_t i = 0; i < names.size(); ++i) {
    const std::string& name = names[i];
    if (name.empty()) return invalid("dimension " + std::to_string(i) + " has an empty name");
    for (char c : name) {
      if (!is_name_char(c)) {
        return invalid("dimension name '" + name + "' may contain only letters, digits and '_'");
      }
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (names[j] == name) return invalid("dimension name '" + name + "' appears more than once");
    }
    if (sizes[i] == 0) return invalid("dimension '" + name + "' has size 0; sizes must be at least 1");
    if (ranks > std::numeric_limits<std::size_t>::max() / sizes[i]) {
      return invalid("the extent " + braces(names, sizes) + " has too many ranks for a std::size_t");
    }
    ranks *= sizes[i];
  }
  Extent extent;
  extent.names_ = std::move(names);
  extent.sizes_ = std::move(sizes);
  return extent;
}

Result<Extent> Extent::parse(std::string_view text) {
  auto invalid = [text](const std::string& why) {
    return Error(Code::kInvalidArgument, "bad extent '" + std::string(text) + "': " + why);
  };
  std::string_view body = trim(text);
  if (!body.empty() && body.front() == '{') {
    if (body.back() != '}') return invalid("a '{' without its closing '}'");
    body = trim(body.substr(1, body.size() - 2));
  }
  std::vector<std::string> names;
  std::vector<std::size_t> sizes;
  while (!body.empty()) {
    std::size_t comma = body.find(',');
    std::string_view item = trim(body.substr(0, comma));
    std::size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      return invalid("expected name=size, got '" + std::string(item) + "'");
    }
    std::string_view name = trim(item.substr(0, eq));
    std::string_view num = trim(item.substr(eq + 1));
    std::size_t size = 0;
    auto [end, ec] = std::from_chars(num.data(), num.data() + num.size(), size);
    if (num.empty() || ec != std::errc() || end != num.data() + num.size()) {
      return invalid("the size of '" + std::string(name) + "' is not a number: '" + std::string(num) + "'");
    }
    names.emplace_back(name);
    sizes.push_back(size);
    if (comma == std::string_view::npos) break;
    body = trim(body.substr(comma + 1));
    if (body.empty()) return invalid("a trailing ','");
  }
  auto made = make(std::move(names), std::move(sizes));
  if (!made) return invalid(made.error().message());
  return made;
}

std::size_t Extent::num_ranks() const {
  std::size_t n = 1;
  for (std::size_t s : sizes_) n *= s;
  return n;
}

std::optional<std::size_t> Extent::dim(std::string_view name) const {
  for (std::size_t i = 0; i < names_.size(); ++i) {
    if (names_[i] == name) return i;
  }
  return std::nullopt;
}

std::size_t Extent::dim_or_throw(std::string_view name) const {
  if (auto i = dim(name)) return *i;
  throw std::invalid_argument("no dimension '" + std::string(name) + "' in extent " + to_string() +
                              " (its dimensions: " + known_dims(names_) + ")");
}

std::size_t Extent::size(std::string_view name) const { return sizes_[dim_or_throw(name)]; }

Point Extent::point(std::size_t rank) const {
  if (rank >= num_ranks()) {
    throw std::out_of_range("rank " + std::to_string(rank) + " is out of range for extent " + to_string() +
                            " of " + std::to_string(num_ranks()) + " ranks");
  }
  std::vector<std::size_t> coords(ndim());
  for (std::size_t i = ndim(); i-- > 0;) {
    coords[i] = rank % sizes_[i];
    rank /= sizes_[i];
  }
  return Point(*this, std::move(coords));
}

std::size_t Extent::rank(std::span<const std::size_t> coords) const {
  if (coords.size() != ndim()) {
    throw std::out_of_range(std::to_string(coords.size()) + " coordinates for extent " + to_string() +
                            " of " + std::to_string(ndim()) + " dimensions");
  }
  std::size_t rank = 0;
  for (std::size_t i = 0; i < ndim(); ++i) {
    if (coords[i] >= sizes_[i]) {
      throw std::out_of_range("coordinate " + std::to_string(coords[i]) + " is out of range for dimension '" +
                              names_[i] + "' of size " + std::to_string(sizes_[i]));
    }
    rank = rank * sizes_[i] + coords[i];
  }
  return rank;
}

std::string Extent::to_string() const { return braces(names_, sizes_); }

Point::Point(Extent extent, std::vector<std::size_t> coords)
    : extent_(std::move(extent)), coords_(std::move(coords)) {
  (void)extent_.rank(coords_);  // throws when the coordinates are not a point of the extent
}

std::size_t Point::rank() const { return extent_.rank(coords_); }

std::size_t Point::operator[](std::string_view dim) const { return coords_[extent_.dim_or_throw(dim)]; }

std::string Point::to_string() const { return braces(extent_.names(), coords_); }

}  // namespace sceptre
