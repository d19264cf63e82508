// The graph JSON file: an exported model's inference graph, its signature
// and the manifest of its params file (serialization/FORMAT.md, "Graph
// file").
//
//   GraphFile file = ...;                                // from export_model
//   std::string text = write_graph_json(file);           // deterministic
//   GraphFile back = parse_graph_json(bytes, "m.json");  // checks everything
//
// A GraphFile is the graph exactly as the file states it: data inputs first,
// then the parameters, buffers and constants (kState inputs, whose values
// live in the params file), nodes in execution order, and outputs. Parsing
// trusts no byte: the JSON is parsed with a depth
// limit and duplicate keys refused; the ops the file lists are all looked up
// before anything else; every reference, attribute, arity, shape and dtype is
// checked, and each node's declared output shapes must equal what its op
// infers. Errors name the file, the JSON pointer of the bad field and, for a
// node, its name and op.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/types/span.h"

#include "serialization/params.h"
#include "trace/graph.h"
#include "trace/symbolic_shapes.h"

namespace tandem::serialization {

// The format this build writes; it reads any 1.x (a newer minor version may
// add fields, which are then ignored).
inline constexpr int kGraphFormatMajor = 1;
inline constexpr int kGraphFormatMinor = 4;

// What a graph input is, in the file's signature.
enum class InputRole { kData, kParameter, kBuffer, kConstant };
std::string_view input_role_name(InputRole role);

struct InputSpec {
  InputRole role = InputRole::kData;
};

struct GraphFile {
  // Inputs: the data inputs (kData), then every other (kState), whose values
  // are the params file's tensors of the same names.
  trace::Graph graph;
  std::vector<InputSpec> inputs;  // One per graph input.
  // Per node, the line of the model's code that traced it ("net.cc:42"), or
  // empty; kept for messages, since a loaded node has no source_location.
  std::vector<std::string> node_sources;
  // What depends on the free dimensions (trace/symbolic_shapes.h); empty
  // when the model takes exactly the traced shapes. A file of version 1.0 or
  // 1.1 with a dynamic batch reads as the name "batch" on dimension 0 of its
  // data inputs, fitted as an export would.
  trace::SymbolicShapes symbolic;
  // The params file's name, in the graph file's folder, and its index.
  std::string params_file;
  std::vector<ParamsEntry> params;
  std::string producer;
};

// The JSON text of `file`. Throws tandem::Error for what the format cannot
// hold (a kConstant graph input: constants are params with role kConstant).
std::string write_graph_json(const GraphFile& file);

// Parses and checks a graph file image; `display_name` names it in errors.
GraphFile parse_graph_json(absl::Span<const uint8_t> bytes, std::string_view display_name);

// The params file that a graph file image names, if it is JSON with a
// plain file name at /params/file; nothing otherwise. Checks nothing else,
// so it answers for any graph file, even one this build cannot load: the
// exporter uses it to find the params file that a new export supersedes.
std::optional<std::string> params_file_named_by(absl::Span<const uint8_t> bytes);

// Limits on what a graph file may declare, so that a small hostile file
// cannot make the loader work or allocate without bound.
inline constexpr uint64_t kMaxGraphFileBytes = uint64_t{256} << 20;
inline constexpr int kMaxJsonDepth = 64;
inline constexpr size_t kMaxGraphNodes = 1'000'000;
inline constexpr size_t kMaxNameLength = 4096;
inline constexpr int kMaxRank = 32;

}  // namespace tandem::serialization
