#include "serialization/onnx_import.h"

#include <cstring>
#include <filesystem>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"

#include "core/error.h"
#include "kernels/arity.h"
#include "kernels/dispatch.h"
#include "kernels/known_ops.h"
#include "serialization/file_io.h"
#include "serialization/onnx_file.h"
#include "serialization/onnx_ops.h"
#include "trace/size_expr.h"
#include "trace/symbolic_shapes.h"

namespace tandem {
namespace serialization {

// The opsets of the standard domain the importer reads: all of them, to 17,
// the newest ONNX 1.12 knows. Before 7 a few ops differ (binary ops
// broadcast only when told, Reshape's shape is an attribute...): their
// converters read the opset (onnx_ops.cc).
inline constexpr int kOldestOnnxOpset = 1;
inline constexpr int kNewestOnnxOpset = 17;

// The preview training domain (optimizer update rules), at its only
// version.
inline constexpr std::string_view kTrainingDomain = "ai.onnx.preview.training";
inline constexpr int kTrainingOpset = 1;

// Control-flow bodies nest at most this deep, so that a hostile file cannot
// exhaust the stack, and an import converts at most this many of them (loops
// unroll: a body per iteration), so that it cannot take without bound.
inline constexpr int kMaxOnnxBodyDepth = 16;
inline constexpr int64_t kMaxOnnxBodiesConverted = int64_t{1} << 16;

// The largest value the importer computes itself (what a graph computes
// from constants only), in bytes.
inline constexpr uint64_t kMaxOnnxImportConstantBytes = uint64_t{256} << 20;

// The one value every element of `t` holds, if it holds one.
std::optional<double> uniform_value(const Tensor& t) {
  if (t.numel() == 0) return std::nullopt;
  const Tensor d = kernels::call1(kernels::cast_op(), {t}, {{"dtype", DType::kFloat64}}, {});
  const std::vector<double> v = d.to_vector<double>();
  for (double x : v) {
    if (x != v[0]) return std::nullopt;
  }
  return v[0];
}

// Thrown for a node whose input a refused node should have made: the
// refusal is already listed, so the node is skipped without another.
struct OnnxSkip {};

// One data input of the file: its name, dtype and, per dimension, a size
// or a free dimension's name.
struct OnnxDataInput {
  std::string name;
  DType dtype;
  std::vector<int64_t> sizes;
  std::vector<std::string> free;  // Per dimension; "" where fixed.
};

// What the file says, read once for every size the graph is built at.
struct OnnxModel {
  std::string name;
  OnnxFileContext file;
  onnx::ModelProto proto;
  int opset = 0;           // Of the standard domain; 0 when the file imports none.
  int training_opset = 0;  // Of kTrainingDomain; 0 when the file imports none.
  std::vector<OnnxDataInput> inputs;
  std::vector<std::pair<std::string, Tensor>> initializers;  // Known inputs too.
};

// Builds the Tandem graph of an ONNX model at one size of its free
// dimensions.
class OnnxGraphBuilder {
 public:
  OnnxGraphBuilder(const OnnxModel& model, const trace::SymbolValues& sizes) : model_(model) {
    for (const auto& [name, tensor] : model.initializers) {
      values_[name] = OnnxValue::of(tensor);
      initializer_of_[tensor.raw_data()] = name;
    }
    for (const OnnxDataInput& input : model.inputs) {
      std::vector<int64_t> dims = input.sizes;
      for (size_t a = 0; a < dims.size(); ++a) {
        if (!input.free[a].empty()) dims[a] = sizes.at(input.free[a]);
      }
      OnnxValue value = OnnxValue::in_graph(
          graph.add_input(input.name, trace::InputKind::kData, Shape(dims), input.dtype));
      value.data_inputs = {input.name};
      values_[input.name] = std::move(value);
    }
    has_free_dims_ = !sizes.empty();
  }

