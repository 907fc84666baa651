#include "sceptre/mesh/selection.h"

#include <algorithm>
#include <charconv>
#include <iterator>
#include <optional>
#include <variant>

namespace sceptre {
namespace detail {

struct SelectionNode;

// The parsed form: a tree whose leaves are term lists and whose inner nodes combine their parts.
// Its own namespace keeps these short names from clashing with any other detail::Range.
namespace selection_ast {
struct All {};
struct Index {
  std::size_t i = 0;
};
struct Range {
  std::size_t begin = 0;
  std::optional<std::size_t> end;  // none: the end of the dimension
  std::size_t step = 1;
};
struct Random {
  std::size_t ordinal = 0;  // which '?' of the text, for random_index()
};
using Term = std::variant<All, Index, Range, Random>;

struct Terms {
  std::vector<Term> terms;  // one per leading dimension
};
struct Combine {
  enum class Op { kUnion, kIntersection } op = Op::kUnion;
  std::vector<SelectionNode> parts;  // at least two
};
}  // namespace selection_ast

struct SelectionNode {
  std::variant<selection_ast::Terms, selection_ast::Combine> v;
};

namespace {

using namespace selection_ast;  // NOLINT: this file is the AST's only user

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Recursive descent over
//   union := inter ('|' inter)*    inter := primary ('&' primary)*
//   primary := '(' union ')' | term (',' term)*
//   term := '*' | '?' | N | [N] ':' [N] [':' [N]]
class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  Result<SelectionNode> parse() {
    auto node = parse_combine(Combine::Op::kUnion, 0);
    if (!node) return node;
    if (peek() != '\0') return error("expected '|', '&', ',' or the end");
    return node;
  }

 private:
  // Deep enough for any selection a person writes; a bound keeps hostile text off the stack.
  static constexpr int kMaxDepth = 64;

  // One level of the binary grammar: parts of the tighter level joined by `op`.
  Result<SelectionNode> parse_combine(Combine::Op op, int depth) {
    const bool is_union = op == Combine::Op::kUnion;
    const char sep = is_union ? '|' : '&';
    Combine combine{op, {}};
    while (true) {
      auto part = is_union ? parse_combine(Combine::Op::kIntersection, depth) : parse_primary(depth);
      if (!part) return part;
      combine.parts.push_back(std::move(part).value());
      if (peek() != sep) break;
      ++pos_;
    }
    if (combine.parts.size() > 1) return SelectionNode{std::move(combine)};
    SelectionNode only = std::move(combine.parts.front());
    return only;
  }

  Result<SelectionNode> parse_primary(int depth) {
    if (peek() == '(') {
      if (depth >= kMaxDepth) return error("parentheses nested deeper than " + std::to_string(kMaxDepth));
      ++pos_;
      auto inner = parse_combine(Combine::Op::kUnion, depth + 1);
      if (!inner) return inner;
      if (peek() != ')') return error("expected ')'");
      ++pos_;
      return inner;
    }
    Terms terms;
    while (true) {
      auto term = parse_term();
      if (!term) return std::move(term).error();
      terms.terms.push_back(std::move(term).value());
      if (peek() != ',') break;
      ++pos_;
    }
    return SelectionNode{std::move(terms)};
  }

  Result<Term> parse_term() {
    char c = peek();
    if (c == '*' || c == '?') {
      ++pos_;
      return c == '*' ? Term(All{}) : Term(Random{randoms_++});
    }
    if (c != ':' && !is_digit(c)) return error("expected an index, a range, '*', '?' or '('");
    auto first = parse_number();
    if (!first) return std::move(first).error();
    if (peek() != ':') return Term(Index{**first});
    ++pos_;
    Range range{first->value_or(0), std::nullopt, 1};
    auto end = parse_number();
    if (!end) return std::move(end).error();
    range.end = *end;
    if (peek() != ':') return Term(range);
    ++pos_;
    std::size_t step_pos = pos_;
    auto step = parse_number();
    if (!step) return std::move(step).error();
    if (*step == 0) return error_at(step_pos, "the step of a range may not be 0");
    range.step = step->value_or(1);
    return Term(range);
  }

  // A number if one is next, none if not; an error if it does not fit a std::size_t.
  Result<std::optional<std::size_t>> parse_number() {
    if (!is_digit(peek())) return std::optional<std::size_t>();
    std::size_t start = pos_;
    while (pos_ < text_.size() && is_digit(text_[pos_])) ++pos_;
    std::size_t value = 0;
    auto [ptr, ec] = std::from_chars(text_.data() + start, text_.data() + pos_, value);
    if (ec != std::errc()) return error_at(start, "the number is too large");
    return std::optional<std::size_t>(value);
  }

  static bool is_digit(char c) { return c >= '0' && c <= '9'; }

  // The next character after any spaces, '\0' at the end; the position is left on it.
  char peek() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t')) ++pos_;
    return pos_ < text_.size() ? text_[pos_] : '\0';
  }

  Error error(const std::string& what) { return error_at(pos_, what); }
  Error error_at(std::size_t pos, const std::string& what) {
    std::string found = pos < text_.size() ? "'" + std::string(1, text_[pos]) + "'" : "the end";
    return Error(Code::kInvalidArgument, "bad selection '" + std::string(text_) + "' at column " +
                                             std::to_string(pos + 1) + ": " + what + ", found " + found);
  }

