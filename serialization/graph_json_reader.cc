// parse_graph_json: a graph file checked field by field (graph_file.h).
//
// The order of the checks is the order a user wants the news: the file is
// JSON at all; it is a Tandem graph of a version this build reads; every op
// it lists exists (all missing ops named at once); then each input, node,
// output and the params manifest, each reference resolved only to values
// defined earlier in the file (so cycles and forward references are refused
// without a graph search), and each node's declared outputs compared with
// what its op infers.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

#include "core/error.h"
#include "serialization/file_name.h"
#include "serialization/graph_file.h"

namespace tandem::serialization {
namespace {

using Json = nlohmann::json;

// A name as it may be printed: quoted and escaped (no terminal escapes from a
// hostile file), shortened if long.
std::string printable(std::string_view text) {
  std::string shown(text.substr(0, 200));
  std::string out = Json(shown).dump(-1, ' ', true, Json::error_handler_t::replace);
  return text.size() > 200 ? out + "..." : out;
}

std::string line_and_column(absl::Span<const uint8_t> bytes, size_t offset) {
  size_t line = 1, column = 1;
  for (size_t i = 0; i < offset && i < bytes.size(); ++i) {
    if (bytes[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return str_cat("line ", line, ", column ", column);
}

// Parses the JSON text, refusing duplicate keys (a second "op" must not
// silently win) and nesting deeper than the format ever needs.
Json parse_strict(absl::Span<const uint8_t> bytes, std::string_view file) {
  std::vector<absl::flat_hash_set<std::string>> keys;
  std::string duplicate;
  auto callback = [&](int depth, Json::parse_event_t event, Json& parsed) {
    TANDEM_CHECK(depth <= kMaxJsonDepth, "graph file '", file, "': JSON nested deeper than ",
                 kMaxJsonDepth, " levels");
    switch (event) {
      case Json::parse_event_t::object_start:
        keys.emplace_back();
        break;
      case Json::parse_event_t::object_end:
        keys.pop_back();
        break;
      case Json::parse_event_t::key:
        if (!keys.back().insert(parsed.get<std::string>()).second) {
          duplicate = parsed.get<std::string>();
          TANDEM_CHECK(false, "graph file '", file, "': duplicate key ", printable(duplicate),
                       " in one JSON object");
        }
        break;
      default:
        break;
    }
    return true;
  };
  try {
    return Json::parse(bytes.begin(), bytes.end(), callback);
  } catch (const Json::parse_error& e) {
    // e.what() repeats the byte offset in its own words; keep its reason.
    std::string reason = e.what();
    if (size_t colon = reason.rfind(": "); colon != std::string::npos) {
      reason = reason.substr(colon + 2);
    }
    throw Error(str_cat("graph file '", file, "': malformed JSON at ",
                        line_and_column(bytes, e.byte == 0 ? 0 : e.byte - 1), " (byte ",
                        e.byte == 0 ? 0 : e.byte - 1, "): ", reason));
  } catch (const Json::exception& e) {
    // The parser's other refusals (a number too large for a double) carry no
    // position.
    throw Error(str_cat("graph file '", file, "': malformed JSON: ", e.what()));
  }
}

// Typed access to the parsed document; every failure names the file and
// the JSON pointer of the field.
class Fields {
 public:
  explicit Fields(std::string_view file) : file_(file) {}

  [[noreturn]] void fail(const std::string& pointer, const std::string& what) const {
    throw Error(str_cat("graph file '", file_, "': ", pointer.empty() ? "/" : pointer, ": ", what));
  }

  const Json& object(const Json& j, const std::string& pointer) const {
    if (!j.is_object()) fail(pointer, str_cat("expected an object, got ", j.type_name()));
    return j;
  }
  const Json& array(const Json& j, const std::string& pointer, size_t max_size) const {
    if (!j.is_array()) fail(pointer, str_cat("expected an array, got ", j.type_name()));
    if (j.size() > max_size) {
      fail(pointer, str_cat("has ", j.size(), " elements, more than the limit of ", max_size));
    }
    return j;
  }
  // The field `key` of object `j` (at `pointer`); required.
  const Json& at(const Json& j, const char* key, const std::string& pointer) const {
    auto it = j.find(key);
    if (it == j.end()) fail(pointer, str_cat("missing required field \"", key, "\""));
    return *it;
  }
  // Refuses fields the format does not define (unless the file is a newer
  // minor version, whose additions this build may ignore).
  void only(const Json& j, const std::string& pointer,
            std::initializer_list<std::string_view> known) const {
    if (ignore_unknown_) return;
    for (const auto& [key, value] : j.items()) {
      if (std::find(known.begin(), known.end(), key) == known.end()) {
        fail(pointer, str_cat("unknown field ", printable(key)));
      }
    }
  }
  void set_ignore_unknown(bool ignore) { ignore_unknown_ = ignore; }

  std::string string(const Json& j, const std::string& pointer, size_t max_length) const {
    if (!j.is_string()) fail(pointer, str_cat("expected a string, got ", j.type_name()));
    const auto& s = j.get_ref<const std::string&>();
    if (s.size() > max_length) {
      fail(pointer,
           str_cat("string of ", s.size(), " bytes is longer than the limit of ", max_length));
    }
    return s;
  }
  // A name: non-empty, no control characters.
  std::string name(const Json& j, const std::string& pointer) const {
    std::string s = string(j, pointer, kMaxNameLength);
    if (s.empty()) fail(pointer, "empty name");
    for (unsigned char c : s) {
      if (c < 0x20 || c == 0x7f)
        fail(pointer, str_cat("name ", printable(s), " has a control character"));
    }
    return s;
  }
  int64_t integer(const Json& j, const std::string& pointer, int64_t lo, int64_t hi) const {
    bool in_range = false;
    int64_t v = 0;
    if (j.is_number_unsigned()) {
      uint64_t u = j.get<uint64_t>();
      in_range = u <= static_cast<uint64_t>(hi);
      v = static_cast<int64_t>(std::min<uint64_t>(u, std::numeric_limits<int64_t>::max()));
    } else if (j.is_number_integer()) {
      v = j.get<int64_t>();
      in_range = true;
    } else {
      fail(pointer, str_cat("expected an integer, got ", j.is_number() ? j.dump() : j.type_name()));
    }
    if (!in_range || v < lo || v > hi) {
      fail(pointer, str_cat("integer ", j.dump(), " is out of range [", lo, ", ", hi, "]"));
    }
    return v;
  }
  uint64_t unsigned_integer(const Json& j, const std::string& pointer) const {
    if (!j.is_number_unsigned()) {
      fail(pointer, str_cat("expected a non-negative integer, got ",
                            j.is_number() ? j.dump() : j.type_name()));
    }
    return j.get<uint64_t>();
  }
  DType dtype(const Json& j, const std::string& pointer) const {
    std::string s = string(j, pointer, 64);
    try {
      return parse_dtype(s);
    } catch (const Error&) {
      fail(pointer, str_cat("unknown dtype ", printable(s)));
    }
  }
  Shape shape(const Json& j, const std::string& pointer) const {
    array(j, pointer, kMaxRank);
    Shape::Dims dims;
    for (size_t i = 0; i < j.size(); ++i) {
      dims.push_back(
          integer(j[i], str_cat(pointer, "/", i), 0, std::numeric_limits<int64_t>::max()));
    }
    try {
      return Shape(absl::MakeConstSpan(dims));
    } catch (const Error& e) {
      fail(pointer, e.message());
    }
  }

 private:
  std::string file_;
  bool ignore_unknown_ = false;
};

// A JSON attribute {"type": ..., "value": ...} as the schema's type says.
kernels::AttrValue parse_attr(const Fields& f, const Json& j, const std::string& pointer,
                              const kernels::AttrSpec& spec) {
  f.object(j, pointer);
  f.only(j, pointer, {"type", "value", "size"});
  const std::string expected(kernels::attr_type_name(spec.default_value));
  std::string type = f.string(f.at(j, "type", pointer), pointer + "/type", 16);
  if (type != expected) {
    f.fail(pointer + "/type", str_cat("attribute '", spec.name, "' is of type ", expected,
                                      ", the file says ", printable(type)));
  }
  const Json& v = f.at(j, "value", pointer);
  const std::string at = pointer + "/value";
  return std::visit(
      [&](const auto& like) -> kernels::AttrValue {
        using T = std::decay_t<decltype(like)>;
        if constexpr (std::is_same_v<T, int64_t>) {
          return f.integer(v, at, std::numeric_limits<int64_t>::min(),
                           std::numeric_limits<int64_t>::max());
        } else if constexpr (std::is_same_v<T, double>) {
          if (v.is_string()) {
            std::string s = v.get<std::string>();
            if (s == "inf") return std::numeric_limits<double>::infinity();
            if (s == "-inf") return -std::numeric_limits<double>::infinity();
            if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
          }
          if (!v.is_number()) f.fail(at, "expected a number, \"inf\", \"-inf\" or \"nan\"");
          return v.get<double>();
        } else if constexpr (std::is_same_v<T, bool>) {
          if (!v.is_boolean()) f.fail(at, str_cat("expected true or false, got ", v.type_name()));
          return v.get<bool>();
        } else if constexpr (std::is_same_v<T, std::string>) {
          return f.string(v, at, size_t{1} << 20);
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          f.array(v, at, 4096);
          std::vector<int64_t> ints;
          for (size_t i = 0; i < v.size(); ++i) {
            ints.push_back(f.integer(v[i], str_cat(at, "/", i), std::numeric_limits<int64_t>::min(),
                                     std::numeric_limits<int64_t>::max()));
          }
          return ints;
        } else {
          return f.dtype(v, at);
        }
      },
      spec.default_value);
}

class GraphParser {
 public:
  GraphParser(const Json& root, std::string_view file) : f_(file), root_(root) {}

  GraphFile parse() {
    f_.object(root_, "");
    check_format();
    check_ops();
    f_.only(root_, "",
            {"format", "format_version", "producer", "ops", "inputs", "nodes", "outputs", "params",
             "limits"});
    out_.producer = f_.string(f_.at(root_, "producer", ""), "/producer", 256);
    parse_inputs();
    parse_nodes();
    parse_outputs();
    parse_params();
    try {
      trace::verify(out_.graph, "loaded graph");
    } catch (const Error& e) {
      f_.fail("", e.what());
    }
    parse_limits();
    if (legacy_batch_) fit_legacy_batch();
    return std::move(out_);
  }

 private:
  void check_format() {
    std::string format = f_.string(f_.at(root_, "format", ""), "/format", 64);
    if (format != "tandem.graph") {
      f_.fail("/format", str_cat("expected \"tandem.graph\", got ", printable(format),
                                 ": not a Tandem graph file"));
    }
    std::string version = f_.string(f_.at(root_, "format_version", ""), "/format_version", 32);
    int major = -1, minor = -1;
    size_t dot = version.find('.');
    auto digits = [](std::string_view s) {
      return !s.empty() && s.size() <= 6 &&
             std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
    };
    if (dot != std::string::npos && digits(version.substr(0, dot)) &&
        digits(version.substr(dot + 1))) {
      major = std::stoi(version.substr(0, dot));
      minor = std::stoi(version.substr(dot + 1));
    }
    if (major < 0)
      f_.fail("/format_version", str_cat("expected \"major.minor\", got ", printable(version)));
    if (major != kGraphFormatMajor) {
      f_.fail("/format_version",
              str_cat("graph format version ", version, " is ",
                      major > kGraphFormatMajor ? "newer than" : "older than", " this build's ",
                      kGraphFormatMajor, ".", kGraphFormatMinor,
                      major > kGraphFormatMajor ? "; update Tandem to load it"
                                                : "; it is not supported"));
    }
    f_.set_ignore_unknown(minor > kGraphFormatMinor);
  }

  void check_ops() {
    const Json& ops = f_.array(f_.at(root_, "ops", ""), "/ops", 100000);
    std::vector<std::string> missing;
    for (size_t i = 0; i < ops.size(); ++i) {
      std::string name = f_.name(ops[i], str_cat("/ops/", i));
      if (kernels::Registry::global().find(name) == nullptr) {
        missing.push_back(printable(name));
      } else {
        listed_ops_.insert(name);
      }
    }
    if (!missing.empty()) {
      f_.fail("/ops", str_cat("this build of Tandem lacks the op", missing.size() > 1 ? "s " : " ",
                              absl::StrJoin(missing, ", "), " that the graph uses"));
    }
  }

  // Registers a value name, refusing a second definition.
  void define(const std::string& name, trace::ValueId id, const std::string& pointer) {
    auto [it, inserted] = values_.try_emplace(name, id, pointer);
    if (!inserted) {
      f_.fail(pointer, str_cat("value name ", printable(name), " is already defined at ",
                               it->second.second));
    }
  }

  void parse_inputs() {
    const Json& inputs = f_.array(f_.at(root_, "inputs", ""), "/inputs", kMaxGraphNodes);
    bool seen_state = false;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const std::string p = str_cat("/inputs/", i);
      const Json& j = f_.object(inputs[i], p);
      f_.only(j, p, {"name", "role", "dtype", "shape", "dims", "dynamic_dims"});
      std::string name = f_.name(f_.at(j, "name", p), p + "/name");
      std::string role_text = f_.string(f_.at(j, "role", p), p + "/role", 32);
      InputSpec spec;
      if (role_text == "data") {
        spec.role = InputRole::kData;
      } else if (role_text == "parameter") {
        spec.role = InputRole::kParameter;
      } else if (role_text == "buffer") {
        spec.role = InputRole::kBuffer;
      } else if (role_text == "constant") {
        spec.role = InputRole::kConstant;
      } else {
        f_.fail(p + "/role",
                str_cat("expected \"data\", \"parameter\", \"buffer\" or \"constant\", got ",
                        printable(role_text)));
      }
      DType dtype = f_.dtype(f_.at(j, "dtype", p), p + "/dtype");
      Shape shape = f_.shape(f_.at(j, "shape", p), p + "/shape");
      if (spec.role == InputRole::kData) {
        if (seen_state)
          f_.fail(p, "data inputs must come before parameters, buffers and constants");
      } else {
        seen_state = true;
      }
      bool legacy_batch = false;
      if (auto it = j.find("dynamic_dims"); it != j.end()) {
        // Versions 1.0 and 1.1: [0] marks the batch.
        const Json& dims = f_.array(*it, p + "/dynamic_dims", 1);
        for (size_t d = 0; d < dims.size(); ++d) {
          f_.integer(dims[d], str_cat(p, "/dynamic_dims/", d), 0, 0);
          legacy_batch = true;
        }
        if (legacy_batch && (spec.role != InputRole::kData || shape.rank() == 0)) {
          f_.fail(p + "/dynamic_dims", "only a data input of rank >= 1 has a dynamic dimension");
        }
      }
      const auto kind =
          spec.role == InputRole::kData ? trace::InputKind::kData : trace::InputKind::kState;
      trace::ValueId id = out_.graph.add_input(name, kind, shape, dtype);
      define(name, id, p);
      if (legacy_batch) {
        out_.symbolic.dims.push_back({id, 0, trace::SizeExpr::symbol("batch")});
        legacy_batch_ = true;
      }
      if (auto it = j.find("dims"); it != j.end()) {
        if (spec.role != InputRole::kData)
          f_.fail(p + "/dims", "only data inputs have free dimensions");
        if (legacy_batch) f_.fail(p + "/dims", "both \"dims\" and \"dynamic_dims\"");
        parse_dims(*it, p + "/dims", id, /*names_only=*/true);
      }
      out_.inputs.push_back(std::move(spec));
    }
  }

  void parse_nodes() {
    const Json& nodes = f_.array(f_.at(root_, "nodes", ""), "/nodes", kMaxGraphNodes);
    absl::flat_hash_map<std::string, std::string> node_names;
    for (size_t n = 0; n < nodes.size(); ++n) {
      const std::string p = str_cat("/nodes/", n);
      const Json& j = f_.object(nodes[n], p);
      f_.only(j, p, {"name", "op", "attrs", "inputs", "outputs", "source", "scope"});
      std::string name = f_.name(f_.at(j, "name", p), p + "/name");
      if (auto [it, inserted] = node_names.try_emplace(name, p); !inserted) {
        f_.fail(p + "/name",
                str_cat("node name ", printable(name), " is already used at ", it->second));
      }
      node_index_[name] = static_cast<int>(n);
      std::string op_name = f_.name(f_.at(j, "op", p), p + "/op");
      if (!listed_ops_.contains(op_name)) {
        f_.fail(p + "/op", str_cat("op ", printable(op_name), " of node ", printable(name),
                                   " is not listed in /ops"));
      }
      const kernels::OpDef& op = kernels::Registry::global().get(op_name);
      const std::string where = str_cat("node ", printable(name), " (", p, ", op ", op_name, ")");

      kernels::Attrs attrs;
      const Json& attrs_json = f_.object(f_.at(j, "attrs", p), p + "/attrs");
      for (const auto& [key, value] : attrs_json.items()) {
        auto spec = std::find_if(op.attrs.begin(), op.attrs.end(),
                                 [&](const kernels::AttrSpec& s) { return s.name == key; });
        if (spec == op.attrs.end()) {
          f_.fail(str_cat(p, "/attrs"), str_cat(where, ": unknown attribute ", printable(key)));
        }
        attrs.set(key, parse_attr(f_, value, str_cat(p, "/attrs/", key), *spec));
        if (auto it = value.find("size"); it != value.end()) {
          parse_attr_size(*it, str_cat(p, "/attrs/", key, "/size"), static_cast<int>(n), key,
                          *attrs.find(key));
        }
      }
      for (const kernels::AttrSpec& spec : op.attrs) {
        if (spec.required && !attrs.has(spec.name)) {
          f_.fail(p + "/attrs", str_cat(where, ": missing required attribute '", spec.name, "'"));
        }
      }

      const Json& inputs = f_.array(f_.at(j, "inputs", p), p + "/inputs", 100000);
      const bool arity_ok = op.num_inputs == kernels::kVariadic
                                ? !inputs.empty()
                                : inputs.size() == static_cast<size_t>(op.num_inputs);
      if (!arity_ok) {
        f_.fail(p + "/inputs",
                str_cat(where, ": op ", op_name, " takes ",
                        op.num_inputs == kernels::kVariadic ? std::string("at least 1")
                                                            : std::to_string(op.num_inputs),
                        " input", op.num_inputs == 1 ? "" : "s", ", the node has ", inputs.size()));
      }
      std::vector<trace::ValueId> input_ids;
      for (size_t i = 0; i < inputs.size(); ++i) {
        const std::string ip = str_cat(p, "/inputs/", i);
        std::string ref = f_.name(inputs[i], ip);
        auto it = values_.find(ref);
        if (it == values_.end()) {
          f_.fail(ip, str_cat(where, " reads value ", printable(ref),
                              ", which no input or earlier node defines (a missing value, a "
                              "forward reference or a cycle)"));
        }
        input_ids.push_back(it->second.first);
      }

      const Json& outputs = f_.array(f_.at(j, "outputs", p), p + "/outputs", 100000);
      kernels::TensorMetas declared;
      for (size_t k = 0; k < outputs.size(); ++k) {
        const std::string op_ = str_cat(p, "/outputs/", k);
        const Json& o = f_.object(outputs[k], op_);
        f_.only(o, op_, {"name", "dtype", "shape", "dims"});
        declared.push_back({f_.shape(f_.at(o, "shape", op_), op_ + "/shape"),
                            f_.dtype(f_.at(o, "dtype", op_), op_ + "/dtype")});
      }
      if (op.num_outputs != kernels::kVariadic &&
          declared.size() != static_cast<size_t>(op.num_outputs)) {
        f_.fail(p + "/outputs",
                str_cat(where, ": op ", op_name, " has ", op.num_outputs, " output",
                        op.num_outputs == 1 ? "" : "s", ", the node declares ", declared.size()));
      }

      std::vector<trace::ValueId> ids;
      try {
        ids = out_.graph.add_node(op, attrs, input_ids);
      } catch (const Error& e) {
        f_.fail(p, str_cat(where, ": ", e.message()));
      }
      if (ids.size() != declared.size()) {
        f_.fail(p + "/outputs", str_cat(where, ": declares ", declared.size(),
                                        " outputs, the op infers ", ids.size()));
      }
      for (size_t k = 0; k < ids.size(); ++k) {
        const kernels::TensorMeta inferred = out_.graph.meta(ids[k]);
        if (inferred.shape != declared[k].shape || inferred.dtype != declared[k].dtype) {
          f_.fail(
              str_cat(p, "/outputs/", k),
              str_cat(where, ": declares output ", k, " as ", dtype_name(declared[k].dtype),
                      declared[k].shape.to_string(), " but the op infers ",
                      dtype_name(inferred.dtype), inferred.shape.to_string(), " from its inputs"));
        }
        const std::string op_ = str_cat(p, "/outputs/", k);
        define(f_.name(f_.at(outputs[k], "name", op_), op_ + "/name"), ids[k], op_);
        if (auto it = outputs[k].find("dims"); it != outputs[k].end()) {
          parse_dims(*it, op_ + "/dims", ids[k], /*names_only=*/false);
        }
      }
      std::string source;
      if (auto it = j.find("source"); it != j.end()) source = f_.string(*it, p + "/source", 4096);
      out_.node_sources.push_back(std::move(source));
      // Since 1.1: the module path that made the node.
      if (auto it = j.find("scope"); it != j.end()) {
        out_.graph.nodes.back().scope = f_.string(*it, p + "/scope", 4096);
      }
    }
  }

  void parse_outputs() {
    const Json& outputs = f_.array(f_.at(root_, "outputs", ""), "/outputs", kMaxGraphNodes);
    if (outputs.empty()) f_.fail("/outputs", "the graph has no outputs");
    absl::flat_hash_map<std::string, std::string> names;
    for (size_t i = 0; i < outputs.size(); ++i) {
      const std::string p = str_cat("/outputs/", i);
      const Json& j = f_.object(outputs[i], p);
      f_.only(j, p, {"name", "value", "dtype", "shape"});
      std::string name = f_.name(f_.at(j, "name", p), p + "/name");
      if (auto [it, inserted] = names.try_emplace(name, p); !inserted) {
        f_.fail(p + "/name",
                str_cat("output name ", printable(name), " is already used at ", it->second));
      }
      std::string ref = f_.name(f_.at(j, "value", p), p + "/value");
      auto it = values_.find(ref);
      if (it == values_.end())
        f_.fail(p + "/value", str_cat("no value is called ", printable(ref)));
      const kernels::TensorMeta meta = out_.graph.meta(it->second.first);
      DType dtype = f_.dtype(f_.at(j, "dtype", p), p + "/dtype");
      Shape shape = f_.shape(f_.at(j, "shape", p), p + "/shape");
      if (dtype != meta.dtype || shape != meta.shape) {
        f_.fail(p, str_cat("output ", printable(name), " is declared ", dtype_name(dtype),
                           shape.to_string(), " but value ", printable(ref), " is ",
                           dtype_name(meta.dtype), meta.shape.to_string()));
      }
      out_.graph.add_output(it->second.first, name);
    }
  }

  void parse_params() {
    const Json& params = f_.object(f_.at(root_, "params", ""), "/params");
    f_.only(params, "/params", {"file", "tensors"});
    std::string file = f_.string(f_.at(params, "file", "/params"), "/params/file", kMaxNameLength);
    // A plain file name beside the graph file: never a path that could
    // leave the model's folder (serialization/file_name.h).
    if (auto problem = file_name_problem(file)) {
      f_.fail("/params/file",
              str_cat("params file ", printable(file),
                      " must be a plain file name in the graph file's folder: ", *problem));
    }
    out_.params_file = file;

    absl::flat_hash_map<std::string, size_t> wanted;  // Non-data input name -> input index.
    for (size_t i = 0; i < out_.graph.inputs.size(); ++i) {
      if (out_.inputs[i].role != InputRole::kData) wanted[out_.graph.inputs[i].name] = i;
    }
    const Json& tensors =
        f_.array(f_.at(params, "tensors", "/params"), "/params/tensors", kMaxGraphNodes);
    absl::flat_hash_set<std::string> listed;
    for (size_t t = 0; t < tensors.size(); ++t) {
      const std::string p = str_cat("/params/tensors/", t);
      const Json& j = f_.object(tensors[t], p);
      f_.only(j, p, {"name", "dtype", "shape", "offset", "length", "crc32"});
      ParamsEntry e;
      e.name = f_.name(f_.at(j, "name", p), p + "/name");
      e.dtype = f_.dtype(f_.at(j, "dtype", p), p + "/dtype");
      e.shape = f_.shape(f_.at(j, "shape", p), p + "/shape");
      e.offset = f_.unsigned_integer(f_.at(j, "offset", p), p + "/offset");
      e.length = f_.unsigned_integer(f_.at(j, "length", p), p + "/length");
      e.crc32 = static_cast<uint32_t>(
          f_.integer(f_.at(j, "crc32", p), p + "/crc32", 0, std::numeric_limits<uint32_t>::max()));
      if (!listed.insert(e.name).second) {
        f_.fail(p + "/name", str_cat("parameter ", printable(e.name), " is listed twice"));
      }
      auto it = wanted.find(e.name);
      if (it == wanted.end()) {
        f_.fail(p + "/name", str_cat("parameter ", printable(e.name),
                                     " is not an input of the graph (a parameter the graph "
                                     "does not use, or a data input)"));
      }
      const kernels::TensorMeta meta = out_.graph.meta(out_.graph.inputs[it->second].value);
      if (meta.dtype != e.dtype || meta.shape != e.shape) {
        f_.fail(p, str_cat("parameter ", printable(e.name), " is ", dtype_name(e.dtype),
                           e.shape.to_string(), " here but ", dtype_name(meta.dtype),
                           meta.shape.to_string(), " in /inputs"));
      }
      out_.params.push_back(std::move(e));
    }
    std::vector<std::string> missing;
    for (size_t i = 0; i < out_.graph.inputs.size(); ++i) {
      const std::string& name = out_.graph.inputs[i].name;
      if (out_.inputs[i].role != InputRole::kData && !listed.contains(name)) {
        missing.push_back(printable(name));
      }
    }
    if (!missing.empty()) {
      f_.fail("/params/tensors",
              str_cat("no params entry for the graph input", missing.size() > 1 ? "s " : " ",
                      absl::StrJoin(missing, ", ")));
    }
  }

  // A size expression at `pointer`: parsed, its names all given by data
  // inputs, and equal to `traced` at the traced sizes.
  trace::SizeExpr size_expr(const Json& j, const std::string& pointer, int64_t traced) const {
    trace::SizeExpr size;
    try {
      size = trace::SizeExpr::parse(f_.string(j, pointer, 1024), "size");
    } catch (const Error& e) {
      f_.fail(pointer, e.message());
    }
    if (size.is_constant()) f_.fail(pointer, "a fixed size is written as a number");
    for (const std::string& name : size.symbols()) {
      if (!traced_sizes_.contains(name)) {
        f_.fail(pointer, str_cat("size ", printable(size.to_string()), " uses dimension ",
                                 printable(name), ", which no data input names"));
      }
    }
    int64_t value = 0;
    try {
      value = size.evaluate(traced_sizes_, "size");
    } catch (const Error& e) {
      f_.fail(pointer, e.message());
    }
    if (value != traced) {
      f_.fail(pointer,
              str_cat("size ", printable(size.to_string()), " is ", value, " at the traced sizes (",
                      trace::values_text(traced_sizes_), "), but the file says ", traced));
    }
    return size;
  }

  // "dims" of value `id`: per dimension its size as in "shape", or (a data
  // input's) a name, or (a node output's) an expression.
  void parse_dims(const Json& j, const std::string& pointer, trace::ValueId id, bool names_only) {
    const Shape& shape = out_.graph.value(id).shape;
    f_.array(j, pointer, kMaxRank);
    if (j.size() != static_cast<size_t>(shape.rank())) {
      f_.fail(pointer, str_cat("has ", j.size(), " sizes for a shape of rank ", shape.rank()));
    }
    for (int a = 0; a < shape.rank(); ++a) {
      const std::string at = str_cat(pointer, "/", a);
      const Json& d = j[static_cast<size_t>(a)];
      if (!d.is_string()) {
        if (f_.integer(d, at, 0, std::numeric_limits<int64_t>::max()) != shape[a]) {
          f_.fail(at, str_cat("size ", d.dump(), " differs from the shape's ", shape[a]));
        }
        continue;
      }
      if (!names_only) {
        out_.symbolic.dims.push_back({id, a, size_expr(d, at, shape[a])});
        continue;
      }
      std::string name = f_.string(d, at, 64);
      if (!trace::valid_symbol_name(name)) {
        f_.fail(at, str_cat(printable(name), " is not a valid dimension name"));
      }
      auto [it, inserted] = traced_sizes_.emplace(name, shape[a]);
      if (!inserted && it->second != shape[a]) {
        f_.fail(at, str_cat("dimension ", printable(name), " has size ", shape[a], " here but ",
                            it->second, " in an earlier input"));
      }
      out_.symbolic.dims.push_back({id, a, trace::SizeExpr::symbol(std::move(name))});
    }
  }

  // An attribute's "size": an expression for an "int" or "float", an array
  // for "ints".
  void parse_attr_size(const Json& j, const std::string& pointer, int node, const std::string& attr,
                       const kernels::AttrValue& value) {
    if (const auto* ints = std::get_if<std::vector<int64_t>>(&value)) {
      f_.array(j, pointer, ints->size());
      if (j.size() != ints->size()) {
        f_.fail(pointer, str_cat("has ", j.size(), " sizes for ", ints->size(), " values"));
      }
      for (size_t e = 0; e < ints->size(); ++e) {
        const std::string at = str_cat(pointer, "/", e);
        if (!j[e].is_string()) {
          if (f_.integer(j[e], at, std::numeric_limits<int64_t>::min(),
                         std::numeric_limits<int64_t>::max()) != (*ints)[e]) {
            f_.fail(at, str_cat("size ", j[e].dump(), " differs from the value's ", (*ints)[e]));
          }
          continue;
        }
        out_.symbolic.attrs.push_back(
            {node, attr, static_cast<int>(e), size_expr(j[e], at, (*ints)[e])});
      }
      return;
    }
    int64_t traced = 0;
    if (const auto* i = std::get_if<int64_t>(&value)) {
      traced = *i;
    } else if (const auto* d = std::get_if<double>(&value);
               d != nullptr && *d == std::trunc(*d) && std::abs(*d) < 9.0e15) {
      traced = static_cast<int64_t>(*d);
    } else {
      f_.fail(pointer, "only an integer attribute, or a float one of whole value, has a size");
    }
    out_.symbolic.attrs.push_back({node, attr, -1, size_expr(j, pointer, traced)});
  }

  // Since 1.2: [{"size": "seq", "at_most": 512, "node": "slice_7"}, ...].
  void parse_limits() {
    auto it = root_.find("limits");
    if (it == root_.end()) return;
    const Json& limits = f_.array(*it, "/limits", kMaxGraphNodes);
    for (size_t i = 0; i < limits.size(); ++i) {
      const std::string p = str_cat("/limits/", i);
      const Json& j = f_.object(limits[i], p);
      f_.only(j, p, {"size", "at_most", "node"});
      trace::SizeLimit limit;
      limit.max = f_.integer(f_.at(j, "at_most", p), p + "/at_most", 0,
                             std::numeric_limits<int64_t>::max());
      const std::string node = f_.name(f_.at(j, "node", p), p + "/node");
      auto found = node_index_.find(node);
      if (found == node_index_.end())
        f_.fail(p + "/node", str_cat("no node is called ", printable(node)));
      limit.node = found->second;
      const Json& size = f_.at(j, "size", p);
      int64_t traced = 0;
      try {
        traced = trace::SizeExpr::parse(f_.string(size, p + "/size", 1024), "size")
                     .evaluate(traced_sizes_, "size");
      } catch (const Error& e) {
        f_.fail(p + "/size", e.message());
      }
      limit.size = size_expr(size, p + "/size", traced);
      if (traced > limit.max) {
        f_.fail(p, str_cat("the traced sizes (", trace::values_text(traced_sizes_),
                           ") already break this limit"));
      }
      out_.symbolic.limits.push_back(std::move(limit));
    }
  }

  // Versions 1.0 and 1.1 mark a batch and nothing else: its expressions are
  // fitted from the graph inferred at other batch sizes, as an export fits
  // traces (the exporter then rewrote the graph's attributes to follow any
  // batch, and proved it did).
  void fit_legacy_batch() {
    const trace::Graph& graph = out_.graph;
    int64_t batch = -1;
    for (const trace::SymbolicDim& d : out_.symbolic.dims) {
      const int64_t size = graph.value(d.value).shape[0];
      if (batch >= 0 && size != batch) {
        f_.fail("/inputs", str_cat("the data inputs with dynamic_dims have batch sizes ", batch,
                                   " and ", size));
      }
      batch = size;
    }
    trace::ProbePlan plan = trace::plan_probes({{"batch", batch}});
    std::vector<trace::Graph> graphs;
    try {
      for (size_t p = 0; p < plan.points.size(); ++p) {
        try {
          graphs.push_back(
              trace::infer_at(graph, out_.symbolic, plan.points[p], out_.node_sources));
        } catch (const Error&) {
          if (p < plan.first_extra_check()) throw;
          plan.drop_check(p--);  // Sizes the graph refuses: not a check.
        }
      }
      out_.symbolic = trace::fit_symbolic_shapes(plan, graphs, out_.node_sources);
    } catch (const Error& e) {
      f_.fail("/inputs", str_cat("the graph does not follow its dynamic batch: ", e.message()));
    }
  }

  Fields f_;
  const Json& root_;
  GraphFile out_;
  bool legacy_batch_ = false;
  trace::SymbolValues traced_sizes_;  // Each free dimension's traced size.
  absl::flat_hash_map<std::string, int> node_index_;
  absl::flat_hash_set<std::string> listed_ops_;
  // Value name -> (value, JSON pointer of its definition).
  absl::flat_hash_map<std::string, std::pair<trace::ValueId, std::string>> values_;
};

}  // namespace

std::optional<std::string> params_file_named_by(absl::Span<const uint8_t> bytes) {
  try {
    const Json root = parse_strict(bytes, "");
    const auto params = root.find("params");
    if (!root.is_object() || params == root.end() || !params->is_object()) return std::nullopt;
    const auto file = params->find("file");
    if (file == params->end() || !file->is_string()) return std::nullopt;
    std::string name = file->get<std::string>();
    if (file_name_problem(name)) return std::nullopt;
    return name;
  } catch (const Error&) {
    return std::nullopt;
  }
}

GraphFile parse_graph_json(absl::Span<const uint8_t> bytes, std::string_view display_name) {
  if (bytes.size() > kMaxGraphFileBytes) {
    throw Error(str_cat("graph file '", display_name, "': ", bytes.size(),
                        " bytes is larger than the limit of ", kMaxGraphFileBytes));
  }
  Json root = parse_strict(bytes, display_name);
  return GraphParser(root, display_name).parse();
}

}  // namespace tandem::serialization
