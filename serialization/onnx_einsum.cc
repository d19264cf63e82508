// ONNX's Einsum as Tandem's transposes, reshapes, sums and batched matrix
// products.
//
// Each operand's repeated labels become a diagonal ("ii->i"); labels that
// only one operand has and the output lacks are summed away; the operands
// are then folded left to right, each pair as one batched matmul: the labels
// both have and a later operand or the output needs are the batch, the ones
// both have and nothing later needs are contracted, the rest are rows
// (first operand) or columns (second). A last transpose gives the output's
// order. Ellipsis dimensions are labels of their own, aligned from the right
// and broadcast like NumPy's.
#include <algorithm>
#include <cctype>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/known_ops.h"
#include "serialization/onnx_convert.h"

namespace tandem::serialization::onnx_convert {
namespace {

using Labels = std::vector<int>;

// Ellipsis dimension k (counted from the left of the widest ellipsis) is
// label kEllipsis + k; letters are their character codes.
constexpr int kEllipsis = 256;

struct Term {
  OnnxValue value;
  Labels labels;  // One per axis.
};

std::string label_name(int label) {
  return label >= kEllipsis ? str_cat("...", label - kEllipsis) : std::string(1, char(label));
}

// A term's letters and where its ellipsis is (-1: none), as written.
struct Written {
  std::vector<int> letters;
  int ellipsis_at = -1;
};

Written parse_term(Node& n, const std::string& text) {
  Written w;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text.compare(i, 3, "...") == 0) {
      if (w.ellipsis_at >= 0) n.refuse(str_cat("'", text, "' has two ellipses"));
      w.ellipsis_at = static_cast<int>(w.letters.size());
      i += 2;
    } else if (std::isalpha(static_cast<unsigned char>(text[i]))) {
      w.letters.push_back(text[i]);
    } else {
      n.refuse(str_cat("'", text, "' has the character '", std::string(1, text[i]), "'"));
    }
  }
  return w;
}

// The labels of a term written `w` for an operand of rank `rank`, its
// ellipsis standing for the trailing `rank - letters` of `widest` ellipsis
// labels.
Labels labels_of(Node& n, const Written& w, int64_t rank, int64_t widest) {
  const int64_t spanned = rank - static_cast<int64_t>(w.letters.size());
  if (spanned < 0 || (w.ellipsis_at < 0 && spanned != 0)) {
    n.refuse(str_cat("a term has ", w.letters.size(), " labels for an operand of rank ", rank));
  }
  Labels labels(w.letters.begin(), w.letters.end());
  if (w.ellipsis_at >= 0) {
    Labels dots;
    for (int64_t k = widest - spanned; k < widest; ++k) dots.push_back(kEllipsis + int(k));
    labels.insert(labels.begin() + w.ellipsis_at, dots.begin(), dots.end());
  }
  return labels;
}

bool has(const Labels& labels, int label) {
  return std::find(labels.begin(), labels.end(), label) != labels.end();
}

int64_t axis_of(const Labels& labels, int label) {
  return std::find(labels.begin(), labels.end(), label) - labels.begin();
}

// x with its axes in the order `perm`.
OnnxValue permuted(Node& n, const OnnxValue& x, const Ints& perm) {
  if (std::is_sorted(perm.begin(), perm.end())) return x;
  return n.op(kernels::transpose_op(), {{"perm", perm}}, {x});
}

