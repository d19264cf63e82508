// Text and Graphviz dumps of a graph (graph.h).
#include <sstream>
#include <string>
#include <string_view>

#include "core/error.h"
#include "trace/graph.h"

namespace tandem::trace {
namespace {

std::string type_of(const Graph& graph, ValueId id) {
  const Value& v = graph.value(id);
  return str_cat(dtype_name(v.dtype), v.shape.to_string());
}

std::string value_list(absl::Span<const ValueId> ids) {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) out += str_cat(i ? ", %" : "%", ids[i]);
  return out;
}

const char* kind_name(InputKind kind) {
  switch (kind) {
    case InputKind::kData:
      return "data";
    case InputKind::kState:
      return "state";
    case InputKind::kConstant:
      return "constant";
  }
  return "?";
}

// `text` inside a double-quoted DOT label: names may hold any character.
std::string dot_escaped(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

std::string to_text(const Graph& graph) {
  std::ostringstream out;
  for (const GraphInput& input : graph.inputs) {
    out << "input %" << input.value << " \"" << input.name << "\" " << kind_name(input.kind)
        << " : " << type_of(graph, input.value) << "\n";
  }
  for (const Node& node : graph.nodes) {
    out << value_list(node.outputs) << " = " << node.op->name << "(" << value_list(node.inputs)
        << ") " << node.attrs.to_string() << " :";
    for (size_t k = 0; k < node.outputs.size(); ++k) {
      out << (k ? ", " : " ") << type_of(graph, node.outputs[k]);
    }
    if (node.where.line() != 0 || !node.scope.empty()) out << "   #";
    if (node.where.line() != 0) out << " " << format_location(node.where);
    if (!node.scope.empty()) out << " in " << node.scope;
    out << "\n";
  }
  for (const GraphOutput& output : graph.outputs) {
    out << "output \"" << output.name << "\" = %" << output.value << "\n";
  }
  return out.str();
}

std::string to_dot(const Graph& graph) {
  std::ostringstream out;
  out << "digraph tandem {\n  rankdir=TB;\n  node [fontname=\"monospace\", fontsize=10];\n";
  // Edges run from the node (or input) that writes a value to each reader,
  // labelled with the value's type.
  auto source = [&](ValueId id) {
    const Value& v = graph.value(id);
    return v.node < 0 ? str_cat("v", id) : str_cat("n", v.node);
  };
  for (const GraphInput& input : graph.inputs) {
    out << "  v" << input.value << " [shape="
        << (input.kind == InputKind::kData    ? "box"
            : input.kind == InputKind::kState ? "cylinder"
                                              : "plaintext")
        << ", label=\"" << dot_escaped(input.name) << "\"];\n";
  }
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    const Node& node = graph.nodes[n];
    out << "  n" << n << " [shape=ellipse, label=\"" << node.op->name;
    if (node.where.line() != 0) out << "\\n" << format_location(node.where);
    if (!node.scope.empty()) out << "\\n" << dot_escaped(node.scope);
    out << "\"];\n";
    for (ValueId id : node.inputs) {
      out << "  " << source(id) << " -> n" << n << " [label=\"" << type_of(graph, id) << "\"];\n";
    }
  }
  for (size_t o = 0; o < graph.outputs.size(); ++o) {
    out << "  out" << o << " [shape=box, style=bold, label=\"" << graph.outputs[o].name << "\"];\n";
    out << "  " << source(graph.outputs[o].value) << " -> out" << o << ";\n";
  }
  out << "}\n";
  return out.str();
}

}  // namespace tandem::trace
