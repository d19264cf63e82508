// ONNX files as protobuf messages, and their tensors as Tandem tensors: the
// part of the ONNX importer that reads bytes (serialization/onnx_import.h is
// the public side).
//
//   onnx::ModelProto model = parse_onnx_model(bytes, "resnet.onnx");
//   Tensor w = tensor_from_onnx(model.graph().initializer(0), {"/models", "resnet.onnx"},
//                               "initializer 'fc.weight'");
//
// Parsing is protobuf's (Debian's libonnx-dev schema), under a size cap and
// protobuf's recursion limit. A tensor's shape is checked (rank, every
// dimension >= 0, the element count and byte size without overflow) before
// anything is allocated, and its data must hold exactly that many elements.
// External data (a tensor whose bytes live in another file) is read only
// from a plain relative path inside the model's folder, without "..", and
// only from a regular file, never through a symbolic link.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/types/span.h"

#include "core/dtype.h"
#include "core/tensor.h"

#include "onnx/onnx_pb.h"

namespace tandem::serialization {

// Protobuf cannot parse a message of 2 GiB or more.
inline constexpr uint64_t kMaxOnnxFileBytes = (uint64_t{2} << 30) - 1;

// Throws tandem::Error naming `display_name` when the bytes are not an ONNX
// model.
onnx::ModelProto parse_onnx_model(absl::Span<const uint8_t> bytes, std::string_view display_name);

// The Tandem dtype of an ONNX TensorProto.DataType, or nothing when Tandem
// has no such dtype (int8, uint16, string, complex...).
std::optional<DType> dtype_from_onnx(int32_t data_type);
// The ONNX TensorProto.DataType of a Tandem dtype.
int32_t onnx_type_of(DType dtype);
// "FLOAT", "INT8", ... or "data type <n>".
std::string onnx_type_name(int32_t data_type);

// Where a tensor's external data may be read from: the model's folder ("":
// nowhere, a model read from memory), and the model's name for messages.
struct OnnxFileContext {
  std::string folder;
  std::string display_name;
};

// `proto` as a CPU tensor. Throws tandem::Error naming the file, `what` and
// the problem: a dtype Tandem lacks, a bad shape, data of the wrong size,
// external data outside the folder.
Tensor tensor_from_onnx(const onnx::TensorProto& proto, const OnnxFileContext& file,
                        std::string_view what);

}  // namespace tandem::serialization
