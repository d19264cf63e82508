#include "trace/size_expr.h"

#include <algorithm>
#include <utility>

#include "core/error.h"

namespace tandem::trace {
namespace {

constexpr size_t kMaxTextBytes = 1024;
constexpr size_t kMaxTerms = 64;
constexpr size_t kMaxNamesPerTerm = 8;
constexpr size_t kMaxNameBytes = 64;

bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || (c >= '0' && c <= '9'); }

// A recursive-descent reader of SizeExpr::parse's grammar:
//   expr := ['-'] term (('+' | '-') term)*
//   term := factor ('*' factor)*        factor := integer | name
class Reader {
 public:
  Reader(std::string_view text, std::string_view what) : text_(text), what_(what) {}

  SizeExpr expr() {
    SizeExpr sum;
    bool negative = take('-');
    size_t terms = 0;
    while (true) {
      TANDEM_CHECK(++terms <= kMaxTerms, what_, ": size expression has more than ", kMaxTerms,
                   " terms");
      SizeExpr t = term();
      sum = sum + (negative ? SizeExpr::constant(-1) * t : t);
      if (take('+')) {
        negative = false;
      } else if (take('-')) {
        negative = true;
      } else {
        break;
      }
    }
    skip_spaces();
    if (pos_ != text_.size()) fail("unexpected character");
    return sum;
  }

 private:
  SizeExpr term() {
    SizeExpr product = SizeExpr::constant(1);
    size_t names = 0;
    do {
      skip_spaces();
      if (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
        product = product * SizeExpr::constant(integer());
      } else if (pos_ < text_.size() && is_name_start(text_[pos_])) {
        TANDEM_CHECK(++names <= kMaxNamesPerTerm, what_, ": a term of size expression '", text_,
                     "' multiplies more than ", kMaxNamesPerTerm, " names");
        product = product * SizeExpr::symbol(name());
      } else {
        fail("expected a number or a name");
      }
    } while (take('*'));
    return product;
  }

  int64_t integer() {
    int64_t value = 0;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      const int64_t digit = text_[pos_] - '0';
      if (__builtin_mul_overflow(value, 10, &value) ||
          __builtin_add_overflow(value, digit, &value)) {
        fail("a number does not fit in int64");
      }
      ++pos_;
    }
    return value;
  }

  std::string name() {
    const size_t start = pos_;
    while (pos_ < text_.size() && is_name_char(text_[pos_])) ++pos_;
    if (pos_ - start > kMaxNameBytes) fail("a name is longer than 64 bytes");
    return std::string(text_.substr(start, pos_ - start));
  }

  bool take(char c) {
    skip_spaces();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void skip_spaces() {
    while (pos_ < text_.size() && text_[pos_] == ' ') ++pos_;
  }
  [[noreturn]] void fail(std::string_view problem) const {
    throw Error(
        str_cat(what_, ": bad size expression '", text_, "' at byte ", pos_, ": ", problem));
  }

  std::string_view text_;
  std::string_view what_;
  size_t pos_ = 0;
};

int64_t checked_multiply(int64_t a, int64_t b, std::string_view what) {
  int64_t product = 0;
  TANDEM_CHECK(!__builtin_mul_overflow(a, b, &product), what, " overflows int64 (", a, " * ", b,
               ")");
  return product;
}

int64_t checked_sum(int64_t a, int64_t b, std::string_view what) {
  int64_t sum = 0;
  TANDEM_CHECK(!__builtin_add_overflow(a, b, &sum), what, " overflows int64 (", a, " + ", b, ")");
  return sum;
}

}  // namespace

bool valid_symbol_name(std::string_view name) {
  return !name.empty() && name.size() <= kMaxNameBytes && is_name_start(name[0]) &&
         std::all_of(name.begin(), name.end(), is_name_char);
}

SizeExpr SizeExpr::constant(int64_t value) {
  SizeExpr e;
  if (value != 0) e.terms_[{}] = value;
  return e;
}

