// Extent, Point, Slice and Selection: unit tests, and property tests that compare each against a
// brute-force reference which enumerates every point. Random cases use fixed seeds, so a failure
// reproduces; its SCOPED_TRACE names the case.
#include <gtest/gtest.h>

#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <algorithm>
#include <vector>

#include "sceptre/mesh/extent.h"
#include "sceptre/mesh/selection.h"
#include "sceptre/mesh/slice.h"

namespace sceptre {
namespace {

using Ranks = std::vector<std::size_t>;

Ranks iota(std::size_t n) {
  Ranks out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = i;
  return out;
}

// --- Extent and Point ---------------------------------------------------------------------------

TEST(Extent, MakeRejectsBadDimensionsWithPreciseMessages) {
  struct Case {
    std::vector<std::string> names;
    std::vector<std::size_t> sizes;
    std::string message_part;
  };
  std::vector<Case> cases = {
      {{"a", "b"}, {2}, "2 names and 1 sizes"},
      {{""}, {2}, "dimension 0 has an empty name"},
      {{"a-b"}, {2}, "'a-b' may contain only letters, digits and '_'"},
      {{"a", "a"}, {2, 3}, "'a' appears more than once"},
      {{"a", "b"}, {2, 0}, "dimension 'b' has size 0"},
      {{"a", "b"}, {std::size_t{1} << 40, std::size_t{1} << 40}, "too many ranks"},
  };
  for (const auto& c : cases) {
    auto made = Extent::make(c.names, c.sizes);
    ASSERT_FALSE(made.ok()) << c.message_part;
    EXPECT_EQ(made.error().code(), Code::kInvalidArgument);
    EXPECT_NE(made.error().message().find(c.message_part), std::string::npos) << made.error().message();
  }
  EXPECT_TRUE(Extent::make({"Hosts_2", "gpu"}, {2, 8}).ok());
}

TEST(Extent, InitializerListThrowsMakesMessage) {
  EXPECT_EQ((Extent{{"hosts", 2}, {"gpus", 4}}), *Extent::make({"hosts", "gpus"}, {2, 4}));
  try {
    Extent bad{{"hosts", 2}, {"hosts", 4}};
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), Extent::make({"hosts", "hosts"}, {2, 4}).error().message());
  }
  EXPECT_THROW((Extent{{"x", 0}}), std::invalid_argument);
}

TEST(Extent, ShapeAccessors) {
  Extent e{{"hosts", 2}, {"gpus", 4}};
  EXPECT_EQ(e.ndim(), 2u);
  EXPECT_EQ(e.num_ranks(), 8u);
  EXPECT_EQ(e.dim("gpus"), 1u);
  EXPECT_EQ(e.dim("nope"), std::nullopt);
  EXPECT_EQ(e.size("hosts"), 2u);
  try {
    (void)e.size("procs");
    FAIL() << "no exception";
  } catch (const std::invalid_argument& ex) {
    std::string what = ex.what();
    EXPECT_NE(what.find("'procs'"), std::string::npos) << what;
    EXPECT_NE(what.find("hosts, gpus"), std::string::npos) << what;
  }
  Extent none;
  EXPECT_EQ(none.ndim(), 0u);
  EXPECT_EQ(none.num_ranks(), 1u);
  EXPECT_EQ(none.point(0).rank(), 0u);
  EXPECT_EQ(none.to_string(), "{}");
}

TEST(Extent, RankAndPointRoundTripRowMajor) {
  Extent e{{"a", 2}, {"b", 3}, {"c", 4}};
  for (std::size_t r = 0; r < e.num_ranks(); ++r) {
    Point p = e.point(r);
    EXPECT_EQ(p.rank(), r);
    EXPECT_EQ(e.rank(p.coords()), r);
    // Row-major: the last dimension varies fastest.
    EXPECT_EQ(p.coords(), (Ranks{r / 12, (r / 4) % 3, r % 4}));
  }
  EXPECT_THROW((void)e.point(24), std::out_of_range);
  EXPECT_THROW((void)e.rank(Ranks{0, 3, 0}), std::out_of_range);
  EXPECT_THROW((void)e.rank(Ranks{0, 0}), std::out_of_range);
}