  void build() {
    for (const onnx::NodeProto& node : model_.proto.graph().node()) convert(node);
    for (const onnx::ValueInfoProto& output : model_.proto.graph().output()) {
      auto it = values_.find(output.name());
      if (it == values_.end()) {
        if (!poisoned_.contains(output.name())) {
          problems_.push_back(
              str_cat("graph output '", output.name(), "' is not computed by any node"));
        }
        continue;
      }
      try {
        graph.add_output(materialize(it->second), output.name());
      } catch (const OnnxRefusal& refusal) {
        problems_.push_back(str_cat("graph output '", output.name(), "': ", refusal.reason));
      } catch (const Error& error) {
        problems_.push_back(str_cat("graph output '", output.name(), "': ", error.message()));
      }
    }
    if (!problems_.empty()) {
      std::string text = str_cat("ONNX file '", model_.name, "' (opset ", model_.opset,
                                 ") cannot be imported: ", problems_.size(), " problem",
                                 problems_.size() == 1 ? "" : "s");
      for (const std::string& p : problems_) text += str_cat("\n  ", p);
      if (!needed_inputs_.empty()) {
        text += "\n  inputs the import needs as values:";
        for (const std::string& name : needed_inputs_) text += str_cat(" '", name, "'");
        text += " (bind them with OnnxImportOptions::known_inputs, or tandem-run --known)";
      }
      throw Error(text);
    }
  }

  trace::Graph graph;
  std::vector<std::string> sources;      // Per graph node, the ONNX node it came from.
  std::vector<StateInput> state;         // Per kState input, in order.
  std::vector<std::string> state_users;  // Per kState input, the node that first read it.

 private:
  friend class OnnxNodeBuilder;

  void convert(const onnx::NodeProto& node) {
    try {
      convert_or_throw(node);
      return;
    } catch (const OnnxSkip&) {
    } catch (const OnnxRefusal& refusal) {
      problems_.push_back(str_cat(current_, ": ", refusal.reason));
    } catch (const Error& error) {
      problems_.push_back(str_cat(current_, ": ", error.message()));
    }
    for (const std::string& output : node.output()) {
      values_.erase(output);
      poisoned_.insert(output);
    }
  }

  // Converts one node, or throws why not (OnnxRefusal, Error, or OnnxSkip
  // when an input was refused before).
  void convert_or_throw(const onnx::NodeProto& node) {
    const bool training = node.domain() == kTrainingDomain;
    const int opset = training ? model_.training_opset : model_.opset;
    current_ = str_cat("node '", node.name(), "' (", node.op_type(), ", ",
                       training ? "training " : "", "opset ", opset, ")");
    if (!training && !node.domain().empty() && node.domain() != "ai.onnx") {
      throw OnnxRefusal{str_cat("domain '", node.domain(), "' is not ONNX's standard domain")};
    }
    if (opset == 0) throw OnnxRefusal{"the file imports no opset of the node's domain"};
    const OnnxConverter converter = training ? find_onnx_training_converter(node.op_type())
                                             : find_onnx_converter(node.op_type());
    if (converter == nullptr) throw OnnxRefusal{"Tandem has no conversion for this op type"};
    OnnxNodeBuilder builder(*this, node, opset);
    converter(builder);
    for (int i = 0; i < node.output_size(); ++i) {
      if (!node.output(i).empty() && !values_.contains(node.output(i))) {
        throw OnnxRefusal{str_cat("output ", i, " ('", node.output(i), "') is not supported")};
      }
    }
  }

