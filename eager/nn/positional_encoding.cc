#include "eager/nn/positional_encoding.h"

#include <cmath>
#include <vector>

#include "core/error.h"
#include "eager/ops.h"

namespace tandem::nn {

PositionalEncoding::PositionalEncoding(const PositionalEncodingOptions& options)
    : options_(options) {
  const int64_t d = options.d_model, length = options.max_len;
  TANDEM_CHECK(d > 0 && length > 0 && length <= (int64_t{1} << 24) / d,
               "PositionalEncoding needs positive d_model and max_len with a table of at most "
               "2^24 values, got d_model ",
               d, " and max_len ", length);
  TANDEM_CHECK(options.dropout >= 0 && options.dropout < 1,
               "PositionalEncoding: dropout must be in [0, 1), got ", options.dropout);
  std::vector<double> table(static_cast<size_t>(length * d));
  for (int64_t p = 0; p < length; ++p) {
    for (int64_t i = 0; i < d; ++i) {
      const double angle =
          static_cast<double>(p) / std::pow(10000.0, static_cast<double>(i - i % 2) / d);
      table[p * d + i] = i % 2 == 0 ? std::sin(angle) : std::cos(angle);
    }
  }
  table_ = register_constant(cast(Tensor::from_vector(table, {length, d}), options.dtype));
}

Tensor PositionalEncoding::forward(const Tensor& x) {
  const std::source_location site = call_site();
  const PositionalEncodingOptions& o = options_;
  TANDEM_CHECK(x.rank() == 3 && x.shape()[2] == o.d_model, "PositionalEncoding(d_model=", o.d_model,
               ") expects input of shape ", o.batch_first ? "[batch, seq, " : "[seq, batch, ",
               o.d_model, "], got ", x.shape().to_string());
  const int64_t length = x.shape()[o.batch_first ? 1 : 0];
  TANDEM_CHECK(length <= o.max_len, "PositionalEncoding: the sequence has ", length,
               " positions, more than max_len = ", o.max_len, " (input ", x.shape().to_string(),
               ")");
  Tensor positions = slice(table_, 0, 0, length, 1, site);  // [seq, d_model]
  if (!o.batch_first) positions = reshape(positions, {length, 1, o.d_model}, site);
  return dropout(add(x, positions, site), o.dropout, is_training(), site);
}

std::string PositionalEncoding::extra_repr() const {
  return str_cat("d_model=", options_.d_model, ", max_len=", options_.max_len,
                 ", dropout=", options_.dropout);
}

}  // namespace tandem::nn