TEST(Point, AccessorsAndText) {
  Extent e{{"hosts", 2}, {"gpus", 4}};
  Point p(e, {1, 3});
  EXPECT_EQ(p.rank(), 7u);
  EXPECT_EQ(p["gpus"], 3u);
  EXPECT_EQ(p.coord(0), 1u);
  EXPECT_EQ(p.to_string(), "{hosts=1, gpus=3}");
  EXPECT_EQ(p, e.point(7));
  EXPECT_NE(p, e.point(6));
  EXPECT_THROW((void)p["procs"], std::invalid_argument);
  EXPECT_THROW((void)p.coord(2), std::out_of_range);
  EXPECT_THROW(Point(e, {2, 0}), std::out_of_range);
  EXPECT_THROW(Point(e, {0}), std::out_of_range);
}

TEST(Extent, ParseAcceptsBothFormsAndRoundTrips) {
  Extent e{{"hosts", 2}, {"gpus", 4}};
  EXPECT_EQ(e.to_string(), "{hosts=2, gpus=4}");
  for (const char* text : {"{hosts=2, gpus=4}", "hosts=2,gpus=4", "  { hosts = 2 ,gpus=4 } "}) {
    auto parsed = Extent::parse(text);
    ASSERT_TRUE(parsed.ok()) << text << ": " << parsed.error().to_string();
    EXPECT_EQ(*parsed, e) << text;
  }
  EXPECT_EQ(*Extent::parse("{}"), Extent());
  EXPECT_EQ(*Extent::parse(""), Extent());
  EXPECT_EQ(*Extent::parse(Extent().to_string()), Extent());
}

TEST(Extent, ParseErrorsNameTheText) {
  for (const char* text : {"{a=2", "a", "a=", "a=x", "a=2,", "a=2,,b=3", "a=-1", "a=2,a=3", "a b=2", "a=0"}) {
    auto parsed = Extent::parse(text);
    ASSERT_FALSE(parsed.ok()) << text;
    EXPECT_EQ(parsed.error().code(), Code::kInvalidArgument);
    EXPECT_NE(parsed.error().message().find(text), std::string::npos) << parsed.error().message();
  }
}

// Random extents of 0..4 dimensions of sizes 1..6.
Extent random_extent(std::mt19937_64& rng, std::size_t min_dims = 0) {
  std::size_t ndim = std::uniform_int_distribution<std::size_t>(min_dims, 4)(rng);
  std::vector<std::string> names;
  std::vector<std::size_t> sizes;
  for (std::size_t i = 0; i < ndim; ++i) {
    names.push_back("d" + std::to_string(i));
    sizes.push_back(std::uniform_int_distribution<std::size_t>(1, 6)(rng));
  }
  return *Extent::make(names, sizes);
}

TEST(ExtentProperty, TextAndRankRoundTrip) {
  std::mt19937_64 rng(17);
  for (int i = 0; i < 200; ++i) {
    Extent e = random_extent(rng);
    SCOPED_TRACE(e.to_string());
    EXPECT_EQ(*Extent::parse(e.to_string()), e);
    for (std::size_t r = 0; r < e.num_ranks(); ++r) ASSERT_EQ(e.point(r).rank(), r);
  }
}

// --- Slice ------------------------------------------------------------------------------------

TEST(Slice, OfIsContiguousRowMajor) {
  Extent e{{"a", 2}, {"b", 3}, {"c", 4}};
  Slice s = Slice::of(e);
  EXPECT_EQ(s.offset, 0u);
  EXPECT_EQ(s.sizes, (Ranks{2, 3, 4}));
  EXPECT_EQ(s.strides, (Ranks{12, 4, 1}));
  EXPECT_EQ(s.num_ranks(), 24u);
  EXPECT_EQ(s.base_ranks(), iota(24));
  EXPECT_EQ(s.base_rank(Ranks{1, 2, 3}), 23u);
  EXPECT_THROW((void)s.base_rank(24), std::out_of_range);
  EXPECT_THROW((void)s.base_rank(Ranks{0, 3, 0}), std::out_of_range);
  Slice point = Slice::of(Extent());
  EXPECT_EQ(point.num_ranks(), 1u);
  EXPECT_EQ(point.base_ranks(), Ranks{0});
}

