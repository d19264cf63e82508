// write_graph_json: a GraphFile as the JSON of serialization/FORMAT.md.
//
// Deterministic by construction: keys in a fixed order (ordered_json keeps
// insertion order), values and nodes named from their positions, attributes
// in name order, and doubles printed as the shortest text that reads back to
// the same double.
#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <variant>

#include "absl/container/flat_hash_set.h"
#include "nlohmann/json.hpp"

#include "core/error.h"
#include "serialization/graph_file.h"

namespace tandem::serialization {
namespace {

using Json = nlohmann::ordered_json;

Json shape_json(const Shape& shape) {
  Json dims = Json::array();
  for (int64_t d : shape) dims.push_back(d);
  return dims;
}

// A shape with its free sizes spelled: [8, "seq", 64] (FORMAT.md, "Free
// dimensions"); null when every size is fixed.
Json dims_json(const GraphFile& file, trace::ValueId id) {
  const Shape& shape = file.graph.value(id).shape;
  Json dims = Json::array();
  bool free = false;
  for (int a = 0; a < shape.rank(); ++a) {
    if (const trace::SizeExpr* size = file.symbolic.dim(id, a)) {
      dims.push_back(size->to_string());
      free = true;
    } else {
      dims.push_back(shape[a]);
    }
  }
  return free ? dims : Json();
}

// {"type": "ints", "value": [1, 1]}: typed, so a reader needs no registry to
// know what a value is, and the loader checks the type against the op's.
Json attr_json(const kernels::AttrValue& value) {
  Json typed = Json::object();
  typed["type"] = std::string(kernels::attr_type_name(value));
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, DType>) {
          typed["value"] = std::string(dtype_name(v));
        } else if constexpr (std::is_same_v<T, double>) {
          // JSON has no infinities or NaN; clip's default bounds are infinite.
          if (std::isnan(v)) {
            typed["value"] = "nan";
          } else if (std::isinf(v)) {
            typed["value"] = v > 0 ? "inf" : "-inf";
          } else {
            typed["value"] = v;
          }
        } else {
          typed["value"] = v;
        }
      },
      value);
  return typed;
}

// Each value's name: a graph input's own, or "<op>_<node index>" (with
// ":<output index>" for a node of several outputs).
std::vector<std::string> value_names(const trace::Graph& graph) {
  std::vector<std::string> names(graph.values.size());
  for (const trace::GraphInput& input : graph.inputs) names[input.value] = input.name;
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    const trace::Node& node = graph.nodes[n];
    for (size_t k = 0; k < node.outputs.size(); ++k) {
      std::string name = str_cat(node.op->name, "_", n);
      names[node.outputs[k]] = node.outputs.size() == 1 ? name : str_cat(name, ":", k);
    }
  }
  // A graph input could be called like a node's output ("relu_3").
  absl::flat_hash_set<std::string_view> seen;
  for (const std::string& name : names) {
    TANDEM_CHECK(name.empty() || seen.insert(name).second, "export: two values of the graph would ",
                 "both be called '", name, "'; rename the graph input of that name");
  }
  return names;
}

std::string dump_compact(const Json& j) {
  // Invalid UTF-8 in a name is an error rather than silently replaced.
  return j.dump(-1, ' ', false, Json::error_handler_t::strict);
}

// Objects one field per line, arrays of objects one element per line, all
// else compact: readable in a pager, diffable, and still plain JSON.
std::string layout(const Json& j, const std::string& indent = "") {
  const std::string inner = indent + "  ";
  if (j.is_object() && !j.empty()) {
    std::string out = "{";
    bool first = true;
    for (const auto& [key, value] : j.items()) {
      out += (first ? "\n" : ",\n") + inner + dump_compact(Json(key)) + ": " + layout(value, inner);
      first = false;
    }
    return out + "\n" + indent + "}";
  }
  if (j.is_array() && !j.empty() && j.front().is_object()) {
    std::string out = "[";
    for (size_t i = 0; i < j.size(); ++i) out += (i ? ",\n" : "\n") + inner + dump_compact(j[i]);
    return out + "\n" + indent + "]";
  }
  return dump_compact(j);
}

}  // namespace

std::string_view input_role_name(InputRole role) {
  switch (role) {
    case InputRole::kData:
      return "data";
    case InputRole::kParameter:
      return "parameter";
    case InputRole::kBuffer:
      return "buffer";
    case InputRole::kConstant:
      return "constant";
  }
  return "?";
}