// The diagonal of the term's first repeated label, until none repeats.
void take_diagonals(Node& n, Term& t) {
  for (size_t a = 0; a < t.labels.size(); ++a) {
    for (size_t b = a + 1; b < t.labels.size(); ++b) {
      if (t.labels[a] != t.labels[b]) continue;
      const Shape s = n.meta(t.value).shape;
      const int64_t d = s[int(a)];
      if (s[int(b)] != d) {
        n.refuse(str_cat("label ", label_name(t.labels[a]), " repeats on sizes ", d, " and ",
                         s[int(b)]));
      }
      Ints perm, dims;
      Labels labels;
      for (size_t i = 0; i < t.labels.size(); ++i) {
        if (i == a || i == b) continue;
        perm.push_back(int64_t(i));
        dims.push_back(s[int(i)]);
        labels.push_back(t.labels[i]);
      }
      perm.push_back(int64_t(a));
      perm.push_back(int64_t(b));
      dims.push_back(checked_mul(d, d, "a diagonal"));
      check_host_count(n, d, "a diagonal's indices");
      Ints diagonal;
      for (int64_t i = 0; i < d; ++i) diagonal.push_back(i * (d + 1));
      const OnnxValue flat = reshape(n, permuted(n, t.value, perm), dims);
      t.value = n.op(kernels::take_op(), {{"axis", int64_t(labels.size())}},
                     {flat, n.constant(Tensor::from_vector<int64_t>(diagonal, Shape{d}))});
      labels.push_back(t.labels[a]);
      t.labels = labels;
      return take_diagonals(n, t);
    }
  }
}

// Sums away the term's labels that `keep` lacks.
void sum_all_but(Node& n, Term& t, const Labels& keep) {
  Ints axes;
  Labels kept;
  for (size_t i = 0; i < t.labels.size(); ++i) {
    if (has(keep, t.labels[i])) {
      kept.push_back(t.labels[i]);
    } else {
      axes.push_back(int64_t(i));
    }
  }
  if (axes.empty()) return;
  t.value = n.op(kernels::sum_op(), {{"axes", axes}, {"keepdims", false}}, {t.value});
  t.labels = kept;
}

// The term's axes in the order `order`, merged into one axis per group.
OnnxValue grouped(Node& n, const Term& t, const std::vector<Labels>& order) {
  const Shape s = n.meta(t.value).shape;
  Ints perm, dims;
  for (const Labels& group : order) {
    int64_t size = 1;
    for (int label : group) {
      perm.push_back(axis_of(t.labels, label));
      size = checked_mul(size, s[int(perm.back())], "an einsum group");
    }
    dims.push_back(size);
  }
  return reshape(n, permuted(n, t.value, perm), dims);
}

// Broadcasts a size-1 axis of `t` to the size `other` has for its label.
void broadcast_to(Node& n, Term& t, const Term& other) {
  Ints dims = dims_of(n.meta(t.value).shape);
  const Shape o = n.meta(other.value).shape;
  bool changed = false;
  for (size_t i = 0; i < t.labels.size(); ++i) {
    if (!has(other.labels, t.labels[i])) continue;
    const int64_t theirs = o[int(axis_of(other.labels, t.labels[i]))];
    if (dims[i] == theirs) continue;
    if (dims[i] != 1 && theirs != 1) {
      n.refuse(str_cat("label ", label_name(t.labels[i]), " has sizes ", dims[i], " and ", theirs));
    }
    if (dims[i] == 1) {
      dims[i] = theirs;
      changed = true;
    }
  }
  if (changed) t.value = n.op(kernels::expand_op(), {{"shape", dims}}, {t.value});
}