TEST(Slice, IndexDropsAndRangeKeepsTheDimension) {
  Slice s = Slice::of(Extent{{"a", 2}, {"b", 3}, {"c", 4}});
  auto row = s.index(1, 2);
  ASSERT_TRUE(row.ok());
  EXPECT_EQ(row->sizes, (Ranks{2, 4}));
  EXPECT_EQ(row->base_ranks(), (Ranks{8, 9, 10, 11, 20, 21, 22, 23}));
  auto cols = s.range(2, 1, 4, 2);
  ASSERT_TRUE(cols.ok());
  EXPECT_EQ(cols->sizes, (Ranks{2, 3, 2}));
  EXPECT_EQ(cols->index(0, 1)->index(0, 0)->base_ranks(), (Ranks{13, 15}));
}

TEST(Slice, BadIndexAndRangeAreErrors) {
  Slice s = Slice::of(Extent{{"a", 2}, {"b", 3}});
  EXPECT_EQ(s.index(2, 0).error().code(), Code::kInvalidArgument);
  EXPECT_EQ(s.index(1, 3).error().code(), Code::kOutOfRange);
  EXPECT_EQ(s.range(2, 0, 1).error().code(), Code::kInvalidArgument);
  EXPECT_EQ(s.range(1, 0, 2, 0).error().code(), Code::kInvalidArgument);
  EXPECT_EQ(s.range(1, 2, 2).error().code(), Code::kInvalidArgument);
  EXPECT_EQ(s.range(1, 0, 4).error().code(), Code::kOutOfRange);
  EXPECT_TRUE(s.range(1, 0, 3).ok());
}

// The reference view: the base rank of every point, row-major over `sizes`.
struct BruteView {
  Ranks sizes;
  Ranks base;

  // Keeps the points whose coordinate along `dim` passes `keep`, renumbered by `renumber`.
  template <class Keep>
  BruteView filter(std::size_t dim, Keep keep, bool drop) const {
    BruteView out;
    Extent shape = extent();
    for (std::size_t r = 0; r < base.size(); ++r) {
      if (keep(shape.point(r).coord(dim))) out.base.push_back(base[r]);
    }
    out.sizes = sizes;
    std::size_t kept = 0;
    for (std::size_t i = 0; i < sizes[dim]; ++i) kept += keep(i) ? 1 : 0;
    if (drop) {
      out.sizes.erase(out.sizes.begin() + static_cast<std::ptrdiff_t>(dim));
    } else {
      out.sizes[dim] = kept;
    }
    return out;
  }
  Extent extent() const {
    std::vector<std::string> names;
    for (std::size_t i = 0; i < sizes.size(); ++i) names.push_back("d" + std::to_string(i));
    return *Extent::make(names, sizes);
  }
};

