// Tandem models out as ONNX files, for other runtimes (onnxruntime, TensorRT...).
//
//   model->hybridize(); (*model)(x);
//   model->export_onnx("cnn.onnx");                          // eager/nn/module.h
//   tandem::load("cnn.json").export_onnx("cnn.onnx");        // a saved model
//   tools/tandem-convert cnn.json cnn.onnx                   // the same, from the shell
//
// The graph written is the one an export writes to JSON: the traced
// inference graph before the passes (a loader optimizes it for its own
// hardware; no fused op reaches the file), one ONNX node or a few standard
// ones per Tandem node (serialization/onnx_export.cc), opset 17, the
// parameters as initializers under their own names. Free dimensions become
// dim_params of the inputs and outputs; a reshape whose target follows one
// of them gets -1 there, and shapes that follow several (a reshape's, a
// `full`'s) are computed as the model runs from the inputs' Shape. An op
// whose other attributes follow them (a slice to a free length), or an op
// without an ONNX form yet, is an Error naming the node and its traced
// line, and nothing is written. The file is
// written atomically.
#pragma once

#include <string>

#include "absl/types/span.h"

#include "serialization/model.h"
#include "trace/graph.h"
#include "trace/symbolic_shapes.h"

namespace tandem::serialization {

// The ONNX opset exported files import.
inline constexpr int kOnnxExportOpset = 17;

// Writes `graph` (an inference graph whose kState inputs are `state`, in
// order, and whose kConstant inputs become initializers too) to `path`.
// `node_sources` names each node's traced line in messages (may be empty);
// `what` starts them (default "export_onnx('<path>')").
void export_onnx(const std::string& path, const trace::Graph& graph,
                 absl::Span<const StateInput> state, const trace::SymbolicShapes& symbolic,
                 absl::Span<const std::string> node_sources = {}, std::string what = {});

}  // namespace tandem::serialization