namespace {

// Sorted and unique, so that a loader can name every op it lacks first.
Json ops_json(const trace::Graph& graph) {
  std::vector<std::string> ops;
  for (const trace::Node& node : graph.nodes) ops.push_back(node.op->name);
  std::sort(ops.begin(), ops.end());
  ops.erase(std::unique(ops.begin(), ops.end()), ops.end());
  return ops;
}

// A node output: its name, dtype and shape.
Json node_output_json(const GraphFile& file, trace::ValueId id, const std::string& name) {
  Json entry = Json::object();
  entry["name"] = name;
  entry["dtype"] = std::string(dtype_name(file.graph.value(id).dtype));
  entry["shape"] = shape_json(file.graph.value(id).shape);
  if (Json dims = dims_json(file, id); !dims.is_null()) entry["dims"] = std::move(dims);
  return entry;
}

Json inputs_json(const GraphFile& file) {
  const trace::Graph& graph = file.graph;
  Json inputs = Json::array();
  for (size_t i = 0; i < graph.inputs.size(); ++i) {
    const trace::GraphInput& input = graph.inputs[i];
    TANDEM_CHECK(input.kind != trace::InputKind::kConstant, "export: graph input '", input.name,
                 "' is a constant; constants are written as params");
    const InputSpec& spec = file.inputs[i];
    Json entry = Json::object();
    entry["name"] = input.name;
    entry["role"] = std::string(input_role_name(spec.role));
    entry["dtype"] = std::string(dtype_name(graph.value(input.value).dtype));
    entry["shape"] = shape_json(graph.value(input.value).shape);
    if (Json dims = dims_json(file, input.value); !dims.is_null()) entry["dims"] = std::move(dims);
    inputs.push_back(std::move(entry));
  }
  return inputs;
}

Json node_json(const GraphFile& file, size_t n, const std::vector<std::string>& names) {
  const trace::Graph& graph = file.graph;
  const trace::Node& node = graph.nodes[n];
  Json entry = Json::object();
  entry["name"] = str_cat(node.op->name, "_", n);  // Also its outputs' stem.
  entry["op"] = node.op->name;
  Json attrs = Json::object();
  for (const auto& [name, value] : node.attrs.items()) attrs[name] = attr_json(value);
  // The sizes among them: "size" beside "value", an expression or, for
  // "ints", an array whose fixed elements repeat the value's.
  for (const trace::SymbolicAttr& a : file.symbolic.attrs) {
    if (a.node != static_cast<int>(n)) continue;
    Json& typed = attrs[a.attr];
    if (a.element < 0) {
      typed["size"] = a.size.to_string();
      continue;
    }
    if (!typed.contains("size")) typed["size"] = typed["value"];
    typed["size"][static_cast<size_t>(a.element)] = a.size.to_string();
  }
  entry["attrs"] = std::move(attrs);
  Json node_inputs = Json::array();
  for (trace::ValueId id : node.inputs) node_inputs.push_back(names[id]);
  entry["inputs"] = std::move(node_inputs);
  Json outputs = Json::array();
  for (trace::ValueId id : node.outputs) outputs.push_back(node_output_json(file, id, names[id]));
  entry["outputs"] = std::move(outputs);
  if (!file.node_sources[n].empty()) entry["source"] = file.node_sources[n];
  if (!node.scope.empty()) entry["scope"] = node.scope;
  return entry;
}

Json outputs_json(const trace::Graph& graph, const std::vector<std::string>& names) {
  Json outputs = Json::array();
  for (const trace::GraphOutput& output : graph.outputs) {
    Json entry = Json::object();
    entry["name"] = output.name;
    entry["value"] = names[output.value];
    entry["dtype"] = std::string(dtype_name(graph.value(output.value).dtype));
    entry["shape"] = shape_json(graph.value(output.value).shape);
    outputs.push_back(std::move(entry));
  }
  return outputs;
}

// {"size": "seq", "at_most": 512, "node": "slice_7"} per limit.
Json limits_json(const GraphFile& file) {
  Json limits = Json::array();
  for (const trace::SizeLimit& limit : file.symbolic.limits) {
    Json entry = Json::object();
    entry["size"] = limit.size.to_string();
    entry["at_most"] = limit.max;
    entry["node"] =
        str_cat(file.graph.nodes[static_cast<size_t>(limit.node)].op->name, "_", limit.node);
    limits.push_back(std::move(entry));
  }
  return limits;
}

Json params_json(const GraphFile& file) {
  Json params = Json::object();
  params["file"] = file.params_file;
  Json tensors = Json::array();
  for (const ParamsEntry& p : file.params) {
    Json entry = Json::object();
    entry["name"] = p.name;
    entry["dtype"] = std::string(dtype_name(p.dtype));
    entry["shape"] = shape_json(p.shape);
    entry["offset"] = p.offset;
    entry["length"] = p.length;
    entry["crc32"] = p.crc32;
    tensors.push_back(std::move(entry));
  }
  params["tensors"] = std::move(tensors);
  return params;
}

}  // namespace

std::string write_graph_json(const GraphFile& file) {
  const trace::Graph& graph = file.graph;
  const std::vector<std::string> names = value_names(graph);
  TANDEM_INTERNAL_ASSERT(
      file.inputs.size() == graph.inputs.size() && file.node_sources.size() == graph.nodes.size(),
      "a GraphFile's specs do not match its graph");
  Json root = Json::object();
  root["format"] = "tandem.graph";
  root["format_version"] = str_cat(kGraphFormatMajor, ".", kGraphFormatMinor);
  root["producer"] = file.producer;
  root["ops"] = ops_json(graph);
  root["inputs"] = inputs_json(file);
  Json nodes = Json::array();
  for (size_t n = 0; n < graph.nodes.size(); ++n) nodes.push_back(node_json(file, n, names));
  root["nodes"] = std::move(nodes);
  root["outputs"] = outputs_json(graph, names);
  if (!file.symbolic.limits.empty()) root["limits"] = limits_json(file);
  root["params"] = params_json(file);
  return layout(root) + "\n";
}

}  // namespace tandem::serialization