TEST(SliceProperty, IndexAndRangeComposeLikeBruteForce) {
  std::mt19937_64 rng(29);
  auto pick = [&rng](std::size_t lo, std::size_t hi) {
    return std::uniform_int_distribution<std::size_t>(lo, hi)(rng);
  };
  for (int c = 0; c < 500; ++c) {
    Extent e = random_extent(rng, 1);
    Slice slice = Slice::of(e);
    BruteView brute{e.sizes(), iota(e.num_ranks())};
    std::string trace = e.to_string();
    for (int step = pick(1, 4); step > 0 && slice.ndim() > 0; --step) {
      std::size_t dim = pick(0, slice.ndim() - 1);
      std::size_t size = slice.sizes[dim];
      if (pick(0, 2) == 0) {
        std::size_t i = pick(0, size - 1);
        trace += " index(" + std::to_string(dim) + "," + std::to_string(i) + ")";
        slice = *slice.index(dim, i);
        brute = brute.filter(dim, [i](std::size_t x) { return x == i; }, true);
      } else {
        std::size_t begin = pick(0, size - 1), end = pick(begin + 1, size), by = pick(1, 3);
        trace += " range(" + std::to_string(dim) + "," + std::to_string(begin) + "," + std::to_string(end) +
                 "," + std::to_string(by) + ")";
        slice = *slice.range(dim, begin, end, by);
        brute = brute.filter(
            dim, [=](std::size_t x) { return x >= begin && x < end && (x - begin) % by == 0; }, false);
      }
    }
    SCOPED_TRACE(trace);
    ASSERT_EQ(slice.sizes, brute.sizes);
    ASSERT_EQ(slice.base_ranks(), brute.base);
    Extent view = brute.extent();
    for (std::size_t r = 0; r < brute.base.size(); ++r) {
      ASSERT_EQ(slice.base_rank(r), brute.base[r]);
      ASSERT_EQ(slice.base_rank(view.point(r).coords()), brute.base[r]);
    }
  }
}

// --- Selection --------------------------------------------------------------------------------

Ranks eval_ok(std::string_view text, const Extent& extent, std::uint64_t seed = 0) {
  auto sel = Selection::parse(text);
  EXPECT_TRUE(sel.ok()) << text << ": " << sel.error().to_string();
  if (!sel.ok()) return {};
  auto ranks = sel->eval(extent, seed);
  EXPECT_TRUE(ranks.ok()) << text << ": " << ranks.error().to_string();
  return ranks.ok() ? *ranks : Ranks{};
}

TEST(Selection, ParseErrorsGiveTheColumn) {
  struct Case {
    const char* text;
    std::size_t column;
  };
  for (const auto& c : std::vector<Case>{{"", 1},        {"0,x", 3},     {"(0", 3},  {"0::0", 4},
                                         {"1 2", 3},     {"0,,1", 3},    {"0|", 3},  {"0 & ", 5},
                                         {"0)", 2},      {"-1", 1},      {"0:1:2:3", 6},
                                         {"99999999999999999999999", 1}, {"*,?a", 4}}) {
    auto sel = Selection::parse(c.text);
    ASSERT_FALSE(sel.ok()) << c.text;
    EXPECT_EQ(sel.error().code(), Code::kInvalidArgument);
    std::string want = "at column " + std::to_string(c.column) + ":";
    EXPECT_NE(sel.error().message().find(want), std::string::npos) << c.text << ": " << sel.error().message();
  }
  EXPECT_FALSE(Selection::parse(std::string(100, '(') + "0" + std::string(100, ')')).ok());
  EXPECT_TRUE(Selection::parse(std::string(10, '(') + "0" + std::string(10, ')')).ok());
}