// a and b as one term with the labels `keep` needs, by one batched matmul.
Term combine(Node& n, Term a, Term b, const Labels& keep) {
  Labels needed = keep;
  needed.insert(needed.end(), b.labels.begin(), b.labels.end());
  sum_all_but(n, a, needed);
  needed = keep;
  needed.insert(needed.end(), a.labels.begin(), a.labels.end());
  sum_all_but(n, b, needed);
  broadcast_to(n, a, b);
  broadcast_to(n, b, a);
  Labels batch, contracted, rows, columns;
  for (int label : a.labels) {
    if (!has(b.labels, label)) {
      rows.push_back(label);
    } else if (has(keep, label)) {
      batch.push_back(label);
    } else {
      contracted.push_back(label);
    }
  }
  for (int label : b.labels) {
    if (!has(a.labels, label)) columns.push_back(label);
  }
  const Shape as = n.meta(a.value).shape, bs = n.meta(b.value).shape;
  Ints dims;
  for (int label : batch) dims.push_back(as[int(axis_of(a.labels, label))]);
  for (int label : rows) dims.push_back(as[int(axis_of(a.labels, label))]);
  for (int label : columns) dims.push_back(bs[int(axis_of(b.labels, label))]);
  const OnnxValue product =
      n.op(kernels::matmul_op(), {},
           {grouped(n, a, {batch, rows, contracted}), grouped(n, b, {batch, contracted, columns})});
  Term out{reshape(n, product, dims), batch};
  out.labels.insert(out.labels.end(), rows.begin(), rows.end());
  out.labels.insert(out.labels.end(), columns.begin(), columns.end());
  return out;
}

void convert_einsum(Node& n) {
  std::string equation;
  for (char c : n.attr_string("equation", "")) {
    if (c != ' ') equation += c;
  }
  const size_t arrow = equation.find("->");
  std::vector<std::string> texts;
  const std::string inputs = equation.substr(0, arrow);
  for (size_t begin = 0;;) {
    const size_t comma = inputs.find(',', begin);
    texts.push_back(inputs.substr(begin, comma - begin));
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  if (texts.size() != n.num_inputs()) {
    n.refuse(str_cat("equation '", equation, "' has ", texts.size(), " terms for ", n.num_inputs(),
                     " inputs"));
  }
  std::vector<Written> written;
  int64_t widest = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    written.push_back(parse_term(n, texts[i]));
    if (written.back().ellipsis_at >= 0) {
      widest = std::max(widest, n.shape(i).rank() - int64_t(written.back().letters.size()));
    }
  }
  std::vector<Term> terms;
  for (size_t i = 0; i < texts.size(); ++i) {
    terms.push_back({n.input(i), labels_of(n, written[i], n.shape(i).rank(), widest)});
    take_diagonals(n, terms.back());
  }
  // The output: as written, or (implicit) the ellipsis then the letters
  // used once, alphabetically.
  Labels output;
  if (arrow != std::string::npos) {
    const Written w = parse_term(n, equation.substr(arrow + 2));
    output = labels_of(n, w, int64_t(w.letters.size()) + (w.ellipsis_at >= 0 ? widest : 0), widest);
  } else {
    for (int64_t k = 0; k < widest; ++k) output.push_back(kEllipsis + int(k));
    std::map<int, int> uses;
    for (const Written& w : written) {
      for (int letter : w.letters) ++uses[letter];
    }
    for (const auto& [letter, count] : uses) {
      if (count == 1) output.push_back(letter);
    }
  }
  for (size_t i = 0; i < output.size(); ++i) {
    const int label = output[i];
    if (has(Labels(output.begin(), output.begin() + int(i)), label)) {
      n.refuse(str_cat("output label ", label_name(label), " repeats"));
    }
    const bool found = std::any_of(terms.begin(), terms.end(),
                                   [&](const Term& t) { return has(t.labels, label); });
    if (!found) n.refuse(str_cat("output label ", label_name(label), " is in no input"));
  }
  Term acc = terms[0];
  for (size_t i = 1; i < terms.size(); ++i) {
    Labels keep = output;
    for (size_t later = i + 1; later < terms.size(); ++later) {
      keep.insert(keep.end(), terms[later].labels.begin(), terms[later].labels.end());
    }
    acc = combine(n, acc, terms[i], keep);
  }
  sum_all_but(n, acc, output);
  Ints perm;
  for (int label : output) perm.push_back(axis_of(acc.labels, label));
  n.set_output(0, permuted(n, acc.value, perm));
}

}  // namespace

void add_einsum_converter(ConverterTable& table) { table.insert({"Einsum", convert_einsum}); }

}  // namespace tandem::serialization::onnx_convert
