// ONNX's sequence ops on sequences that exist at import only: a sequence is
// a list of values (OnnxValue::elements) whose length and positions are
// known there, so SequenceAt picks a value and ConcatFromSequence joins
// values, and what remains in the graph is tensor ops. Positions must be
// known at import; a sequence cannot be a graph's input or output.
#include <vector>

#include "core/error.h"
#include "kernels/known_ops.h"
#include "serialization/onnx_convert.h"

namespace tandem::serialization::onnx_convert {
namespace {

// Input i as a position in a sequence of `size`: in [-size, size - 1], or
// [-size, size] where one past the end may be named (`end_allowed`).
size_t position(Node& n, size_t i, size_t size, bool end_allowed) {
  const int64_t count = int64_t(size);
  int64_t p = integral(n, n.known_scalar(i, "position"), "position");
  if (p < -count || p > (end_allowed ? count : count - 1)) {
    n.refuse(str_cat("position ", p, " is outside a sequence of ", size));
  }
  return size_t(p < 0 ? p + count : p);
}

void convert_sequence_empty(Node& n) { n.set_output(0, OnnxValue::sequence({})); }

void convert_sequence_construct(Node& n) {
  std::vector<OnnxValue> elements;
  for (size_t i = 0; i < n.num_inputs(); ++i) elements.push_back(n.input(i));
  n.set_output(0, OnnxValue::sequence(std::move(elements)));
}

void convert_sequence_insert(Node& n) {
  std::vector<OnnxValue> elements = n.sequence(0);
  const size_t at = n.has_input(2) ? position(n, 2, elements.size(), true) : elements.size();
  n.meta(n.input(1));  // A tensor, not a sequence.
  elements.insert(elements.begin() + int64_t(at), n.input(1));
  n.set_output(0, OnnxValue::sequence(std::move(elements)));
}

void convert_sequence_erase(Node& n) {
  std::vector<OnnxValue> elements = n.sequence(0);
  if (elements.empty()) n.refuse("the sequence is empty");
  const size_t at = n.has_input(1) ? position(n, 1, elements.size(), false) : elements.size() - 1;
  elements.erase(elements.begin() + int64_t(at));
  n.set_output(0, OnnxValue::sequence(std::move(elements)));
}

void convert_sequence_at(Node& n) {
  const std::vector<OnnxValue> elements = n.sequence(0);
  n.set_output(0, elements[position(n, 1, elements.size(), false)]);
}

void convert_sequence_length(Node& n) {
  n.set_output(0,
               n.constant(Tensor::from_vector<int64_t>({int64_t(n.sequence(0).size())}, Shape{})));
}

// The input split along `axis`: into pieces of the sizes `split` lists, or
// of its one size (the last piece shorter), or (no split) into single
// slices, kept with a size-1 axis unless keepdims = 0.
void convert_split_to_sequence(Node& n) {
  const OnnxValue x = n.input(0);
  const Shape xs = n.meta(x).shape;
  const int64_t axis = normalize_axis(n, n.attr_int("axis", 0), xs.rank());
  const int64_t length = xs[int(axis)];
  Ints sizes;
  bool squeeze = false;
  if (!n.has_input(1)) {
    sizes.assign(size_t(length), 1);
    squeeze = n.attr_int("keepdims", 1) == 0;
  } else if (n.meta(n.input(1)).shape.rank() == 0) {
    const int64_t each = known_count(n, 1, "split");
    if (each == 0) n.refuse("split is 0");
    for (int64_t at = 0; at < length; at += each) sizes.push_back(std::min(each, length - at));
  } else {
    sizes = n.known_ints(1, "split");
    int64_t total = 0;
    for (int64_t s : sizes) {
      if (s < 0) n.refuse("a split size is negative");
      total += s;
    }
    if (total != length) n.refuse(str_cat("the split sizes add up to ", total, ", not ", length));
  }
  check_host_count(n, int64_t(sizes.size()), "the pieces");
  std::vector<OnnxValue> pieces;
  int64_t at = 0;
  for (int64_t size : sizes) {
    OnnxValue piece = sliced(n, x, axis, at, at + size);
    if (squeeze) {
      Ints dims = dims_of(xs);
      dims.erase(dims.begin() + axis);
      piece = reshape(n, piece, dims);
    }
    pieces.push_back(piece);
    at += size;
  }
  n.set_output(0, OnnxValue::sequence(std::move(pieces)));
}

// The elements joined along `axis`, or stacked along a new one (new_axis).
void convert_concat_from_sequence(Node& n) {
  const std::vector<OnnxValue> elements = n.sequence(0);
  if (elements.empty()) n.refuse("the sequence is empty");
  const bool stack = n.attr_int("new_axis", 0) != 0;
  const int64_t rank = n.meta(elements[0]).shape.rank() + (stack ? 1 : 0);
  const int64_t axis = normalize_axis(n, n.attr_int("axis", 0), rank);
  if (stack) return n.set_output(0, stacked(n, elements, axis));
  n.set_output(0, elements.size() == 1 ? elements[0]
                                       : n.op(kernels::concat_op(), {{"axis", axis}}, elements));
}

}  // namespace

void add_sequence_converters(ConverterTable& table) {
  table.insert({
      {"SequenceEmpty", convert_sequence_empty},
      {"SequenceConstruct", convert_sequence_construct},
      {"SequenceInsert", convert_sequence_insert},
      {"SequenceErase", convert_sequence_erase},
      {"SequenceAt", convert_sequence_at},
      {"SequenceLength", convert_sequence_length},
      {"SplitToSequence", convert_split_to_sequence},
      {"ConcatFromSequence", convert_concat_from_sequence},
  });
}

}  // namespace tandem::serialization::onnx_convert
