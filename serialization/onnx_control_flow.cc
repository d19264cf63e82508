// ONNX's control flow: If, Loop and Scan.
//
// Note [Control flow is unrolled]
// Tandem's graphs are static, so a control-flow node becomes the ops of its
// bodies, converted in place (OnnxGraphBuilder::convert_body):
//   - If: the branch its condition picks when the condition is known at
//     import; otherwise both branches, and `where` picks each output, which
//     needs the branches' outputs to have one shape and dtype.
//   - Loop: its body once per iteration, so the trip count and the
//     condition the body computes must be known at import (constants, or
//     computed from constants, sizes and the iteration number); the scan
//     outputs are the iterations' values stacked.
//   - Scan: its body once per step along the scanned axis, whose size the
//     graph's static shapes give.
// At most kMaxUnrolledSteps iterations or steps, so that a small file cannot
// make a huge graph.
#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/known_ops.h"
#include "serialization/onnx_convert.h"

namespace tandem::serialization::onnx_convert {
namespace {

void convert_if(Node& n) {
  const OnnxValue condition = n.input(0);
  if (condition.is_known()) {
    const bool then = n.known_scalar(0, "cond") != 0;
    const std::vector<OnnxValue> out = n.body(then ? "then_branch" : "else_branch", {});
    for (size_t i = 0; i < out.size(); ++i) n.set_output(i, out[i]);
    return;
  }
  if (n.meta(condition).shape.numel() != 1) n.refuse("cond must hold one value");
  const std::vector<OnnxValue> then = n.body("then_branch", {});
  const std::vector<OnnxValue> otherwise = n.body("else_branch", {});
  if (then.size() != otherwise.size()) n.refuse("the branches have different numbers of outputs");
  const OnnxValue pick = reshape(n, condition, {});
  for (size_t i = 0; i < then.size(); ++i) {
    const kernels::TensorMeta a = n.meta(then[i]), b = n.meta(otherwise[i]);
    if (a.shape != b.shape || a.dtype != b.dtype) {
      n.refuse(str_cat("output ", i, " is ", a.shape.to_string(), " ", dtype_name(a.dtype),
                       " in one branch and ", b.shape.to_string(), " ", dtype_name(b.dtype),
                       " in the other; with a condition computed as the model runs, the "
                       "branches must agree"));
    }
    n.set_output(i, n.op(kernels::where_op(), {}, {pick, then[i], otherwise[i]}));
  }
}

void convert_loop(Node& n) {
  if (!n.has_input(0) && !n.has_input(1)) n.refuse("a loop with neither M nor cond never ends");
  const int64_t trips = n.has_input(0) ? known_count(n, 0, "M (the trip count)") : -1;
  bool going = !n.has_input(1) || n.known_scalar(1, "cond") != 0;
  std::vector<OnnxValue> state;
  for (size_t i = 2; i < n.num_inputs(); ++i) state.push_back(n.input(i));
  const size_t carried = state.size();
  const size_t scans = n.num_outputs() > carried ? n.num_outputs() - carried : 0;
  std::vector<std::vector<OnnxValue>> scanned(scans);
  int64_t done = 0;
  for (; going && (trips < 0 || done < trips); ++done) {
    check_unrolled_steps(n, done + 1, "a loop");
    std::vector<OnnxValue> in = {n.constant(Tensor::from_vector<int64_t>({done}, Shape{})),
                                 n.scalar(1, DType::kBool)};
    in.insert(in.end(), state.begin(), state.end());
    const std::vector<OnnxValue> out = n.body("body", in);
    if (out.size() != 1 + carried + scans) {
      n.refuse(str_cat("its body has ", out.size(), " outputs, not ", 1 + carried + scans));
    }
    if (!out[0].is_known()) {
      n.refuse(
          "the body computes its condition as the model runs; Tandem unrolls loops at "
          "import, so it must be known there");
    }
    going = kernels::call1(kernels::cast_op(), {out[0].known}, {{"dtype", DType::kFloat64}}, {})
                .item<double>() != 0;
    state.assign(out.begin() + 1, out.begin() + 1 + int64_t(carried));
    for (size_t k = 0; k < scans; ++k) scanned[k].push_back(out[1 + carried + k]);
  }
  for (size_t i = 0; i < carried; ++i) n.set_output(i, state[i]);
  for (size_t k = 0; k < scans; ++k) {
    if (scanned[k].empty()) n.refuse("a loop that runs no iteration has scan outputs of no shape");
    n.set_output(carried + k, stacked(n, scanned[k], 0));
  }
}

// The attribute `name` with one entry per value, each a valid axis of its
// value's rank (`rank_of(i)`), or all `fallback`.
template <class RankOf>
Ints axes_attr(Node& n, std::string_view name, size_t count, int64_t fallback, RankOf rank_of) {
  Ints axes = n.attr_ints(name).value_or(Ints(count, fallback));
  if (axes.size() != count) n.refuse(str_cat(name, " needs ", count, " entries"));
  for (size_t i = 0; i < count; ++i) axes[i] = normalize_axis(n, axes[i], rank_of(i), name);
  return axes;
}

// One run of a scan body over the scan inputs' steps: the final states and
// each scan output's steps, in output order.
struct ScanRun {
  std::vector<OnnxValue> state;
  std::vector<OnnxValue> outputs;
};

ScanRun run_scan(Node& n, std::vector<OnnxValue> state, const std::vector<OnnxValue>& inputs,
                 const Ints& input_axes, const Ints& input_reversed, size_t scans,
                 const Ints& output_axes, const Ints& output_reversed) {
  int64_t steps = -1;
  for (size_t j = 0; j < inputs.size(); ++j) {
    const int64_t size = n.meta(inputs[j]).shape[int(input_axes[j])];
    if (steps >= 0 && size != steps) n.refuse("the scan inputs have different lengths");
    steps = size;
  }
  if (steps < 1) n.refuse("a scan of no steps has outputs of no shape");
  check_unrolled_steps(n, steps, "a scan");
  std::vector<std::vector<OnnxValue>> scanned(scans);
  for (int64_t t = 0; t < steps; ++t) {
    std::vector<OnnxValue> in = state;
    for (size_t j = 0; j < inputs.size(); ++j) {
      in.push_back(slice_at(n, inputs[j], input_axes[j], input_reversed[j] ? steps - 1 - t : t));
    }
    const std::vector<OnnxValue> out = n.body("body", in);
    if (out.size() != state.size() + scans) {
      n.refuse(str_cat("its body has ", out.size(), " outputs, not ", state.size() + scans));
    }
    state.assign(out.begin(), out.begin() + int64_t(state.size()));
    for (size_t k = 0; k < scans; ++k) scanned[k].push_back(out[state.size() + k]);
  }
  ScanRun run{state, {}};
  for (size_t k = 0; k < scans; ++k) {
    if (output_reversed[k]) std::reverse(scanned[k].begin(), scanned[k].end());
    const int64_t rank = n.meta(scanned[k][0]).shape.rank() + 1;
    run.outputs.push_back(
        stacked(n, scanned[k], normalize_axis(n, output_axes[k], rank, "scan_output_axes")));
  }
  return run;
}

void convert_scan(Node& n) {
  const int64_t count = n.attr_int("num_scan_inputs", 0);
  // Opset 8 has sequence_lens first and a batch axis (0) on every input
  // and output, which the body does not see.
  const bool batched = n.opset() < 9;
  const size_t first = batched ? 1 : 0;
  if (batched && n.has_input(0)) n.refuse("sequence_lens is not supported");
  if (count < 1 || first + size_t(count) > n.num_inputs()) n.refuse("num_scan_inputs is invalid");
  const size_t states = n.num_inputs() - first - size_t(count);
  if (n.num_outputs() < states) n.refuse("fewer outputs than states");
  const size_t scans = n.num_outputs() - states;
  std::vector<OnnxValue> state, inputs;
  for (size_t i = 0; i < states; ++i) state.push_back(n.input(first + i));
  for (size_t j = 0; j < size_t(count); ++j) inputs.push_back(n.input(first + states + j));
  const Ints input_axes = batched
                              ? Ints(size_t(count), 0)
                              : axes_attr(n, "scan_input_axes", size_t(count), 0,
                                          [&](size_t j) { return n.meta(inputs[j]).shape.rank(); });
  const Ints input_reversed = n.attr_ints(batched ? "directions" : "scan_input_directions")
                                  .value_or(Ints(size_t(count), 0));
  const Ints output_reversed = n.attr_ints("scan_output_directions").value_or(Ints(scans, 0));
  const Ints output_axes = n.attr_ints("scan_output_axes").value_or(Ints(scans, 0));
  if (input_reversed.size() != size_t(count) || output_reversed.size() != scans ||
      output_axes.size() != scans) {
    n.refuse("the scan's directions or axes do not match its inputs and outputs");
  }
  if (!batched) {
    const ScanRun run =
        run_scan(n, state, inputs, input_axes, input_reversed, scans, output_axes, output_reversed);
    for (size_t i = 0; i < states; ++i) n.set_output(i, run.state[i]);
    for (size_t k = 0; k < scans; ++k) n.set_output(states + k, run.outputs[k]);
    return;
  }
  // Opset 8: one run per batch entry, the results stacked along the batch.
  const int64_t batch = n.meta(inputs[0]).shape.rank() > 0 ? n.meta(inputs[0]).shape[0] : -1;
  for (const std::vector<OnnxValue>* values : {&state, &inputs}) {
    for (const OnnxValue& v : *values) {
      const Shape s = n.meta(v).shape;
      if (s.rank() < (values == &inputs ? 2 : 1) || s[0] != batch) {
        n.refuse(
            "opset 8's states and scan inputs need one batch axis of one size, and the "
            "scan inputs a sequence axis after it");
      }
    }
  }
  std::vector<std::vector<OnnxValue>> finals(states), outputs(scans);
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<OnnxValue> entry_state, entry_inputs;
    for (const OnnxValue& s : state) entry_state.push_back(slice_at(n, s, 0, b));
    for (const OnnxValue& x : inputs) entry_inputs.push_back(slice_at(n, x, 0, b));
    const ScanRun run = run_scan(n, entry_state, entry_inputs, input_axes, input_reversed, scans,
                                 Ints(scans, 0), output_reversed);
    for (size_t i = 0; i < states; ++i) finals[i].push_back(run.state[i]);
    for (size_t k = 0; k < scans; ++k) outputs[k].push_back(run.outputs[k]);
  }
  for (size_t i = 0; i < states; ++i) n.set_output(i, stacked(n, finals[i], 0));
  for (size_t k = 0; k < scans; ++k) n.set_output(states + k, stacked(n, outputs[k], 0));
}

}  // namespace

void add_control_flow_converters(ConverterTable& table) {
  table.insert({
      {"If", convert_if},
      {"Loop", convert_loop},
      {"Scan", convert_scan},
  });
}

}  // namespace tandem::serialization::onnx_convert