SizeExpr SizeExpr::symbol(std::string name) {
  TANDEM_CHECK(valid_symbol_name(name), "'", name,
               "' is not a valid name for a dimension (a letter or '_', then letters, digits or "
               "'_', at most 64 bytes)");
  SizeExpr e;
  e.terms_[{std::move(name)}] = 1;
  return e;
}

SizeExpr SizeExpr::parse(std::string_view text, std::string_view what) {
  TANDEM_CHECK(text.size() <= kMaxTextBytes, what, ": size expression of ", text.size(),
               " bytes is longer than the limit of ", kMaxTextBytes);
  return Reader(text, what).expr();
}

bool SizeExpr::is_constant() const {
  return terms_.empty() || (terms_.size() == 1 && terms_.begin()->first.empty());
}

int64_t SizeExpr::constant_term() const {
  auto it = terms_.find({});
  return it == terms_.end() ? 0 : it->second;
}

std::string SizeExpr::as_symbol() const {
  if (terms_.size() != 1) return "";
  const auto& [names, coefficient] = *terms_.begin();
  return names.size() == 1 && coefficient == 1 ? names[0] : "";
}

std::vector<std::string> SizeExpr::symbols() const {
  std::vector<std::string> names;
  for (const auto& [monomial, coefficient] : terms_) {
    names.insert(names.end(), monomial.begin(), monomial.end());
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

int64_t SizeExpr::evaluate(const SymbolValues& values, std::string_view what) const {
  int64_t total = 0;
  for (const auto& [monomial, coefficient] : terms_) {
    int64_t term = coefficient;
    for (const std::string& name : monomial) {
      auto it = values.find(name);
      TANDEM_CHECK(it != values.end(), what, ": size '", to_string(), "' uses dimension '", name,
                   "', which has no value");
      term = checked_multiply(term, it->second, str_cat(what, ": size ", to_string()));
    }
    total = checked_sum(total, term, str_cat(what, ": size ", to_string()));
  }
  return total;
}

std::string SizeExpr::to_string() const {
  if (terms_.empty()) return "0";
  // Higher-degree terms first, the constant last: "batch*seq + seq - 1".
  std::vector<std::pair<std::vector<std::string>, int64_t>> ordered(terms_.begin(), terms_.end());
  std::stable_sort(ordered.begin(), ordered.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  std::string text;
  for (const auto& [monomial, coefficient] : ordered) {
    // The magnitude, without negating INT64_MIN.
    const uint64_t magnitude = coefficient < 0 ? uint64_t{0} - static_cast<uint64_t>(coefficient)
                                               : static_cast<uint64_t>(coefficient);
    if (text.empty()) {
      if (coefficient < 0) text = "-";
    } else {
      text += coefficient < 0 ? " - " : " + ";
    }
    std::string factors;
    if (magnitude != 1 || monomial.empty()) factors = std::to_string(magnitude);
    for (const std::string& name : monomial) factors += (factors.empty() ? "" : "*") + name;
    text += factors;
  }
  return text;
}

SizeExpr operator+(const SizeExpr& a, const SizeExpr& b) {
  SizeExpr sum = a;
  for (const auto& [monomial, coefficient] : b.terms_) {
    int64_t& slot = sum.terms_[monomial];
    slot = checked_sum(slot, coefficient, "a size expression's coefficient");
    if (slot == 0) sum.terms_.erase(monomial);
  }
  return sum;
}

SizeExpr operator*(const SizeExpr& a, const SizeExpr& b) {
  SizeExpr product;
  for (const auto& [ma, ca] : a.terms_) {
    for (const auto& [mb, cb] : b.terms_) {
      std::vector<std::string> monomial = ma;
      monomial.insert(monomial.end(), mb.begin(), mb.end());
      std::sort(monomial.begin(), monomial.end());
      SizeExpr term;
      term.terms_[std::move(monomial)] =
          checked_multiply(ca, cb, "a size expression's coefficient");
      product = product + term;
    }
  }
  return product;
}

}  // namespace tandem::trace