  // A control-flow node's body, converted in place with `inputs` as its
  // inputs (Note [Control flow is unrolled] in onnx_control_flow.cc): its
  // outputs. The names the body defines shadow the enclosing scopes' while
  // it is converted; a refusal inside refuses the node that owns the body.
  std::vector<OnnxValue> convert_body(const onnx::GraphProto& body,
                                      const std::vector<OnnxValue>& inputs) {
    if (body.input_size() != static_cast<int>(inputs.size())) {
      throw OnnxRefusal{
          str_cat("its body takes ", body.input_size(), " inputs, not ", inputs.size())};
    }
    if (body_depth_ >= kMaxOnnxBodyDepth) {
      throw OnnxRefusal{str_cat("bodies nest more than ", kMaxOnnxBodyDepth, " deep")};
    }
    if (++bodies_converted_ > kMaxOnnxBodiesConverted) {
      throw OnnxRefusal{str_cat("the file's control flow unrolls to more than ",
                                kMaxOnnxBodiesConverted, " bodies")};
    }
    std::vector<std::pair<std::string, std::optional<OnnxValue>>> shadowed;
    auto define = [&](const std::string& name, OnnxValue value) {
      auto it = values_.find(name);
      shadowed.emplace_back(name, it == values_.end() ? std::nullopt : std::optional(it->second));
      values_[name] = std::move(value);
    };
    const std::string owner = current_;
    ++body_depth_;
    std::vector<OnnxValue> outputs;
    std::optional<OnnxRefusal> refusal;
    try {
      for (int i = 0; i < body.input_size(); ++i) define(body.input(i).name(), inputs[size_t(i)]);
      for (const onnx::TensorProto& t : body.initializer()) {
        define(t.name(), OnnxValue::of(tensor_from_onnx(
                             t, model_.file, str_cat("body initializer '", t.name(), "'"))));
      }
      for (const onnx::NodeProto& node : body.node()) {
        for (const std::string& output : node.output()) {
          auto it = values_.find(output);
          shadowed.emplace_back(output,
                                it == values_.end() ? std::nullopt : std::optional(it->second));
        }
        convert_or_throw(node);
      }
      for (const onnx::ValueInfoProto& output : body.output()) {
        auto it = values_.find(output.name());
        if (it == values_.end()) {
          throw OnnxRefusal{str_cat("its body's output '", output.name(), "' is not computed")};
        }
        outputs.push_back(it->second);
      }
    } catch (const OnnxRefusal& r) {
      refusal = OnnxRefusal{current_ == owner ? r.reason
                                              : str_cat("in its body, ", current_, ": ", r.reason)};
    } catch (const Error& e) {
      refusal = OnnxRefusal{str_cat("in its body, ", current_, ": ", e.message())};
    }
    for (auto it = shadowed.rbegin(); it != shadowed.rend(); ++it) {
      if (it->second) {
        values_[it->first] = *it->second;
      } else {
        values_.erase(it->first);
      }
    }
    --body_depth_;
    current_ = owner;
    if (refusal) throw *refusal;
    return outputs;
  }

  // The graph value of `value`, adding a known one as a state input: an
  // initializer as a parameter under its own name, a computed one as a
  // constant.
  trace::ValueId materialize(const OnnxValue& value) {
    if (value.is_sequence()) {
      throw OnnxRefusal{"a sequence where a tensor is needed (Tandem's graphs hold tensors only)"};
    }
    if (value.id >= 0) return value.id;
    if (value.from_sizes && has_free_dims_) {
      // A tensor of one repeated value (zeros of the batch's size, as
      // torch's exports make for a recurrence's initial state) is a `full`
      // op, whose shape attribute follows the free dimensions; another
      // becomes a constant, which check_constants_stay then requires to
      // hold the same values at every size.
      if (std::optional<double> fill = uniform_value(value.known)) {
        const trace::ValueId id =
            graph
                .add_node(kernels::full_op(),
                          {{"shape", std::vector<int64_t>(value.known.shape().begin(),
                                                          value.known.shape().end())},
                           {"dtype", value.known.dtype()},
                           {"value", *fill}},
                          {})
                .front();
        sources.push_back(current_);
        return id;
      }
    }
    const void* key = value.known.raw_data();
    if (auto it = materialized_.find(key); it != materialized_.end()) return it->second;
    auto named = initializer_of_.find(key);
    const bool is_initializer = named != initializer_of_.end();
    std::string name = is_initializer ? named->second : fresh_constant_name();
    const trace::ValueId id =
        graph.add_input(name, trace::InputKind::kState, value.known.shape(), value.known.dtype());
    state.push_back({std::move(name), value.known,
                     is_initializer ? InputRole::kParameter : InputRole::kConstant});
    state_users.push_back(current_);
    materialized_[key] = id;
    return id;
  }

