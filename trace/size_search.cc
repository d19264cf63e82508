#include "trace/size_search.h"

#include <cstdlib>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"

namespace tandem::trace {
namespace {

constexpr int64_t kMaxDivisor = 16;
constexpr int kRandomChecks = 32;

int64_t floor_divide(int64_t a, int64_t d) {
  const int64_t q = a / d;
  return a % d != 0 && a < 0 ? q - 1 : q;
}

// How a size moves along one dimension x: through u(x) = floor((a*x + r) / d),
// which for a = d = 1, r = 0 is x itself.
struct Part {
  int64_t a = 1, r = 0, d = 1;
  int64_t at(int64_t x) const { return floor_divide(a * x + r, d); }
  SizeExpr expr(const std::string& name) const {
    return SizeExpr::floor_div(
        SizeExpr::constant(a) * SizeExpr::symbol(name) + SizeExpr::constant(r), d);
  }
};

struct Sample {
  int64_t x, size;
};

// Whether size = alpha + beta * u(x) at every sample, for whole alpha, beta.
bool affine_in(const Part& part, const std::vector<Sample>& samples) {
  const Sample& first = samples.front();
  const int64_t u0 = part.at(first.x);
  const Sample* other = nullptr;
  for (const Sample& s : samples) {
    if (part.at(s.x) != u0) {
      other = &s;
      break;
    }
  }
  if (other == nullptr) return false;  // The size moves and u does not.
  const int64_t du = part.at(other->x) - u0, ds = other->size - first.size;
  if (ds % du != 0) return false;
  const int64_t beta = ds / du, alpha = first.size - beta * u0;
  for (const Sample& s : samples) {
    if (s.size != alpha + beta * part.at(s.x)) return false;
  }
  return true;
}

// The part through which the samples move, the simplest first; nullopt if
// none fits.
std::optional<Part> part_of(const std::vector<Sample>& samples) {
  if (affine_in(Part{}, samples)) return Part{};
  for (int64_t d = 2; d <= kMaxDivisor; ++d) {
    for (int64_t a = 1; a < d; ++a) {
      if (std::gcd(a, d) != 1) continue;
      for (int64_t r = 0; r < d; ++r) {
        if (affine_in(Part{a, r, d}, samples)) return Part{a, r, d};
      }
    }
  }
  return std::nullopt;
}

// A dimension the size moves along: its part, and the two values of x the
// grid takes (u moves by exactly one between them).
struct Axis {
  std::string name;
  Part part;
  int64_t x0, x1;
};

}  // namespace

std::optional<SizeExpr> search_size(const SizeOracle& size_at, const SymbolValues& example,
                                    const SymbolValues& last) {
  std::vector<Axis> axes;
  std::vector<std::pair<SymbolValues, int64_t>> checks;  // Every sample, to check the result at.
  for (const auto& [name, x0] : example) {
    std::vector<Sample> samples;
    for (int64_t x = 1; x <= last.at(name); ++x) {
      SymbolValues at = example;
      at[name] = x;
      if (std::optional<int64_t> size = size_at(at)) {
        samples.push_back({x, *size});
        checks.emplace_back(std::move(at), *size);
      }
    }
    if (samples.empty()) return std::nullopt;
    bool moves = false;
    for (const Sample& s : samples) moves = moves || s.size != samples.front().size;
    if (!moves) continue;
    std::optional<Part> part = part_of(samples);
    if (!part) return std::nullopt;
    // The sample nearest the example where u is one more or one less.
    std::optional<int64_t> x1;
    for (const Sample& s : samples) {
      if (std::abs(part->at(s.x) - part->at(x0)) == 1 &&
          (!x1 || std::abs(s.x - x0) < std::abs(*x1 - x0))) {
        x1 = s.x;
      }
    }
    if (!x1) return std::nullopt;
    axes.push_back({name, *part, x0, *x1});
  }

  // Lagrange interpolation on the corners, in the parts: with u taking a
  // (bit clear) or b = a +- 1 (bit set), (u - b) / (a - b) = k*b - k*u and
  // (u - a) / (b - a) = k*u - k*a, k = b - a, all whole.
  SizeExpr size;
  try {
    for (size_t m = 0; m < (size_t{1} << axes.size()); ++m) {
      SymbolValues corner = example;
      for (size_t i = 0; i < axes.size(); ++i) {
        if ((m >> i) & 1) corner[axes[i].name] = axes[i].x1;
      }
      const std::optional<int64_t> value = size_at(corner);
      if (!value) return std::nullopt;
      SizeExpr term = SizeExpr::constant(*value);
      for (size_t i = 0; i < axes.size(); ++i) {
        const Axis& axis = axes[i];
        const int64_t a = axis.part.at(axis.x0), b = axis.part.at(axis.x1), k = b - a;
        const SizeExpr u = axis.part.expr(axis.name);
        term = term * ((m >> i) & 1 ? SizeExpr::constant(k) * u + SizeExpr::constant(-k * a)
                                    : SizeExpr::constant(-k) * u + SizeExpr::constant(k * b));
      }
      size = size + term;
    }
    // Random points move every dimension at once, which the lines do not.
    uint64_t state = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < kRandomChecks && !axes.empty(); ++i) {
      SymbolValues at = example;
      for (auto& [name, value] : at) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        value = 1 + static_cast<int64_t>((state >> 33) % static_cast<uint64_t>(last.at(name)));
      }
      if (std::optional<int64_t> value = size_at(at)) checks.emplace_back(std::move(at), *value);
    }
    for (const auto& [at, value] : checks) {
      if (size.evaluate(at, "a searched size") != value) return std::nullopt;
    }
  } catch (const Error&) {
    return std::nullopt;  // Overflow: no expression of this form.
  }
  return size;
}

}  // namespace tandem::trace
