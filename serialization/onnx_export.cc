#include "serialization/onnx_export.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"

#include "core/error.h"
#include "kernels/dispatch.h"
#include "kernels/elementwise_ops.h"
#include "kernels/known_ops.h"
#include "serialization/file_io.h"
#include "serialization/onnx_file.h"

#include "onnx/onnx_pb.h"

namespace tandem::serialization {
namespace {

namespace ew = kernels::elementwise;
using kernels::op_def;
using Ints = std::vector<int64_t>;

// The model being written, and what converters need to write into it.
class OnnxWriter {
 public:
  OnnxWriter(const trace::Graph& graph, const trace::SymbolicShapes& symbolic)
      : graph_(graph), symbolic_(symbolic) {
    for (const trace::Node& node : graph.nodes)
      used_.insert(node.inputs.begin(), node.inputs.end());
    for (const trace::GraphOutput& output : graph.outputs) used_.insert(output.value);
  }
  bool used(trace::ValueId v) const { return used_.contains(v); }

  onnx::GraphProto& proto() { return *model.mutable_graph(); }

  // The ONNX name of a Tandem value: its input's name, or "v<id>".
  const std::string& name(trace::ValueId v) {
    auto it = names_.find(v);
    if (it == names_.end()) it = names_.emplace(v, str_cat("v", v)).first;
    return it->second;
  }
  void set_name(trace::ValueId v, std::string name) { names_[v] = std::move(name); }
  std::string fresh() { return str_cat("t", next_temp_++); }

  onnx::NodeProto* node(const std::string& op, std::vector<std::string> inputs,
                        std::vector<std::string> outputs) {
    onnx::NodeProto* n = proto().add_node();
    n->set_op_type(op);
    n->set_name(str_cat(current_, "/", op, proto().node_size()));
    for (std::string& i : inputs) n->add_input(std::move(i));
    for (std::string& o : outputs) n->add_output(std::move(o));
    return n;
  }
  // One-output node with a fresh output name.
  std::string step(const std::string& op, std::vector<std::string> inputs) {
    std::string out = fresh();
    node(op, std::move(inputs), {out});
    return out;
  }

  static void attr(onnx::NodeProto* n, const std::string& key, int64_t v) {
    onnx::AttributeProto* a = n->add_attribute();
    a->set_name(key);
    a->set_type(onnx::AttributeProto_AttributeType_INT);
    a->set_i(v);
  }
  static void attr_f(onnx::NodeProto* n, const std::string& key, double v) {
    onnx::AttributeProto* a = n->add_attribute();
    a->set_name(key);
    a->set_type(onnx::AttributeProto_AttributeType_FLOAT);
    a->set_f(static_cast<float>(v));
  }
  static void attr(onnx::NodeProto* n, const std::string& key, const Ints& v) {
    onnx::AttributeProto* a = n->add_attribute();
    a->set_name(key);
    a->set_type(onnx::AttributeProto_AttributeType_INTS);
    for (int64_t x : v) a->add_ints(x);
  }
  static void attr(onnx::NodeProto* n, const std::string& key, const std::string& v) {
    onnx::AttributeProto* a = n->add_attribute();
    a->set_name(key);
    a->set_type(onnx::AttributeProto_AttributeType_STRING);
    a->set_s(v);
  }

  // An initializer holding `t`; returns its name.
  std::string initializer(const Tensor& t, std::string name = {}) {
    if (name.empty()) name = str_cat("c", next_constant_++);
    onnx::TensorProto* p = proto().add_initializer();
    fill(*p, t);
    p->set_name(name);
    return name;
  }
  static void fill(onnx::TensorProto& p, const Tensor& t) {
    p.set_data_type(onnx_type_of(t.dtype()));
    for (int64_t d : t.shape()) p.add_dims(d);
    t.wait_to_read();
    p.set_raw_data(static_cast<const char*>(t.raw_data()), t.nbytes());
  }
  std::string ints(const Ints& v) {
    return initializer(Tensor::from_vector<int64_t>(v, Shape{int64_t(v.size())}));
  }
  // `values` as a tensor of `dtype`.
  static Tensor typed(std::vector<double> values, Shape shape, DType dtype) {
    const Tensor d = Tensor::from_vector<double>(values, std::move(shape));
    return kernels::call1(kernels::cast_op(), {d}, {{"dtype", dtype}}, {});
  }
  std::string scalar(double v, DType dtype) { return initializer(typed({v}, Shape{}, dtype)); }
  // ConstantOfShape: `value` of `dtype` in the shape the tensor `shape` holds.
  onnx::NodeProto* constant_of_shape(const std::string& shape, double value, DType dtype,
                                     const std::string& out) {
    onnx::NodeProto* n = node("ConstantOfShape", {shape}, {out});
    onnx::AttributeProto* a = n->add_attribute();
    a->set_name("value");
    a->set_type(onnx::AttributeProto_AttributeType_TENSOR);
    fill(*a->mutable_t(), typed({value}, Shape{1}, dtype));
    return n;
  }

