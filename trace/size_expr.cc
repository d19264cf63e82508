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
constexpr int kMaxDivisionDepth = 8;
constexpr std::string_view kFloorDiv = "floordiv";

bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || (c >= '0' && c <= '9'); }

// floor(a / d) for d > 0 (C++ division truncates toward zero).
int64_t floor_divide(int64_t a, int64_t d) {
  const int64_t q = a / d;
  return a % d != 0 && a < 0 ? q - 1 : q;
}

// A recursive-descent reader of SizeExpr::parse's grammar:
//   expr := sum            sum := ['-'] term (('+' | '-') term)*
//   term := factor ('*' factor)*
//   factor := integer | name | 'floordiv' '(' sum ',' integer ')'
class Reader {
 public:
  Reader(std::string_view text, std::string_view what) : text_(text), what_(what) {}

  SizeExpr expr() {
    SizeExpr all = sum(0);
    skip_spaces();
    if (pos_ != text_.size()) fail("unexpected character");
    return all;
  }

 private:
  SizeExpr sum(int depth) {
    SizeExpr sum;
    bool negative = take('-');
    size_t terms = 0;
    while (true) {
      TANDEM_CHECK(++terms <= kMaxTerms, what_, ": size expression has more than ", kMaxTerms,
                   " terms");
      SizeExpr t = term(depth);
      sum = sum + (negative ? SizeExpr::constant(-1) * t : t);
      if (take('+')) {
        negative = false;
      } else if (take('-')) {
        negative = true;
      } else {
        break;
      }
    }
    return sum;
  }

  SizeExpr term(int depth) {
    SizeExpr product = SizeExpr::constant(1);
    size_t names = 0;
    do {
      skip_spaces();
      if (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
        product = product * SizeExpr::constant(integer());
      } else if (pos_ < text_.size() && is_name_start(text_[pos_])) {
        TANDEM_CHECK(++names <= kMaxNamesPerTerm, what_, ": a term of size expression '", text_,
                     "' multiplies more than ", kMaxNamesPerTerm, " names");
        std::string word = name();
        product = product * (word == kFloorDiv && take('(') ? division(depth + 1)
                                                            : SizeExpr::symbol(std::move(word)));
      } else {
        fail("expected a number or a name");
      }
    } while (take('*'));
    return product;
  }

  // floordiv's arguments and closing parenthesis, its opening one read.
  SizeExpr division(int depth) {
    if (depth > kMaxDivisionDepth) fail("divisions nest more than 8 deep");
    SizeExpr numerator = sum(depth);
    if (!take(',')) fail("expected ',' and floordiv's divisor");
    skip_spaces();
    if (pos_ == text_.size() || text_[pos_] < '0' || text_[pos_] > '9') {
      fail("expected floordiv's divisor, a positive integer");
    }
    const int64_t divisor = integer();
    if (divisor < 1) fail("floordiv's divisor must be at least 1");
    if (!take(')')) fail("expected ')' after floordiv's divisor");
    return SizeExpr::floor_div(numerator, divisor);
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

struct SizeExpr::Division {
  SizeExpr numerator;  // Coefficients in [0, divisor); not a constant.
  int64_t divisor;     // >= 2.
};

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

SizeExpr SizeExpr::floor_div(const SizeExpr& numerator, int64_t divisor) {
  TANDEM_CHECK(divisor >= 1, "a size expression divides ", numerator.to_string(), " by ", divisor,
               "; a divisor must be at least 1");
  if (divisor == 1) return numerator;
  // numerator = divisor * quotient + remainder, term by term, with every
  // coefficient of the remainder in [0, divisor): as each monomial is a
  // whole number, floor(numerator / divisor) = quotient + floor(remainder /
  // divisor).
  SizeExpr quotient, remainder;
  quotient.divisions_ = remainder.divisions_ = numerator.divisions_;
  for (const auto& [monomial, coefficient] : numerator.terms_) {
    const int64_t q = floor_divide(coefficient, divisor);
    // In [0, divisor), so exact in modular arithmetic, where q * divisor
    // itself may not fit in int64.
    const auto r = static_cast<int64_t>(static_cast<uint64_t>(coefficient) -
                                        static_cast<uint64_t>(q) * static_cast<uint64_t>(divisor));
    if (q != 0) quotient.terms_[monomial] = q;
    if (r != 0) remainder.terms_[monomial] = r;
  }
  if (remainder.is_constant()) {
    return quotient + constant(floor_divide(remainder.constant_term(), divisor));
  }
  std::string text = str_cat(kFloorDiv, "(", remainder.to_string(), ", ", divisor, ")");
  SizeExpr division;
  division.terms_[{text}] = 1;
  division.divisions_.emplace(
      std::move(text), std::make_shared<const Division>(Division{std::move(remainder), divisor}));
  return quotient + division;
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
  return names.size() == 1 && coefficient == 1 && !divisions_.contains(names[0]) ? names[0] : "";
}

std::vector<std::string> SizeExpr::symbols() const {
  std::vector<std::string> names;
  for (const auto& [monomial, coefficient] : terms_) {
    for (const std::string& factor : monomial) {
      auto division = divisions_.find(factor);
      if (division == divisions_.end()) {
        names.push_back(factor);
      } else {
        for (std::string& name : division->second->numerator.symbols()) {
          names.push_back(std::move(name));
        }
      }
    }
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

int64_t SizeExpr::evaluate(const SymbolValues& values, std::string_view what) const {
  int64_t total = 0;
  for (const auto& [monomial, coefficient] : terms_) {
    int64_t term = coefficient;
    for (const std::string& factor : monomial) {
      int64_t value = 0;
      if (auto division = divisions_.find(factor); division != divisions_.end()) {
        value = floor_divide(division->second->numerator.evaluate(values, what),
                             division->second->divisor);
      } else {
        auto it = values.find(factor);
        TANDEM_CHECK(it != values.end(), what, ": size '", to_string(), "' uses dimension '",
                     factor, "', which has no value");
        value = it->second;
      }
      term = checked_multiply(term, value, str_cat(what, ": size ", to_string()));
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
      if (coefficient < 0) text.push_back('-');
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
  sum.divisions_.insert(b.divisions_.begin(), b.divisions_.end());
  for (const auto& [monomial, coefficient] : b.terms_) {
    int64_t& slot = sum.terms_[monomial];
    slot = checked_sum(slot, coefficient, "a size expression's coefficient");
    if (slot == 0) sum.terms_.erase(monomial);
  }
  return sum;
}

SizeExpr operator*(const SizeExpr& a, const SizeExpr& b) {
  SizeExpr product;
  product.divisions_ = a.divisions_;
  product.divisions_.insert(b.divisions_.begin(), b.divisions_.end());
  for (const auto& [ma, ca] : a.terms_) {
    for (const auto& [mb, cb] : b.terms_) {
      std::vector<std::string> monomial = ma;
      monomial.insert(monomial.end(), mb.begin(), mb.end());
      std::sort(monomial.begin(), monomial.end());
      int64_t& slot = product.terms_[std::move(monomial)];
      slot = checked_sum(slot, checked_multiply(ca, cb, "a size expression's coefficient"),
                         "a size expression's coefficient");
    }
  }
  std::erase_if(product.terms_, [](const auto& term) { return term.second == 0; });
  return product;
}

}  // namespace tandem::trace
