// SizeExpr: a size that depends on a model's free dimensions, such as
// "batch*seq", "seq - 1" or "floordiv(seq + 1, 2)" (docs/ARCHITECTURE.md,
// "Free dimensions").
//
//   SizeExpr rows = SizeExpr::parse("batch*seq");         // throws on bad text
//   rows.evaluate({{"batch", 8}, {"seq", 100}});           // 800
//   rows.to_string();                                      // "batch*seq"
//
// An expression is a polynomial with int64 coefficients whose factors are
// named dimensions and floor divisions of such expressions by a constant,
// floordiv(e, d) = floor(e / d): the length a strided convolution or pooling
// leaves. It is kept in one canonical form (monomials sorted, no zero
// coefficient; a division's numerator has coefficients in [0, d), what d
// divides moved out), so two expressions made the same way print the same.
// Polynomials are what a trace recovers from sizes seen at a few values of
// the dimensions (trace/symbolic_shapes.h): flattening (products), positions
// and offsets (sums); the divisions come from what the ops' own shape
// inference says at many values.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::trace {

// The value of each free dimension, by name.
using SymbolValues = std::map<std::string, int64_t, std::less<>>;

class SizeExpr {
 public:
  SizeExpr() = default;  // 0.
  static SizeExpr constant(int64_t value);
  static SizeExpr symbol(std::string name);
  // floor(numerator / divisor); throws tandem::Error for a divisor < 1.
  static SizeExpr floor_div(const SizeExpr& numerator, int64_t divisor);

  // Reads the text to_string writes (spaces allowed): a sum of terms joined
  // by + or -, each a product of factors ("2*batch*seq"), each factor an
  // integer, a name, or floordiv(expression, integer). Names are those
  // valid_symbol_name accepts. Throws tandem::Error naming `what` and the
  // position for anything else, for a text over 1024 bytes, for more than
  // 64 terms or 8 names in a term, divisions nested over 8 deep, a divisor
  // < 1, or a coefficient that does not fit in int64.
  static SizeExpr parse(std::string_view text, std::string_view what);

  bool is_constant() const;
  // The constant term (the value when every name is 0).
  int64_t constant_term() const;
  // The single name this is ("seq"), or "" if it is anything else.
  std::string as_symbol() const;
  // Every name it uses (in divisions too), sorted, each once.
  std::vector<std::string> symbols() const;

  // The value at `values`. Throws tandem::Error naming `what` for a name
  // `values` lacks or a result that overflows int64.
  int64_t evaluate(const SymbolValues& values, std::string_view what) const;

  // "batch*seq + 2*seq - 1"; a constant prints as its number.
  std::string to_string() const;

  // Exact arithmetic; throws tandem::Error on int64 overflow.
  friend SizeExpr operator+(const SizeExpr& a, const SizeExpr& b);
  friend SizeExpr operator*(const SizeExpr& a, const SizeExpr& b);
  friend bool operator==(const SizeExpr& a, const SizeExpr& b) { return a.terms_ == b.terms_; }

 private:
  struct Division;
  // Monomial (its factors sorted, repeated for powers) -> nonzero
  // coefficient. A factor is a name, or the text of a floor division
  // ("floordiv(seq + 1, 2)"), which names no dimension.
  std::map<std::vector<std::string>, int64_t> terms_;
  // The divisions the factors name, by their text.
  std::map<std::string, std::shared_ptr<const Division>, std::less<>> divisions_;
};

// A C identifier: a letter or '_', then letters, digits or '_', at most 64
// bytes. Names of free dimensions are these, so that an expression's text
// reads back unambiguously.
bool valid_symbol_name(std::string_view name);

}  // namespace tandem::trace