  // The value's shape with, where a dimension is free, -1 if it is the only
  // free one (a reshape's target), or nothing.
  std::optional<Ints> target_shape(trace::ValueId v) const {
    const Shape& s = graph_.value(v).shape;
    Ints dims(s.begin(), s.end());
    int free = 0;
    for (int a = 0; a < s.rank(); ++a) {
      if (symbolic_.dim(v, a) != nullptr) {
        dims[size_t(a)] = -1;
        ++free;
      }
    }
    if (free > 1) return std::nullopt;
    return dims;
  }
  // An ONNX tensor holding the value's shape as the model runs: fixed sizes
  // as constants, a free one read off the data input that has it (Shape
  // with start and end). Nothing when a size is an expression of several
  // names.
  std::optional<std::string> runtime_shape(trace::ValueId v) {
    const Shape& s = graph_.value(v).shape;
    std::vector<std::string> parts;
    for (int a = 0; a < s.rank(); ++a) {
      const trace::SizeExpr* e = symbolic_.dim(v, a);
      if (e == nullptr) {
        parts.push_back(ints({s[a]}));
        continue;
      }
      const std::string name = e->as_symbol();
      std::optional<std::string> part;
      for (const trace::GraphInput& input : graph_.inputs) {
        if (input.kind != trace::InputKind::kData || part || name.empty()) continue;
        for (int b = 0; b < graph_.value(input.value).shape.rank() && !part; ++b) {
          const trace::SizeExpr* d = symbolic_.dim(input.value, b);
          if (d == nullptr || d->as_symbol() != name) continue;
          part = fresh();
          onnx::NodeProto* n = node("Shape", {this->name(input.value)}, {*part});
          attr(n, "start", int64_t{b});
          attr(n, "end", int64_t{b + 1});
        }
      }
      if (!part) return std::nullopt;
      parts.push_back(*part);
    }
    if (parts.size() == 1) return parts[0];
    const std::string joined = fresh();
    attr(node("Concat", parts, {joined}), "axis", int64_t{0});
    return joined;
  }

  bool node_has_free_attrs(int node) const {
    for (const trace::SymbolicAttr& a : symbolic_.attrs) {
      if (a.node == node) return true;
    }
    return false;
  }
  const trace::Graph& graph() const { return graph_; }

  onnx::ModelProto model;
  std::string current_;  // The node being written, for names and messages.