  // "constant<k>", skipping the names the file's inputs and initializers
  // have (a file Tandem exported names its constants so).
  std::string fresh_constant_name() {
    for (;;) {
      std::string name = str_cat("constant", next_constant_++);
      if (!values_.contains(name) && !poisoned_.contains(name)) return name;
    }
  }

  const OnnxModel& model_;
  bool has_free_dims_ = false;
  absl::flat_hash_map<std::string, OnnxValue> values_;
  std::set<std::string> poisoned_;
  std::set<std::string> needed_inputs_;  // Data inputs an op needed as values.
  absl::flat_hash_map<const void*, std::string> initializer_of_;
  absl::flat_hash_map<const void*, trace::ValueId> materialized_;
  int next_constant_ = 0;
  int body_depth_ = 0;  // Control-flow bodies being converted, one inside another.
  int64_t bodies_converted_ = 0;
  std::string current_;  // The node being converted, for sources.
  std::vector<std::string> problems_;
};

// OnnxNodeBuilder

OnnxValue OnnxNodeBuilder::input(size_t i) const {
  if (!has_input(i)) refuse(str_cat("input ", i, " is required"));
  const std::string& name = node_.input(static_cast<int>(i));
  auto it = graph_.values_.find(name);
  if (it != graph_.values_.end()) return it->second;
  if (graph_.poisoned_.contains(name)) throw OnnxSkip{};
  refuse(str_cat("input '", name, "' is not computed before this node"));
}

std::vector<OnnxValue> OnnxNodeBuilder::sequence(size_t i) const {
  const OnnxValue value = input(i);
  if (!value.is_sequence()) refuse(str_cat("input ", i, " must be a sequence, not a tensor"));
  return *value.elements;
}

kernels::TensorMeta OnnxNodeBuilder::meta(const OnnxValue& value) const {
  if (value.is_sequence()) refuse("a sequence where a tensor is needed");
  if (value.id >= 0) return graph_.graph.meta(value.id);
  return {value.known.shape(), value.known.dtype()};
}

Tensor OnnxNodeBuilder::known(size_t i, std::string_view what) const {
  const OnnxValue value = input(i);
  if (!value.is_known()) {
    graph_.needed_inputs_.insert(value.data_inputs.begin(), value.data_inputs.end());
    refuse(str_cat(what, " (input ", i,
                   ") must be known at import: a constant, or computed from "
                   "constants and sizes; here the model computes it as it runs"));
  }
  return value.known;
}

std::vector<int64_t> OnnxNodeBuilder::known_ints(size_t i, std::string_view what) const {
  const Tensor t = known(i, what);
  if (t.dtype() == DType::kInt64) return t.to_vector<int64_t>();
  if (t.dtype() == DType::kInt32) {
    const std::vector<int32_t> v = t.to_vector<int32_t>();
    return {v.begin(), v.end()};
  }
  refuse(str_cat(what, " (input ", i, ") must be int32 or int64, not ", dtype_name(t.dtype())));
}

double OnnxNodeBuilder::known_scalar(size_t i, std::string_view what) const {
  const Tensor t = known(i, what);
  if (t.numel() != 1) refuse(str_cat(what, " (input ", i, ") must hold one value"));
  const Tensor d = kernels::call1(kernels::cast_op(), {t}, {{"dtype", DType::kFloat64}}, {});
  return d.item<double>();
}

const onnx::AttributeProto* OnnxNodeBuilder::attr(std::string_view name) const {
  for (const onnx::AttributeProto& a : node_.attribute()) {
    if (a.name() == name) return &a;
  }
  return nullptr;
}

namespace {

void expect_attr_type(const OnnxNodeBuilder& node, const onnx::AttributeProto& a,
                      onnx::AttributeProto_AttributeType type) {
  // Files older than IR version 2 may leave the type out.
  if (a.type() != type && a.type() != onnx::AttributeProto_AttributeType_UNDEFINED) {
    node.refuse(str_cat("attribute '", a.name(), "' is ",
                        onnx::AttributeProto_AttributeType_Name(a.type()), ", not ",
                        onnx::AttributeProto_AttributeType_Name(type)));
  }
}

}  // namespace

int64_t OnnxNodeBuilder::attr_int(std::string_view name, int64_t fallback) const {
  const onnx::AttributeProto* a = attr(name);
  if (a == nullptr) return fallback;
  expect_attr_type(*this, *a, onnx::AttributeProto_AttributeType_INT);
  return a->i();
}

double OnnxNodeBuilder::attr_float(std::string_view name, double fallback) const {
  const onnx::AttributeProto* a = attr(name);
  if (a == nullptr) return fallback;
  expect_attr_type(*this, *a, onnx::AttributeProto_AttributeType_FLOAT);
  return a->f();
}

std::string OnnxNodeBuilder::attr_string(std::string_view name, std::string fallback) const {
  const onnx::AttributeProto* a = attr(name);
  if (a == nullptr) return fallback;
  expect_attr_type(*this, *a, onnx::AttributeProto_AttributeType_STRING);
  return a->s();
}

std::optional<std::vector<int64_t>> OnnxNodeBuilder::attr_ints(std::string_view name) const {
  const onnx::AttributeProto* a = attr(name);
  if (a == nullptr) return std::nullopt;
  expect_attr_type(*this, *a, onnx::AttributeProto_AttributeType_INTS);
  return std::vector<int64_t>(a->ints().begin(), a->ints().end());
}

std::optional<std::vector<float>> OnnxNodeBuilder::attr_floats(std::string_view name) const {
  const onnx::AttributeProto* a = attr(name);
  if (a == nullptr) return std::nullopt;
  expect_attr_type(*this, *a, onnx::AttributeProto_AttributeType_FLOATS);
  return std::vector<float>(a->floats().begin(), a->floats().end());
}

Tensor OnnxNodeBuilder::attr_tensor(std::string_view name) const {
  const onnx::AttributeProto* a = attr(name);
  if (a == nullptr) refuse(str_cat("attribute '", name, "' is required"));
  expect_attr_type(*this, *a, onnx::AttributeProto_AttributeType_TENSOR);
  return tensor_from_onnx(a->t(), graph_.model_.file, str_cat("attribute '", name, "'"));
}

std::vector<OnnxValue> OnnxNodeBuilder::ops(const kernels::OpDef& op, const kernels::Attrs& attrs,
                                            std::vector<OnnxValue> inputs) {
  kernels::check_input_count(op, inputs.size());
  bool all_known = true, from_sizes = false;
  for (const OnnxValue& v : inputs) {
    all_known = all_known && v.is_known();
    from_sizes = from_sizes || v.from_sizes;
  }
  std::vector<OnnxValue> outputs;
  if (all_known) {
    // Values computed at import are bounded, so that a small file cannot
    // make the importer allocate without bound (ConstantOfShape of a huge
    // shape): inference first, then the op.
    std::vector<kernels::TensorMeta> metas;
    for (const OnnxValue& v : inputs) metas.push_back(meta(v));
    for (const kernels::TensorMeta& out : op.infer(metas, kernels::resolve_attrs(op, attrs))) {
      const uint64_t bytes = static_cast<uint64_t>(out.shape.numel()) * dtype_size(out.dtype);
      if (bytes > kMaxOnnxImportConstantBytes) {
        refuse(str_cat("a value computed at import (", op.name, ", ", out.shape.to_string(),
                       ") is ", bytes, " bytes, over the ", kMaxOnnxImportConstantBytes,
                       "-byte limit"));
      }
    }
    std::vector<Tensor> tensors;
    for (const OnnxValue& v : inputs) tensors.push_back(v.known);
    for (Tensor& t : kernels::call(op, tensors, attrs, {})) {
      t.wait_to_read();
      outputs.push_back(OnnxValue::of(std::move(t), from_sizes));
    }
    return outputs;
  }
  std::vector<trace::ValueId> ids;
  std::set<std::string> data_inputs;
  for (const OnnxValue& v : inputs) {
    ids.push_back(graph_.materialize(v));
    data_inputs.insert(v.data_inputs.begin(), v.data_inputs.end());
  }
  for (trace::ValueId id : graph_.graph.add_node(op, attrs, std::move(ids))) {
    outputs.push_back(OnnxValue::in_graph(id));
    outputs.back().data_inputs = data_inputs;
  }
  graph_.sources.push_back(graph_.current_);
  return outputs;
}

OnnxValue OnnxNodeBuilder::op(const kernels::OpDef& op, const kernels::Attrs& attrs,
                              std::vector<OnnxValue> inputs) {
  std::vector<OnnxValue> outputs = ops(op, attrs, std::move(inputs));
  return std::move(outputs.front());
}

std::vector<OnnxValue> OnnxNodeBuilder::body(std::string_view name,
                                             const std::vector<OnnxValue>& inputs) {
  const onnx::AttributeProto* a = attr(name);
  if (a == nullptr) refuse(str_cat("attribute '", name, "' is required"));
  expect_attr_type(*this, *a, onnx::AttributeProto_AttributeType_GRAPH);
  return graph_.convert_body(a->g(), inputs);
}

OnnxValue OnnxNodeBuilder::constant(Tensor value, bool from_sizes) const {
  return OnnxValue::of(std::move(value), from_sizes);
}

OnnxValue OnnxNodeBuilder::scalar(double value, DType dtype) const {
  const Tensor d = Tensor::from_vector<double>({value}, Shape{});
  return constant(kernels::call1(kernels::cast_op(), {d}, {{"dtype", dtype}}, {}));
}

void OnnxNodeBuilder::set_output(size_t i, OnnxValue value) {
  if (!wants_output(i)) return;
  graph_.values_[node_.output(static_cast<int>(i))] = std::move(value);
}

void OnnxNodeBuilder::refuse(std::string reason) const { throw OnnxRefusal{std::move(reason)}; }

namespace {

// The file's signature: opset, data inputs with their free dimensions, and
// initializers.
OnnxModel read_model(absl::Span<const uint8_t> bytes, std::string display_name, std::string folder,
                     const std::map<std::string, Tensor>& known_inputs) {
  OnnxModel model;
  model.name = display_name;
  model.file = {std::move(folder), display_name};
  model.proto = parse_onnx_model(bytes, display_name);
  const onnx::GraphProto& g = model.proto.graph();
  auto fail = [&](auto&&... why) {
    throw Error(str_cat("ONNX file '", display_name, "': ", why...));
  };
  for (const onnx::OperatorSetIdProto& set : model.proto.opset_import()) {
    const int version = static_cast<int>(std::clamp<int64_t>(set.version(), 0, 1 << 20));
    if (set.domain().empty() || set.domain() == "ai.onnx") model.opset = version;
    if (set.domain() == kTrainingDomain) {
      if (version != kTrainingOpset) {
        fail("opset ", version, " of ", kTrainingDomain, " is not the one Tandem reads (",
             kTrainingOpset, ")");
      }
      model.training_opset = version;
    }
  }
  // Files older than IR version 3 list no opsets: they are opset 1.
  if (model.opset == 0 && model.proto.ir_version() < 3) model.opset = 1;
  if (model.opset == 0 && model.training_opset == 0) {
    fail("imports no opset of ONNX's standard domain");
  }
  if (model.opset != 0 && (model.opset < kOldestOnnxOpset || model.opset > kNewestOnnxOpset)) {
    fail("opset ", model.opset, " is outside the opsets Tandem reads (", kOldestOnnxOpset, " to ",
         kNewestOnnxOpset, ")");
  }
  std::set<std::string> initialized;
  for (const onnx::TensorProto& t : g.initializer()) {
    if (t.name().empty()) fail("an initializer has no name");
    if (!initialized.insert(t.name()).second) fail("two initializers are called '", t.name(), "'");
    model.initializers.emplace_back(
        t.name(), tensor_from_onnx(t, model.file, str_cat("initializer '", t.name(), "'")));
  }
  if (g.sparse_initializer_size() > 0) fail("sparse initializers are not supported");
  std::set<std::string> names;
  for (const onnx::ValueInfoProto& input : g.input()) {
    // An input with an initializer is a constant with a default (IR < 4
    // lists every initializer as an input too): the initializer is used.
    if (initialized.contains(input.name())) continue;
    const std::string what = str_cat("input '", input.name(), "'");
    if (auto known = known_inputs.find(input.name()); known != known_inputs.end()) {
      TANDEM_CHECK(known->second.defined() && known->second.device().is_cpu(), "import_onnx('",
                   display_name, "'): the known value of ", what, " must be a CPU tensor");
      model.initializers.emplace_back(input.name(), known->second);
      initialized.insert(input.name());
      continue;
    }
    if (input.name().empty()) fail("an input has no name");
    if (!names.insert(input.name()).second) fail("two inputs are called '", input.name(), "'");
    if (!input.type().has_tensor_type()) fail(what, " is not a tensor (sequence, map or optional)");
    const onnx::TypeProto_Tensor& type = input.type().tensor_type();
    const std::optional<DType> dtype = dtype_from_onnx(type.elem_type());
    if (!dtype) fail(what, ": Tandem has no tensors of type ", onnx_type_name(type.elem_type()));
    if (!type.has_shape()) fail(what, " has no shape (not even a rank)");
    if (type.shape().dim_size() > kMaxRank) fail(what, " has rank over ", kMaxRank);
    OnnxDataInput spec{input.name(), *dtype, {}, {}};
    for (int a = 0; a < type.shape().dim_size(); ++a) {
      const onnx::TensorShapeProto_Dimension& d = type.shape().dim(a);
      if (d.has_dim_value()) {
        if (d.dim_value() < 0) fail(what, " has size ", d.dim_value(), " on axis ", a);
        spec.sizes.push_back(d.dim_value());
        spec.free.emplace_back();
        continue;
      }
      std::string name = d.has_dim_param() ? d.dim_param() : str_cat(input.name(), "_", a);
      if (!trace::valid_symbol_name(name)) {
        fail(what, ": free dimension '", name, "' on axis ", a,
             " is not a name Tandem can use (a C identifier of at most 64 characters)");
      }
      spec.sizes.push_back(0);
      spec.free.push_back(std::move(name));
    }
    model.inputs.push_back(std::move(spec));
  }
  for (const auto& [name, value] : known_inputs) {
    TANDEM_CHECK(initialized.contains(name), "import_onnx('", display_name,
                 "'): known_inputs names '", name, "', which is not an input of the model");
  }
  return model;
}

struct BuiltGraph {
  trace::Graph graph;
  std::vector<std::string> sources;
  std::vector<StateInput> state;
  std::vector<std::string> state_users;
};

// Throws unless the constants of `other` (built at other sizes) hold the
// values `built`'s do: a tensor import computed from the sizes (a mask, a
// resampling's taps) is one constant of the graph only if it does not move.
void check_constants_stay(const BuiltGraph& built, const BuiltGraph& other,
                          const trace::SymbolValues& sizes) {
  if (other.state.size() != built.state.size()) return;  // The fit names the difference.
  for (size_t i = 0; i < built.state.size(); ++i) {
    const Tensor& a = built.state[i].tensor;
    const Tensor& b = other.state[i].tensor;
    if (a.shape() != b.shape() || a.dtype() != b.dtype()) continue;  // The fit refuses those.
    a.wait_to_read();
    b.wait_to_read();
    TANDEM_CHECK(a.nbytes() == 0 || std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0,
                 "the tensor '", built.state[i].name, "' that ", built.state_users[i],
                 " reads is computed at import from the inputs' sizes and holds other values at ",
                 trace::values_text(sizes),
                 "; one graph cannot follow it, so the model cannot have these free dimensions "
                 "(give the inputs fixed sizes, in the file or with known_inputs)");
  }
}

BuiltGraph build_at(const OnnxModel& model, const trace::SymbolValues& sizes) {
  OnnxGraphBuilder builder(model, sizes);
  builder.build();
  return {std::move(builder.graph), std::move(builder.sources), std::move(builder.state),
          std::move(builder.state_users)};
}

}  // namespace
}  // namespace serialization

namespace {

serialization::OnnxGraph build(const serialization::OnnxModel& model,
                               const OnnxImportOptions& options) {
  trace::SymbolValues example;
  for (const serialization::OnnxDataInput& input : model.inputs) {
    for (const std::string& name : input.free) {
      if (name.empty()) continue;
      auto given = options.example_sizes.find(name);
      example[name] = given == options.example_sizes.end() ? OnnxImportOptions::kDefaultFreeSize
                                                           : given->second;
      TANDEM_CHECK(example[name] >= 1, "import_onnx('", model.name, "'): the example size of '",
                   name, "' must be >= 1, got ", example[name]);
    }
  }
  serialization::BuiltGraph built = serialization::build_at(model, example);
  trace::SymbolicShapes symbolic;
  if (!example.empty()) {
    trace::ProbePlan plan = trace::plan_probes(example);
    std::vector<trace::Graph> graphs;
    graphs.push_back(built.graph);
    for (size_t p = 1; p < plan.points.size(); ++p) {
      serialization::BuiltGraph other;
      try {
        other = serialization::build_at(model, plan.points[p]);
      } catch (const Error& e) {
        if (p >= plan.first_extra_check()) {
          plan.drop_check(p--);  // Sizes the model refuses: not a check.
          continue;
        }
        throw Error(str_cat("import_onnx('", model.name, "'): the model cannot be built at ",
                            trace::values_text(plan.points[p]), ": ", e.message()));
      }
      try {
        serialization::check_constants_stay(built, other, plan.points[p]);
      } catch (const Error& e) {
        throw Error(str_cat("import_onnx('", model.name, "'): ", e.message()));
      }
      graphs.push_back(std::move(other.graph));
    }
    try {
      symbolic = trace::fit_symbolic_shapes(plan, graphs, built.sources);
    } catch (const Error& e) {
      throw Error(str_cat("import_onnx('", model.name, "'): the graph does not follow its free ",
                          "dimensions (", trace::values_text(example), "): ", e.message()));
    }
  }
  return {std::move(built.graph), std::move(built.state), std::move(symbolic),
          std::move(built.sources), model.name};
}

}  // namespace

serialization::OnnxGraph serialization::read_onnx(absl::Span<const uint8_t> bytes,
                                                  std::string_view display_name,
                                                  const OnnxImportOptions& options) {
  return build(read_model(bytes, std::string(display_name), "", options.known_inputs), options);
}

LoadedModel import_onnx(const std::string& path, const OnnxImportOptions& options) {
  const std::vector<uint8_t> bytes =
      serialization::read_file(path, serialization::kMaxOnnxFileBytes);
  std::string folder = std::filesystem::path(path).parent_path().string();
  if (folder.empty()) folder = ".";
  serialization::OnnxGraph g = build(
      serialization::read_model(bytes, path, std::move(folder), options.known_inputs), options);
  return load_graph(g.graph, g.state, g.symbolic, std::move(g.sources), g.name);
}

LoadedModel import_onnx(absl::Span<const uint8_t> bytes, std::string_view display_name,
                        const OnnxImportOptions& options) {
  serialization::OnnxGraph g = serialization::read_onnx(bytes, display_name, options);
  return load_graph(g.graph, g.state, g.symbolic, std::move(g.sources), g.name);
}

}  // namespace tandem