  std::string_view text_;
  std::size_t pos_ = 0;
  std::size_t randoms_ = 0;  // '?' terms seen so far
};

using Ranks = std::vector<std::size_t>;

struct Evaluator {
  const Extent& extent;
  std::uint64_t seed;
  const std::string& text;

  Result<Ranks> eval(const SelectionNode& node) const {
    if (auto* terms = std::get_if<Terms>(&node.v)) return eval_terms(*terms);
    const auto& combine = std::get<Combine>(node.v);
    auto acc = eval(combine.parts.front());
    if (!acc) return acc;
    for (std::size_t i = 1; i < combine.parts.size(); ++i) {
      auto next = eval(combine.parts[i]);
      if (!next) return next;
      Ranks out;
      if (combine.op == Combine::Op::kUnion) {
        std::set_union(acc->begin(), acc->end(), next->begin(), next->end(), std::back_inserter(out));
      } else {
        std::set_intersection(acc->begin(), acc->end(), next->begin(), next->end(), std::back_inserter(out));
      }
      *acc = std::move(out);
    }
    return acc;
  }

  // The indices one term selects along dimension `d`, ascending.
  Result<Ranks> eval_term(const Term& term, std::size_t d) const {
    const std::size_t size = extent.sizes()[d];
    Ranks out;
    if (std::holds_alternative<All>(term)) {
      for (std::size_t i = 0; i < size; ++i) out.push_back(i);
    } else if (auto* index = std::get_if<Index>(&term)) {
      if (index->i >= size) {
        return Error(Code::kOutOfRange, "selection '" + text + "': index " + std::to_string(index->i) +
                                            " is out of range for dimension '" + extent.names()[d] +
                                            "' of size " + std::to_string(size));
      }
      out.push_back(index->i);
    } else if (auto* range = std::get_if<Range>(&term)) {
      std::size_t begin = std::min(range->begin, size);
      std::size_t end = std::min(range->end.value_or(size), size);
      std::size_t count = begin < end ? 1 + (end - begin - 1) / range->step : 0;  // no overflow
      for (std::size_t k = 0; k < count; ++k) out.push_back(begin + k * range->step);
    } else if (size > 0) {  // 0 only in an extent decoded without make()'s checks
      out.push_back(random_index(seed, std::get<Random>(term).ordinal, size));
    }
    return out;
  }

  Result<Ranks> eval_terms(const Terms& terms) const {
    const std::size_t ndim = extent.ndim();
    if (ndim == 0 && terms.terms.size() == 1 && std::holds_alternative<All>(terms.terms[0])) {
      return Ranks{0};
    }
    if (terms.terms.size() > ndim) {
      return Error(Code::kInvalidArgument, "selection '" + text + "' has " +
                                               std::to_string(terms.terms.size()) + " terms but extent " +
                                               extent.to_string() + " has " + std::to_string(ndim) +
                                               " dimensions");
    }
    std::vector<Ranks> per_dim(ndim);
    for (std::size_t d = 0; d < ndim; ++d) {
      auto indices = eval_term(d < terms.terms.size() ? terms.terms[d] : Term(All{}), d);
      if (!indices) return indices;
      per_dim[d] = std::move(indices).value();
    }
    // Only now: an empty range must not hide a bad index in a later term.
    for (const Ranks& indices : per_dim) {
      if (indices.empty()) return Ranks{};
    }
    // The product of the per-dimension lists, row-major, so ascending because each list is.
    Ranks out;
    std::vector<std::size_t> at(ndim, 0);
    while (true) {
      std::size_t rank = 0;
      for (std::size_t d = 0; d < ndim; ++d) rank = rank * extent.sizes()[d] + per_dim[d][at[d]];
      out.push_back(rank);
      std::size_t d = ndim;
      while (d > 0 && ++at[d - 1] == per_dim[d - 1].size()) at[--d] = 0;
      if (d == 0) return out;
    }
  }
};

}  // namespace

std::size_t random_index(std::uint64_t seed, std::size_t ordinal, std::size_t size) {
  SCEPTRE_CHECK(size > 0);
  return static_cast<std::size_t>(splitmix64(seed ^ splitmix64(ordinal)) % size);
}

}  // namespace detail

Selection::Selection() : Selection(all()) {}

Selection::Selection(std::string text, std::shared_ptr<const detail::SelectionNode> root)
    : text_(std::move(text)), root_(std::move(root)) {}

Result<Selection> Selection::parse(std::string_view text) {
  auto root = detail::Parser(text).parse();
  if (!root) return std::move(root).error();
  return Selection(std::string(text), std::make_shared<const detail::SelectionNode>(std::move(root).value()));
}

Selection Selection::all() {
  // Shared by every all(): the tree is immutable.
  using detail::selection_ast::All;
  using detail::selection_ast::Terms;
  static const auto kRoot =
      std::make_shared<const detail::SelectionNode>(detail::SelectionNode{Terms{{All{}}}});
  return Selection("*", kRoot);
}

Result<std::vector<std::size_t>> Selection::eval(const Extent& extent, std::uint64_t seed) const {
  return detail::Evaluator{extent, seed, text_}.eval(*root_);
}

}  // namespace sceptre