 private:
  const trace::Graph& graph_;
  const trace::SymbolicShapes& symbolic_;
  absl::flat_hash_map<trace::ValueId, std::string> names_;
  absl::flat_hash_set<trace::ValueId> used_;
  int next_temp_ = 0, next_constant_ = 0;
};

struct Refusal {
  std::string reason;
};

// A converter writes one Tandem node; `in`/`out` are its ONNX value names.
struct Call {
  OnnxWriter& w;
  const trace::Node& node;
  int index;
  std::vector<std::string> in, out;
  const kernels::Attrs& attrs() const { return node.attrs; }
  const Shape& in_shape(size_t i) const { return w.graph().value(node.inputs[i]).shape; }
  DType in_dtype(size_t i) const { return w.graph().value(node.inputs[i]).dtype; }
  onnx::NodeProto* emit(const std::string& op, std::vector<std::string> inputs) {
    return w.node(op, std::move(inputs), {out[0]});
  }
};

using Convert = std::function<void(Call&)>;

Convert same(const std::string& op) {
  return [op](Call& c) { c.emit(op, c.in); };
}

void reshape_to_output(Call& c) {
  const std::optional<Ints> target = c.w.target_shape(c.node.outputs[0]);
  if (!target) {
    // Several free sizes: the target is computed as the model runs.
    const std::optional<std::string> shape = c.w.runtime_shape(c.node.outputs[0]);
    if (!shape) throw Refusal{"its target is an expression of several free dimensions"};
    c.emit("Reshape", {c.in[0], *shape});
    return;
  }
  onnx::NodeProto* n = c.emit("Reshape", {c.in[0], c.w.ints(*target)});
  // A 0 in ONNX's target copies the input's size unless allowzero says it
  // is a size; a -1 beside it is then not allowed.
  if (std::find(target->begin(), target->end(), 0) != target->end()) {
    if (std::find(target->begin(), target->end(), -1) != target->end()) {
      throw Refusal{"an empty dimension beside a free one"};
    }
    OnnxWriter::attr(n, "allowzero", int64_t{1});
  }
}

// The node's output shape as an ONNX tensor: constants, or computed as the
// model runs where it follows free dimensions (a full of the batch's size).
std::string output_shape(Call& c) {
  const trace::ValueId out = c.node.outputs[0];
  if (!c.w.node_has_free_attrs(c.index)) {
    const Shape& s = c.w.graph().value(out).shape;
    return c.w.ints(Ints(s.begin(), s.end()));
  }
  const std::optional<std::string> shape = c.w.runtime_shape(out);
  if (!shape) throw Refusal{"its shape is an expression of several free dimensions"};
  return *shape;
}

void refuse_free_attrs(Call& c) {
  if (c.w.node_has_free_attrs(c.index)) {
    throw Refusal{"an attribute follows a free dimension, which the ONNX form cannot hold yet"};
  }
}

onnx::NodeProto* reduce(Call& c, const std::string& op) {
  Ints axes = c.attrs().get_ints("axes");
  if (axes.empty()) {
    for (int a = 0; a < c.in_shape(0).rank(); ++a) axes.push_back(a);
  }
  const int64_t keep = c.attrs().get_bool("keepdims") ? 1 : 0;
  onnx::NodeProto* n =
      op == "ReduceSum" ? c.emit(op, {c.in[0], c.w.ints(axes)}) : c.emit(op, {c.in[0]});
  if (op != "ReduceSum") OnnxWriter::attr(n, "axes", axes);
  OnnxWriter::attr(n, "keepdims", keep);
  return n;
}

// Tandem's [before_0, after_0, before_1, ...] as ONNX's [begins..., ends...].
Ints onnx_pads(const Ints& interleaved) {
  Ints pads(interleaved.size());
  const size_t rank = interleaved.size() / 2;
  for (size_t a = 0; a < rank; ++a) {
    pads[a] = interleaved[2 * a];
    pads[a + rank] = interleaved[2 * a + 1];
  }
  return pads;
}

// Conv or ConvTranspose with the window of Tandem's 2-D convolution.
onnx::NodeProto* convolution(Call& c, const std::string& op) {
  const Ints p = c.attrs().get_ints("padding");
  onnx::NodeProto* n = c.emit(op, c.in);
  OnnxWriter::attr(n, "strides", c.attrs().get_ints("stride"));
  OnnxWriter::attr(n, "pads", Ints{p[0], p[1], p[0], p[1]});
  OnnxWriter::attr(n, "dilations", c.attrs().get_ints("dilation"));
  OnnxWriter::attr(n, "group", c.attrs().get_int("groups"));
  return n;
}

void check_no_activation(Call& c) {
  if (c.attrs().has("activation") && c.attrs().get_string("activation") != "none") {
    throw Refusal{"a fused activation (export the graph before the passes)"};
  }
}

// Tandem's recurrences as ONNX's RNN, LSTM and GRU (layout 0, sequence
// first, which every runtime takes; Tandem's are batch first). Tandem's op
// takes the input projection already made (a linear node before it), in
// torch's gate order; ONNX's takes the input and W. So X is the projection,
// and W the [gates*H, gates*H] permutation that reorders torch's gates
// into ONNX's (i, o, f, c for LSTM; z, r, h for GRU): X W^T is the
// projection in ONNX's order. R and the recurrent bias are the op's own,
// reordered the same way; the input bias is zero (the projection has it).
void recurrence(Call& c, const std::string& op, const Ints& torch_block_of_onnx, int states,
                const std::string& activation) {
  const Shape& projected = c.in_shape(0);
  const int64_t gates = int64_t(torch_block_of_onnx.size()), width = projected[2];
  const int64_t hidden = width / gates;
  // Only the sequence and the final states: the saved values are for training.
  for (size_t k = size_t(1 + states); k < c.node.outputs.size(); ++k) {
    if (c.w.used(c.node.outputs[k])) throw Refusal{"its saved values are read (a training graph)"};
  }
  Ints rows;
  for (int64_t block : torch_block_of_onnx) {
    for (int64_t u = 0; u < hidden; ++u) rows.push_back(block * hidden + u);
  }
  std::vector<double> permutation(size_t(width * width), 0.0);
  for (int64_t r = 0; r < width; ++r) permutation[size_t(r * width + rows[size_t(r)])] = 1.0;
  const DType t = c.in_dtype(0);
  const std::string w = c.w.initializer(OnnxWriter::typed(permutation, Shape{1, width, width}, t));
  const std::string order = c.w.ints(rows);
  auto gather = [&](const std::string& v) {
    const std::string g = c.w.fresh();
    OnnxWriter::attr(c.w.node("Gather", {v, order}, {g}), "axis", int64_t{0});
    return g;
  };
  const std::string zero = c.w.ints({0});
  const std::string r = c.w.step("Unsqueeze", {gather(c.in[1]), zero});
  const std::string zeros_ih = c.w.fresh();
  c.w.constant_of_shape(c.w.ints({width}), 0, t, zeros_ih);
  const std::string b_cat = c.w.fresh();
  OnnxWriter::attr(c.w.node("Concat", {zeros_ih, gather(c.in[2])}, {b_cat}), "axis", int64_t{0});
  const std::string b = c.w.step("Unsqueeze", {b_cat, zero});
  const std::string one = c.w.ints({1});
  auto swap01 = [&](const std::string& v) {
    const std::string out = c.w.fresh();
    OnnxWriter::attr(c.w.node("Transpose", {v}, {out}), "perm", Ints{1, 0, 2});
    return out;
  };
  std::vector<std::string> inputs = {swap01(c.in[0]), w, r, b, ""};
  size_t next = 3;
  for (const char* initial : {"initial_h", "initial_c"}) {
    if (std::string(initial) == "initial_c" && states < 2) break;
    if (c.attrs().get_bool(initial)) {
      inputs.push_back(c.w.step("Unsqueeze", {c.in[next++], zero}));  // [1, batch, H]
    } else {
      inputs.push_back("");
    }
  }
  while (!inputs.empty() && inputs.back().empty()) inputs.pop_back();
  std::vector<std::string> outputs = {c.w.fresh(), c.w.fresh()};
  if (states == 2) outputs.push_back(c.w.fresh());
  onnx::NodeProto* n = c.w.node(op, inputs, outputs);
  OnnxWriter::attr(n, "hidden_size", hidden);
  OnnxWriter::attr(n, "direction",
                   std::string(c.attrs().get_bool("reverse") ? "reverse" : "forward"));
  if (!activation.empty()) {
    onnx::AttributeProto* a = n->add_attribute();
    a->set_name("activations");
    a->set_type(onnx::AttributeProto_AttributeType_STRINGS);
    a->add_strings(activation);
  }
  if (op == "GRU") OnnxWriter::attr(n, "linear_before_reset", int64_t{1});
  // Y [seq, 1, batch, H] and the states [1, batch, H], without the
  // direction axis, batch first again.
  OnnxWriter::attr(c.w.node("Transpose", {c.w.step("Squeeze", {outputs[0], one})}, {c.out[0]}),
                   "perm", Ints{1, 0, 2});
  for (int k = 1; k <= states; ++k) {
    c.w.node("Squeeze", {outputs[size_t(k)], zero}, {c.out[size_t(k)]});
  }
}

const absl::flat_hash_map<const kernels::OpDef*, Convert>& converters() {
  static const auto* table = [] {
    auto* t = new absl::flat_hash_map<const kernels::OpDef*, Convert>;
    auto& m = *t;
    m[&op_def<ew::Abs>()] = same("Abs");
    m[&op_def<ew::Neg>()] = same("Neg");
    m[&op_def<ew::Exp>()] = same("Exp");
    m[&op_def<ew::Log>()] = same("Log");
    m[&op_def<ew::Sqrt>()] = same("Sqrt");
    m[&op_def<ew::Reciprocal>()] = same("Reciprocal");
    m[&op_def<ew::Sin>()] = same("Sin");
    m[&op_def<ew::Cos>()] = same("Cos");
    m[&op_def<ew::Tan>()] = same("Tan");
    m[&op_def<ew::Asin>()] = same("Asin");
    m[&op_def<ew::Acos>()] = same("Acos");
    m[&op_def<ew::Atan>()] = same("Atan");
    m[&op_def<ew::Sinh>()] = same("Sinh");
    m[&op_def<ew::Cosh>()] = same("Cosh");
    m[&op_def<ew::Tanh>()] = same("Tanh");
    m[&op_def<ew::Asinh>()] = same("Asinh");
    m[&op_def<ew::Acosh>()] = same("Acosh");
    m[&op_def<ew::Atanh>()] = same("Atanh");
    m[&op_def<ew::Floor>()] = same("Floor");
    m[&op_def<ew::Ceil>()] = same("Ceil");
    m[&op_def<ew::Round>()] = same("Round");
    m[&op_def<ew::Sigmoid>()] = same("Sigmoid");
    m[&op_def<ew::Erf>()] = same("Erf");
    m[&op_def<ew::Relu>()] = same("Relu");
    m[&op_def<ew::Sign>()] = same("Sign");
    m[&op_def<ew::Softsign>()] = same("Softsign");
    m[&op_def<ew::Isnan>()] = same("IsNaN");
    m[&op_def<ew::Isinf>()] = same("IsInf");
    m[&op_def<ew::LogicalNot>()] = same("Not");
    m[&op_def<ew::Hardswish>()] = same("HardSwish");
    m[&op_def<ew::Add>()] = same("Add");
    m[&op_def<ew::Sub>()] = same("Sub");
    m[&op_def<ew::Mul>()] = same("Mul");
    m[&op_def<ew::Div>()] = same("Div");
    m[&op_def<ew::Pow>()] = same("Pow");
    m[&op_def<ew::Maximum>()] = same("Max");
    m[&op_def<ew::Minimum>()] = same("Min");
    m[&kernels::eq_op()] = same("Equal");
    m[&kernels::lt_op()] = same("Less");
    m[&kernels::le_op()] = same("LessOrEqual");
    m[&kernels::gt_op()] = same("Greater");
    m[&kernels::ge_op()] = same("GreaterOrEqual");
    m[&kernels::ne_op()] = [](Call& c) { c.emit("Not", {c.w.step("Equal", c.in)}); };
    m[&kernels::where_op()] = same("Where");
    m[&op_def<ew::Rsqrt>()] = [](Call& c) { c.emit("Reciprocal", {c.w.step("Sqrt", c.in)}); };
    m[&op_def<ew::Square>()] = [](Call& c) { c.emit("Mul", {c.in[0], c.in[0]}); };
    m[&op_def<ew::Silu>()] = [](Call& c) { c.emit("Mul", {c.in[0], c.w.step("Sigmoid", c.in)}); };
    m[&op_def<ew::Gelu>()] = [](Call& c) {
      // x * (1 + erf(x / sqrt(2))) / 2
      const DType t = c.in_dtype(0);
      const std::string e =
          c.w.step("Erf", {c.w.step("Div", {c.in[0], c.w.scalar(std::sqrt(2.0), t)})});
      const std::string half = c.w.step("Mul", {c.in[0], c.w.scalar(0.5, t)});
      c.emit("Mul", {half, c.w.step("Add", {e, c.w.scalar(1, t)})});
    };
    m[&op_def<ew::Hardsigmoid>()] = [](Call& c) {
      onnx::NodeProto* n = c.emit("HardSigmoid", c.in);
      OnnxWriter::attr_f(n, "alpha", 1.0 / 6);
      OnnxWriter::attr_f(n, "beta", 0.5);
    };
    for (auto [op, name] :
         {std::pair{&op_def<ew::LeakyRelu>(), "LeakyRelu"}, std::pair{&op_def<ew::Elu>(), "Elu"},
          std::pair{&op_def<ew::Celu>(), "Celu"}}) {
      const std::string onnx_name = name;
      m[op] = [onnx_name](Call& c) {
        OnnxWriter::attr_f(c.emit(onnx_name, c.in), "alpha", c.attrs().get_float("alpha"));
      };
    }
    m[&op_def<ew::Selu>()] = same("Selu");
    m[&op_def<ew::Softplus>()] = [](Call& c) {
      if (c.attrs().get_float("beta") != 1) throw Refusal{"softplus with beta != 1"};
      c.emit("Softplus", c.in);
    };
    m[&op_def<ew::Clip>()] = [](Call& c) {
      const DType t = c.in_dtype(0);
      c.emit("Clip", {c.in[0], c.w.scalar(c.attrs().get_float("min"), t),
                      c.w.scalar(c.attrs().get_float("max"), t)});
    };
    m[&kernels::cast_op()] = [](Call& c) {
      OnnxWriter::attr(c.emit("Cast", c.in), "to",
                       int64_t(onnx_type_of(c.attrs().get_dtype("dtype"))));
    };
    m[&kernels::reshape_op()] = reshape_to_output;
    m[&kernels::transpose_op()] = [](Call& c) {
      Ints perm = c.attrs().get_ints("perm");
      if (perm.empty()) {
        for (int64_t a = c.in_shape(0).rank() - 1; a >= 0; --a) perm.push_back(a);
      }
      OnnxWriter::attr(c.emit("Transpose", c.in), "perm", perm);
    };
    m[&kernels::expand_op()] = [](Call& c) { c.emit("Expand", {c.in[0], output_shape(c)}); };
    m[&kernels::matmul_op()] = [](Call& c) {
      std::vector<std::string> in = c.in;
      for (size_t i : {size_t{0}, size_t{1}}) {
        if (!c.attrs().get_bool(i == 0 ? "transpose_a" : "transpose_b")) continue;
        const int rank = c.in_shape(i).rank();
        if (rank < 2) throw Refusal{"a transposed 1-D operand"};
        Ints perm;
        for (int a = 0; a < rank; ++a) perm.push_back(a);
        std::swap(perm[size_t(rank - 1)], perm[size_t(rank - 2)]);
        const std::string t = c.w.fresh();
        OnnxWriter::attr(c.w.node("Transpose", {in[i]}, {t}), "perm", perm);
        in[i] = t;
      }
      c.emit("MatMul", in);
    };
    m[&kernels::linear_op()] = [](Call& c) {
      check_no_activation(c);
      const std::string wt = c.w.fresh();
      OnnxWriter::attr(c.w.node("Transpose", {c.in[1]}, {wt}), "perm", Ints{1, 0});
      c.emit("Add", {c.w.step("MatMul", {c.in[0], wt}), c.in[2]});
    };
    m[&kernels::conv2d_op()] = [](Call& c) {
      check_no_activation(c);
      convolution(c, "Conv");
    };
    m[&kernels::conv_transpose2d_op()] = [](Call& c) {
      OnnxWriter::attr(convolution(c, "ConvTranspose"), "output_padding",
                       c.attrs().get_ints("output_padding"));
    };
    for (bool max : {true, false}) {
      m[max ? &kernels::max_pool2d_op() : &kernels::avg_pool2d_op()] = [max](Call& c) {
        const Ints k = c.attrs().get_ints("kernel"), p = c.attrs().get_ints("padding");
        const Ints s = c.attrs().get_ints("stride").empty() ? k : c.attrs().get_ints("stride");
        onnx::NodeProto* n = c.emit(max ? "MaxPool" : "AveragePool", c.in);
        OnnxWriter::attr(n, "kernel_shape", k);
        OnnxWriter::attr(n, "strides", s);
        OnnxWriter::attr(n, "pads", Ints{p[0], p[1], p[0], p[1]});
        if (max && c.attrs().has("dilation")) {
          OnnxWriter::attr(n, "dilations", c.attrs().get_ints("dilation"));
        }
        if (!max) OnnxWriter::attr(n, "count_include_pad", int64_t{1});
      };
    }
    m[&kernels::batch_norm_op()] = [](Call& c) {
      if (c.attrs().get_bool("training")) throw Refusal{"batch statistics (training)"};
      OnnxWriter::attr_f(c.w.node("BatchNormalization", c.in, {c.out[0]}), "epsilon",
                         c.attrs().get_float("eps"));
      // The other outputs are the running statistics, unchanged.
      c.w.node("Identity", {c.in[3]}, {c.out[1]});
      c.w.node("Identity", {c.in[4]}, {c.out[2]});
    };
    m[&kernels::layer_norm_op()] = [](Call& c) {
      onnx::NodeProto* n = c.emit("LayerNormalization", c.in);
      OnnxWriter::attr(n, "axis", -c.attrs().get_int("normalized_axes"));
      OnnxWriter::attr_f(n, "epsilon", c.attrs().get_float("eps"));
    };
    m[&kernels::softmax_op()] = [](Call& c) {
      OnnxWriter::attr(c.emit("Softmax", c.in), "axis", c.attrs().get_int("axis"));
    };
    m[&kernels::log_softmax_op()] = [](Call& c) {
      OnnxWriter::attr(c.emit("LogSoftmax", c.in), "axis", c.attrs().get_int("axis"));
    };
    m[&kernels::sum_op()] = [](Call& c) { reduce(c, "ReduceSum"); };
    m[&kernels::mean_op()] = [](Call& c) { reduce(c, "ReduceMean"); };
    m[&kernels::max_op()] = [](Call& c) { reduce(c, "ReduceMax"); };
    m[&kernels::min_op()] = [](Call& c) { reduce(c, "ReduceMin"); };
    m[&kernels::prod_op()] = [](Call& c) { reduce(c, "ReduceProd"); };
    m[&kernels::argmax_op()] = [](Call& c) {
      onnx::NodeProto* n = c.emit("ArgMax", c.in);
      OnnxWriter::attr(n, "axis", c.attrs().get_int("axis"));
      OnnxWriter::attr(n, "keepdims", int64_t(c.attrs().get_bool("keepdims")));
    };
    m[&kernels::concat_op()] = [](Call& c) {
      OnnxWriter::attr(c.emit("Concat", c.in), "axis", c.attrs().get_int("axis"));
    };
    m[&kernels::split_op()] = [](Call& c) {
      OnnxWriter::attr(c.w.node("Split", {c.in[0], c.w.ints(c.attrs().get_ints("sizes"))}, c.out),
                       "axis", c.attrs().get_int("axis"));
    };
    m[&kernels::slice_op()] = [](Call& c) {
      refuse_free_attrs(c);
      c.emit("Slice",
             {c.in[0], c.w.ints({c.attrs().get_int("begin")}), c.w.ints({c.attrs().get_int("end")}),
              c.w.ints({c.attrs().get_int("axis")}), c.w.ints({c.attrs().get_int("step")})});
    };
    m[&kernels::take_op()] = [](Call& c) {
      OnnxWriter::attr(c.emit("Gather", c.in), "axis", c.attrs().get_int("axis"));
    };
    m[&kernels::embedding_op()] = [](Call& c) {
      OnnxWriter::attr(c.emit("Gather", c.in), "axis", int64_t{0});
    };
    m[&kernels::gather_nd_op()] = [](Call& c) {
      OnnxWriter::attr(c.emit("GatherND", c.in), "batch_dims", c.attrs().get_int("batch_dims"));
    };
    m[&kernels::scatter_nd_add_op()] = [](Call& c) {
      if (c.attrs().get_int("batch_dims") != 0) throw Refusal{"batch_dims != 0"};
      OnnxWriter::attr(c.emit("ScatterND", c.in), "reduction", std::string("add"));
    };
    for (bool add : {false, true}) {
      m[add ? &kernels::scatter_add_op() : &kernels::scatter_op()] = [add](Call& c) {
        onnx::NodeProto* n = c.emit("ScatterElements", c.in);
        OnnxWriter::attr(n, "axis", c.attrs().get_int("axis"));
        if (add) OnnxWriter::attr(n, "reduction", std::string("add"));
      };
    }
    m[&kernels::one_hot_op()] = [](Call& c) {
      // ONNX's values [off, on] in the output's dtype, the depth as a tensor.
      const DType t = c.attrs().get_dtype("dtype");
      const Tensor values = OnnxWriter::typed({0, 1}, Shape{2}, t);
      OnnxWriter::attr(c.emit("OneHot", {c.in[0], c.w.ints({c.attrs().get_int("num_classes")}),
                                         c.w.initializer(values)}),
                       "axis", int64_t{-1});
    };
    m[&kernels::gather_op()] = [](Call& c) {
      OnnxWriter::attr(c.emit("GatherElements", c.in), "axis", c.attrs().get_int("axis"));
    };
    m[&kernels::pad_op()] = [](Call& c) {
      const std::string mode = c.attrs().get_string("mode");
      if (mode != "constant" && mode != "reflect" && mode != "replicate") {
        throw Refusal{str_cat("pad mode '", mode, "'")};
      }
      onnx::NodeProto* n = c.emit("Pad", {c.in[0], c.w.ints(onnx_pads(c.attrs().get_ints("pads"))),
                                          c.w.scalar(c.attrs().get_float("value"), c.in_dtype(0))});
      OnnxWriter::attr(n, "mode", mode == "replicate" ? std::string("edge") : mode);
    };
    for (const kernels::OpDef* op :
         {&kernels::full_op(), &kernels::zeros_op(), &kernels::ones_op()}) {
      m[op] = [op](Call& c) {
        const double value = op == &kernels::full_op()   ? c.attrs().get_float("value")
                             : op == &kernels::ones_op() ? 1.0
                                                         : 0.0;
        c.w.constant_of_shape(output_shape(c), value, c.attrs().get_dtype("dtype"), c.out[0]);
      };
    }
    m[&kernels::cumsum_op()] = [](Call& c) {
      onnx::NodeProto* n = c.emit("CumSum", {c.in[0], c.w.initializer(Tensor::from_vector<int64_t>(
                                                          {c.attrs().get_int("axis")}, Shape{}))});
      OnnxWriter::attr(n, "exclusive", int64_t(c.attrs().get_bool("exclusive")));
      OnnxWriter::attr(n, "reverse", int64_t(c.attrs().get_bool("reverse")));
    };
    m[&kernels::topk_op()] = [](Call& c) {
      onnx::NodeProto* n = c.w.node("TopK", {c.in[0], c.w.ints({c.attrs().get_int("k")})}, c.out);
      OnnxWriter::attr(n, "axis", c.attrs().get_int("axis"));
      OnnxWriter::attr(n, "largest", int64_t(c.attrs().get_bool("largest")));
    };
    m[&kernels::lstm_op()] = [](Call& c) { recurrence(c, "LSTM", {0, 3, 1, 2}, 2, ""); };
    m[&kernels::gru_op()] = [](Call& c) { recurrence(c, "GRU", {1, 0, 2}, 1, ""); };
    m[&kernels::rnn_tanh_op()] = [](Call& c) { recurrence(c, "RNN", {0}, 1, "Tanh"); };
    m[&kernels::rnn_relu_op()] = [](Call& c) { recurrence(c, "RNN", {0}, 1, "Relu"); };
    return t;
  }();
  return *table;
}

// Tandem ops that are a reshape of their input (flatten, the views).
bool reshapes(const kernels::OpDef& op) { return op.is_view; }

void add_value_info(onnx::ValueInfoProto* info, const std::string& name, const trace::Graph& graph,
                    const trace::SymbolicShapes& symbolic, trace::ValueId v) {
  info->set_name(name);
  auto* type = info->mutable_type()->mutable_tensor_type();
  type->set_elem_type(onnx_type_of(graph.value(v).dtype));
  const Shape& s = graph.value(v).shape;
  auto* shape = type->mutable_shape();
  for (int a = 0; a < s.rank(); ++a) {
    auto* d = shape->add_dim();
    if (const trace::SizeExpr* e = symbolic.dim(v, a)) {
      d->set_dim_param(e->to_string());
    } else {
      d->set_dim_value(s[a]);
    }
  }
}

}  // namespace

void export_onnx(const std::string& path, const trace::Graph& graph,
                 absl::Span<const StateInput> state, const trace::SymbolicShapes& symbolic,
                 absl::Span<const std::string> node_sources, std::string what) {
  if (what.empty()) what = str_cat("export_onnx('", path, "')");
  OnnxWriter w(graph, symbolic);
  w.model.set_ir_version(8);
  w.model.set_producer_name("tandem");
  onnx::OperatorSetIdProto* opset = w.model.add_opset_import();
  opset->set_domain("");
  opset->set_version(kOnnxExportOpset);
  w.proto().set_name("tandem");
  size_t next_state = 0;
  int next_constant = 0;
  for (const trace::GraphInput& input : graph.inputs) {
    switch (input.kind) {
      case trace::InputKind::kData:
        w.set_name(input.value, input.name);
        add_value_info(w.proto().add_input(), input.name, graph, symbolic, input.value);
        break;
      case trace::InputKind::kState: {
        TANDEM_INTERNAL_ASSERT(next_state < state.size(), "export_onnx: fewer state tensors");
        const StateInput& s = state[next_state++];
        w.set_name(input.value, s.name);
        w.initializer(s.tensor, s.name);
        break;
      }
      case trace::InputKind::kConstant: {
        std::string name = str_cat("constant", next_constant++);
        w.set_name(input.value, name);
        w.initializer(input.constant, name);
        break;
      }
    }
  }
  std::vector<std::string> problems;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const trace::Node& node = graph.nodes[i];
    const std::string where =
        i < node_sources.size() && !node_sources[i].empty()
            ? node_sources[i]
            : (node.where.line() != 0 ? format_location(node.where) : std::string("?"));
    w.current_ = str_cat(node.op->name, "_", i);
    Call call{w, node, int(i), {}, {}};
    for (trace::ValueId v : node.inputs) call.in.push_back(w.name(v));
    for (trace::ValueId v : node.outputs) call.out.push_back(w.name(v));
    try {
      auto it = converters().find(node.op);
      if (it != converters().end()) {
        it->second(call);
      } else if (reshapes(*node.op) && node.inputs.size() == 1) {
        reshape_to_output(call);
      } else {
        throw Refusal{"no ONNX form yet"};
      }
    } catch (const Refusal& r) {
      problems.push_back(
          str_cat("node ", i, " (", node.op->name, ", traced at ", where, "): ", r.reason));
    }
  }
  if (!problems.empty()) {
    std::string text = str_cat(what, ": the graph cannot be written as ONNX; nothing was written");
    for (const std::string& p : problems) text += str_cat("\n  ", p);
    throw Error(text);
  }
  for (const trace::GraphOutput& output : graph.outputs) {
    std::string name = w.name(output.value);
    // An output named after its value, or a value that is also an input,
    // gets the output's name through an Identity.
    w.node("Identity", {name}, {output.name});
    add_value_info(w.proto().add_output(), output.name, graph, symbolic, output.value);
  }
  std::string bytes;
  TANDEM_CHECK(w.model.SerializeToString(&bytes), what, ": the model is too large for protobuf");
  AtomicFile out(path);
  out.write(bytes);
  out.commit();
}

}  // namespace tandem::serialization
