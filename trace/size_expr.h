// SizeExpr: a size that depends on a model's free dimensions, such as
// "batch*seq" or "seq - 1" (docs/ARCHITECTURE.md, "Free dimensions").
//
//   SizeExpr rows = SizeExpr::parse("batch*seq");         // throws on bad text
//   rows.evaluate({{"batch", 8}, {"seq", 100}});           // 800
//   rows.to_string();                                      // "batch*seq"
//
// An expression is a polynomial of named dimensions with int64 coefficients,
// kept in one canonical form (monomials sorted, no zero coefficient), so two
// expressions are equal exactly when their texts are. Polynomials are what a
// trace can recover from sizes seen at a few values of the dimensions (trace/
// symbolic_shapes.h), and they cover what model code computes from shapes:
// flattening (products), positions and offsets (sums). A size that is not a
// polynomial (seq / 2 rounded down) is refused where it is found, not
// approximated.
#pragma once

#include <cstdint>
#include <map>
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

  // Reads the text to_string writes (spaces allowed): a sum of terms, each an
  // integer, a name, or an integer times names ("2*batch*seq"), joined by +
  // or -. Names are those valid_symbol_name accepts. Throws tandem::Error
  // naming `what` and the position for anything else, for a text over 1024
  // bytes, for more than 64 terms or 8 names in a term, or for a coefficient
  // that does not fit in int64.
  static SizeExpr parse(std::string_view text, std::string_view what);

  bool is_constant() const;
  // The constant term (the value when every name is 0).
  int64_t constant_term() const;
  // The single name this is ("seq"), or "" if it is anything else.
  std::string as_symbol() const;
  // Every name it uses, sorted, each once.
  std::vector<std::string> symbols() const;

  // The value at `values`. Throws tandem::Error naming `what` for a name
  // `values` lacks or a result that overflows int64.
  int64_t evaluate(const SymbolValues& values, std::string_view what) const;

  // "batch*seq + 2*seq - 1"; a constant prints as its number.
  std::string to_string() const;

  // Exact arithmetic; throws tandem::Error on int64 overflow.
  friend SizeExpr operator+(const SizeExpr& a, const SizeExpr& b);
  friend SizeExpr operator*(const SizeExpr& a, const SizeExpr& b);
  friend bool operator==(const SizeExpr& a, const SizeExpr& b) = default;

 private:
  // Monomial (its names sorted, repeated for powers) -> nonzero coefficient.
  std::map<std::vector<std::string>, int64_t> terms_;
};

// A C identifier: a letter or '_', then letters, digits or '_', at most 64
// bytes. Names of free dimensions are these, so that an expression's text
// reads back unambiguously.
bool valid_symbol_name(std::string_view name);

}  // namespace tandem::trace