TEST(Selection, EachTermForm) {
  Extent e{{"a", 3}, {"b", 6}};
  auto rows = [](Ranks as, Ranks bs) {  // the ranks of as x bs in {a=3, b=6}
    Ranks out;
    for (auto a : as) {
      for (auto b : bs) out.push_back(a * 6 + b);
    }
    return out;
  };
  EXPECT_EQ(eval_ok("*", e), iota(18));
  EXPECT_EQ(eval_ok("*,*", e), iota(18));
  EXPECT_EQ(eval_ok("1", e), rows({1}, {0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(eval_ok("*,0", e), rows({0, 1, 2}, {0}));
  EXPECT_EQ(eval_ok("1:3,2:4", e), rows({1, 2}, {2, 3}));
  EXPECT_EQ(eval_ok("0,1:6:2", e), rows({0}, {1, 3, 5}));
  EXPECT_EQ(eval_ok("0,:2", e), rows({0}, {0, 1}));
  EXPECT_EQ(eval_ok("0,4:", e), rows({0}, {4, 5}));
  EXPECT_EQ(eval_ok("0,::3", e), rows({0}, {0, 3}));
  EXPECT_EQ(eval_ok("0,:", e), rows({0}, {0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(eval_ok("0,1::4", e), rows({0}, {1, 5}));
  EXPECT_EQ(eval_ok("0,1:3:", e), rows({0}, {1, 2}));
  EXPECT_EQ(eval_ok(" 0 , 1 : 3 ", e), rows({0}, {1, 2}));
  // Ranges clip like Python slices; they may select nothing.
  EXPECT_EQ(eval_ok("2:99,5:100", e), rows({2}, {5}));
  EXPECT_EQ(eval_ok("3:", e), Ranks{});
  EXPECT_EQ(eval_ok("2:1", e), Ranks{});
}

TEST(Selection, UnionIntersectionPrecedenceAndParens) {
  Extent e{{"a", 4}};
  EXPECT_EQ(eval_ok("0 | 2", e), (Ranks{0, 2}));
  EXPECT_EQ(eval_ok("0:3 & 1:4", e), (Ranks{1, 2}));
  // '&' binds tighter: 0 | (1 & 2) is {0}, (0 | 1) & 1 is {1}.
  EXPECT_EQ(eval_ok("0 | 1 & 2", e), (Ranks{0}));
  EXPECT_EQ(eval_ok("1 & 2 | 0", e), (Ranks{0}));
  EXPECT_EQ(eval_ok("(0 | 1) & 1", e), (Ranks{1}));
  EXPECT_EQ(eval_ok("((0|1)|(3)) & (1:)", e), (Ranks{1, 3}));
  Extent grid{{"a", 2}, {"b", 3}};
  EXPECT_EQ(eval_ok("0:2,1:4:2 | 1,*", grid), (Ranks{1, 3, 4, 5}));
  EXPECT_EQ(eval_ok("(0,* | 1,*) & *,0:2", grid), (Ranks{0, 1, 3, 4}));
}

TEST(Selection, EvalErrorsNameTheDimension) {
  Extent e{{"hosts", 2}, {"gpus", 4}};
  auto sel = *Selection::parse("0,4");
  auto r = sel.eval(e);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), Code::kOutOfRange);
  EXPECT_NE(r.error().message().find("'gpus' of size 4"), std::string::npos) << r.error().message();
  auto too_many = Selection::parse("*,*,*")->eval(e);
  ASSERT_FALSE(too_many.ok());
  EXPECT_EQ(too_many.error().code(), Code::kInvalidArgument);
  // An empty range does not hide a bad index beside it, nor does a union.
  EXPECT_FALSE(Selection::parse("5:,9")->eval(e).ok());
  EXPECT_FALSE(Selection::parse("0 | 7")->eval(e).ok());
}

TEST(Selection, AllAndZeroDimensions) {
  Extent e{{"a", 2}, {"b", 2}};
  EXPECT_EQ(*Selection::all().eval(e), iota(4));
  EXPECT_EQ(*Selection().eval(e), iota(4));
  EXPECT_EQ(Selection::all().text(), "*");
  EXPECT_EQ(Selection::parse(" 0 | 1 ")->text(), " 0 | 1 ");
  EXPECT_EQ(*Selection::all().eval(Extent()), Ranks{0});
  EXPECT_EQ(eval_ok("*", Extent()), Ranks{0});
  EXPECT_FALSE(Selection::parse("0")->eval(Extent()).ok());
}

TEST(Selection, RandomIsDeterministicPerSeedAndInRange) {
  Extent e{{"hosts", 6}, {"gpus", 4}};
  std::vector<bool> seen(6, false);
  for (std::uint64_t seed = 0; seed < 200; ++seed) {
    Ranks one = eval_ok("?", e, seed);
    ASSERT_EQ(one.size(), 4u);  // one host, all its gpus
    std::size_t host = one[0] / 4;
    EXPECT_EQ(one, (Ranks{host * 4, host * 4 + 1, host * 4 + 2, host * 4 + 3}));
    seen[host] = true;
    EXPECT_EQ(eval_ok("?,*", e, seed), one);
    EXPECT_EQ(eval_ok("?", e, seed), one) << "seed " << seed;
    EXPECT_EQ(eval_ok("?,?", e, seed).size(), 1u);
  }
  for (std::size_t h = 0; h < 6; ++h) EXPECT_TRUE(seen[h]) << "host " << h << " never picked";
}

// A term of a generated selection, as the reference evaluator reads it.
struct Ref {
  enum Kind { kAll, kIndex, kRange, kRandom } kind = kAll;
  std::size_t index = 0;            // kIndex: the index; kRandom: which '?' of the text
  std::size_t begin = 0, step = 1;  // kRange
  std::optional<std::size_t> end;   // kRange; none: the end of the dimension
};

// A generated selection: a term list (`is_list`) or a union / intersection of parts.
struct RefNode {
  bool is_list = true;
  std::vector<Ref> terms;
  bool is_union = false;
  std::vector<RefNode> parts;
};

// Numbers the '?' terms in the order render() writes them: left to right.
void number_randoms(RefNode& n, std::size_t& next) {
  for (auto& t : n.terms) {
    if (t.kind == Ref::kRandom) t.index = next++;
  }
  for (auto& p : n.parts) number_randoms(p, next);
}

class Generator {
 public:
  explicit Generator(std::uint64_t seed) : rng_(seed) {}

  // A random node over `ndim` dimensions, and its text.
  RefNode node(std::size_t ndim, int depth) {
    if (depth == 0 || pick(0, 2) == 0) return list(ndim);
    RefNode n;
    n.is_list = false;
    n.is_union = pick(0, 1) == 0;
    for (std::size_t i = pick(2, 3); i > 0; --i) n.parts.push_back(node(ndim, depth - 1));
    return n;
  }

  std::string render(const RefNode& n, int parent_prec) {
    std::string out;
    int prec = n.is_list ? 2 : n.is_union ? 0 : 1;
    if (n.is_list) {
      for (std::size_t i = 0; i < n.terms.size(); ++i) {
        out += (i ? "," : "") + space() + term(n.terms[i]) + space();
      }
    } else {
      for (std::size_t i = 0; i < n.parts.size(); ++i) {
        out += (i ? (n.is_union ? "|" : "&") : "") + render(n.parts[i], prec + 1);
      }
    }
    if (prec < parent_prec || pick(0, 5) == 0) out = space() + "(" + out + ")" + space();
    return out;
  }

  std::size_t pick(std::size_t lo, std::size_t hi) {
    return std::uniform_int_distribution<std::size_t>(lo, hi)(rng_);
  }

 private:
  RefNode list(std::size_t ndim) {
    RefNode n;
    // Now and then one term more than there are dimensions (an error to evaluate).
    std::size_t count = pick(0, 19) == 0 ? ndim + 1 : pick(1, std::max<std::size_t>(ndim, 1));
    for (std::size_t i = 0; i < count; ++i) n.terms.push_back(random_term());
    return n;
  }

  Ref random_term() {
    Ref t;
    switch (pick(0, 9)) {
      case 0: case 1: t.kind = Ref::kAll; break;
      case 2: case 3: t.kind = Ref::kIndex; t.index = pick(0, 6); break;  // 6: out of range for all
      case 4: t.kind = Ref::kRandom; break;
      default:
        t.kind = Ref::kRange;
        t.begin = pick(0, 7);
        if (pick(0, 3)) t.end = pick(0, 8);
        t.step = pick(1, 4);
    }
    return t;
  }

  std::string term(const Ref& t) {
    switch (t.kind) {
      case Ref::kAll: return "*";
      case Ref::kIndex: return std::to_string(t.index);
      case Ref::kRandom: return "?";
      default: break;
    }
    // Write a range in any of its spellings: bounds at their defaults may be left out.
    std::string begin = t.begin == 0 && pick(0, 1) ? "" : std::to_string(t.begin);
    std::string end = t.end ? std::to_string(*t.end) : "";
    std::string out = begin + ":" + end;
    if (t.step != 1 || pick(0, 2) == 0) {
      out += ":" + (t.step == 1 && pick(0, 1) ? "" : std::to_string(t.step));
    }
    return out;
  }

  std::string space() { return pick(0, 3) == 0 ? " " : ""; }

  std::mt19937_64 rng_;
};

// The reference: decides each point by itself. Returns the error code evaluation must give, if any
// (the first bad term list, left to right, as eval() reports it).
std::optional<Code> ref_error(const RefNode& n, const Extent& e) {
  if (!n.is_list) {
    for (const auto& p : n.parts) {
      if (auto code = ref_error(p, e)) return code;
    }
    return std::nullopt;
  }
  bool lone_star = n.terms.size() == 1 && n.terms[0].kind == Ref::kAll;
  if (e.ndim() == 0 && lone_star) return std::nullopt;
  if (n.terms.size() > e.ndim()) return Code::kInvalidArgument;
  for (std::size_t d = 0; d < n.terms.size(); ++d) {
    if (n.terms[d].kind == Ref::kIndex && n.terms[d].index >= e.sizes()[d]) return Code::kOutOfRange;
  }
  return std::nullopt;
}

bool ref_contains(const RefNode& n, const Point& p, std::uint64_t seed) {
  if (!n.is_list) {
    bool acc = !n.is_union;
    for (const auto& part : n.parts) {
      bool in = ref_contains(part, p, seed);
      acc = n.is_union ? (acc || in) : (acc && in);
    }
    return acc;
  }
  const Extent& e = p.extent();
  for (std::size_t d = 0; d < n.terms.size() && d < e.ndim(); ++d) {
    const Ref& t = n.terms[d];
    std::size_t x = p.coord(d), size = e.sizes()[d];
    bool in = true;
    switch (t.kind) {
      case Ref::kAll: break;
      case Ref::kIndex: in = x == t.index; break;
      case Ref::kRandom: in = x == detail::random_index(seed, t.index, size); break;
      default: in = x >= t.begin && x < t.end.value_or(size) && (x - t.begin) % t.step == 0; break;
    }
    if (!in) return false;
  }
  return true;
}

TEST(SelectionProperty, EvalMatchesBruteForce) {
  Generator gen(41);
  std::size_t checked = 0, errors = 0, nonempty = 0;
  for (int c = 0; c < 1500; ++c) {
    std::mt19937_64 shape_rng(1000 + c);
    Extent e = random_extent(shape_rng);
    RefNode ref = gen.node(std::max<std::size_t>(e.ndim(), 1), 3);
    std::size_t randoms = 0;
    number_randoms(ref, randoms);
    std::string text = gen.render(ref, 0);
    std::uint64_t seed = gen.pick(0, 1000);
    SCOPED_TRACE("case " + std::to_string(c) + ": '" + text + "' over " + e.to_string() + " seed " +
                 std::to_string(seed));
    auto sel = Selection::parse(text);
    ASSERT_TRUE(sel.ok()) << sel.error().to_string();
    auto got = sel->eval(e, seed);
    if (auto code = ref_error(ref, e)) {
      ASSERT_FALSE(got.ok());
      EXPECT_EQ(got.error().code(), *code) << got.error().to_string();
      ++errors;
      continue;
    }
    ASSERT_TRUE(got.ok()) << got.error().to_string();
    Ranks want;
    for (std::size_t r = 0; r < e.num_ranks(); ++r) {
      if (ref_contains(ref, e.point(r), seed)) want.push_back(r);
    }
    ASSERT_EQ(*got, want);
    EXPECT_EQ(*sel->eval(e, seed), *got);  // deterministic
    ++checked;
    nonempty += want.empty() ? 0 : 1;
  }
  // The generator must exercise both outcomes, and mostly the interesting one.
  EXPECT_GE(checked, 500u);
  EXPECT_GE(nonempty, 250u);
  EXPECT_GE(errors, 50u);
}

}  // namespace
}  // namespace sceptre
