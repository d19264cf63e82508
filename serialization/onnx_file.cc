#include "serialization/onnx_file.h"

#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "core/error.h"
#include "core/shape.h"
#include "serialization/file_name.h"
#include "serialization/graph_file.h"

#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"

namespace tandem::serialization {
namespace {

namespace fs = std::filesystem;

static_assert(std::endian::native == std::endian::little,
              "ONNX tensor data is little-endian, as this host must be");

// ONNX's TensorProto.DataType numbers.
enum OnnxType : int32_t {
  kUndefined = 0,
  kFloat = 1,
  kUInt8 = 2,
  kInt8 = 3,
  kUInt16 = 4,
  kInt16 = 5,
  kInt32 = 6,
  kInt64 = 7,
  kString = 8,
  kBool = 9,
  kFloat16 = 10,
  kDouble = 11,
  kUInt32 = 12,
  kUInt64 = 13,
  kComplex64 = 14,
  kComplex128 = 15,
  kBFloat16 = 16,
};

// Reads `length` bytes at `offset` of the external data file `location`,
// which must be a plain relative path in `file.folder`.
std::vector<uint8_t> read_external(const OnnxFileContext& file, const std::string& location,
                                   uint64_t offset, std::optional<uint64_t> length,
                                   uint64_t expected, std::string_view what) {
  auto fail = [&](std::string_view why) {
    throw Error(str_cat("ONNX file '", file.display_name, "': ", what, ": external data '",
                        location, "' ", why));
  };
  if (file.folder.empty()) fail("cannot be read: the model was not read from a file");
  const fs::path relative(location);
  if (location.empty() || relative.is_absolute()) fail("must be a relative path");
  for (const fs::path& part : relative) {
    if (auto problem = file_name_problem(part.string())) {
      fail(str_cat("must be a path inside the model's folder: ", *problem));
    }
  }
  const fs::path path = fs::path(file.folder) / relative;
  std::error_code error;
  const fs::file_status status = fs::symlink_status(path, error);
  if (error || !fs::is_regular_file(status)) fail("is not a regular file in the model's folder");
  const uint64_t size = fs::file_size(path, error);
  if (error) fail("cannot be read");
  const uint64_t want = length.value_or(expected);
  if (want != expected) {
    fail(str_cat("has length ", want, " but the tensor needs ", expected, " bytes"));
  }
  if (offset > size || size - offset < want) {
    fail(str_cat("is ", size, " bytes long, too short for ", want, " bytes at offset ", offset));
  }
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> bytes(want);
  in.seekg(static_cast<std::streamoff>(offset));
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(want));
  if (!in) fail("cannot be read");
  return bytes;
}

uint64_t parse_u64(const std::string& text, std::string_view key, const OnnxFileContext& file,
                   std::string_view what) {
  uint64_t value = 0;
  bool ok = !text.empty() && text.size() <= 19;
  for (char c : text) {
    ok = ok && c >= '0' && c <= '9';
    if (ok) value = value * 10 + static_cast<uint64_t>(c - '0');
  }
  TANDEM_CHECK(ok, "ONNX file '", file.display_name, "': ", what, ": external data ", key, " '",
               text, "' is not a number");
  return value;
}

// Copies `count` values of a repeated field into `out` (of `dtype`),
// converting each from the field's element type.
template <class Field>
void copy_repeated(const Field& field, DType dtype, void* out) {
  for (int i = 0; i < field.size(); ++i) {
    const auto v = field.Get(i);
    switch (dtype) {
      case DType::kFloat32:
        static_cast<float*>(out)[i] = static_cast<float>(v);
        break;
      case DType::kFloat64:
        static_cast<double*>(out)[i] = static_cast<double>(v);
        break;
      case DType::kInt32:
        static_cast<int32_t*>(out)[i] = static_cast<int32_t>(v);
        break;
      case DType::kInt64:
        static_cast<int64_t*>(out)[i] = static_cast<int64_t>(v);
        break;
      case DType::kUInt8:
        static_cast<uint8_t*>(out)[i] = static_cast<uint8_t>(v);
        break;
      case DType::kBool:
        static_cast<uint8_t*>(out)[i] = v != 0;
        break;
      // Half and bfloat16 values are stored as their 16 bits in int32_data.
      case DType::kFloat16:
      case DType::kBFloat16:
        static_cast<uint16_t*>(out)[i] = static_cast<uint16_t>(v);
        break;
    }
  }
}

}  // namespace

onnx::ModelProto parse_onnx_model(absl::Span<const uint8_t> bytes, std::string_view display_name) {
  TANDEM_CHECK(bytes.size() <= kMaxOnnxFileBytes, "ONNX file '", display_name, "' is ",
               bytes.size(), " bytes, over the 2 GiB protobuf can parse");
  google::protobuf::io::ArrayInputStream stream(bytes.data(), static_cast<int>(bytes.size()));
  google::protobuf::io::CodedInputStream coded(&stream);
  coded.SetTotalBytesLimit(static_cast<int>(bytes.size()));
  coded.SetRecursionLimit(kMaxJsonDepth);
  onnx::ModelProto model;
  TANDEM_CHECK(model.ParseFromCodedStream(&coded) && coded.ConsumedEntireMessage(), "ONNX file '",
               display_name, "' is not a valid ONNX model (protobuf ModelProto): bad wire data, ",
               "or nesting deeper than ", kMaxJsonDepth);
  TANDEM_CHECK(model.has_graph(), "ONNX file '", display_name, "' has no graph");
  return model;
}

std::optional<DType> dtype_from_onnx(int32_t data_type) {
  switch (data_type) {
    case kFloat:
      return DType::kFloat32;
    case kDouble:
      return DType::kFloat64;
    case kFloat16:
      return DType::kFloat16;
    case kBFloat16:
      return DType::kBFloat16;
    case kInt32:
      return DType::kInt32;
    case kInt64:
      return DType::kInt64;
    case kUInt8:
      return DType::kUInt8;
    case kBool:
      return DType::kBool;
    default:
      return std::nullopt;
  }
}

int32_t onnx_type_of(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return kFloat;
    case DType::kFloat64:
      return kDouble;
    case DType::kFloat16:
      return kFloat16;
    case DType::kBFloat16:
      return kBFloat16;
    case DType::kInt32:
      return kInt32;
    case DType::kInt64:
      return kInt64;
    case DType::kUInt8:
      return kUInt8;
    case DType::kBool:
      return kBool;
  }
  return kUndefined;
}

std::string onnx_type_name(int32_t data_type) {
  if (onnx::TensorProto_DataType_IsValid(data_type)) {
    return onnx::TensorProto_DataType_Name(static_cast<onnx::TensorProto_DataType>(data_type));
  }
  return str_cat("data type ", data_type);
}

Tensor tensor_from_onnx(const onnx::TensorProto& proto, const OnnxFileContext& file,
                        std::string_view what) {
  auto fail = [&](auto&&... why) {
    throw Error(str_cat("ONNX file '", file.display_name, "': ", what, ": ", why...));
  };
  const std::optional<DType> dtype = dtype_from_onnx(proto.data_type());
  if (!dtype) fail("Tandem has no tensors of type ", onnx_type_name(proto.data_type()));
  if (proto.dims_size() > kMaxRank) fail("rank ", proto.dims_size(), " is over ", kMaxRank);
  std::vector<int64_t> dims(proto.dims().begin(), proto.dims().end());
  int64_t numel = 1;
  for (int64_t d : dims) {
    if (d < 0) fail("dimension ", d, " is negative");
    numel = checked_mul(numel, d, "the element count of ", what);
  }
  const uint64_t nbytes = static_cast<uint64_t>(
      checked_mul(numel, static_cast<int64_t>(dtype_size(*dtype)), "the byte size of ", what));
  const Shape shape(dims);

  // Where the elements are: raw bytes, a typed field, or another file.
  std::vector<uint8_t> external;
  const bool is_external = proto.data_location() == onnx::TensorProto_DataLocation_EXTERNAL;
  const std::string* raw = proto.has_raw_data() ? &proto.raw_data() : nullptr;
  if (is_external) {
    std::string location;
    uint64_t offset = 0;
    std::optional<uint64_t> length;
    for (const onnx::StringStringEntryProto& entry : proto.external_data()) {
      if (entry.key() == "location") location = entry.value();
      if (entry.key() == "offset") offset = parse_u64(entry.value(), "offset", file, what);
      if (entry.key() == "length") length = parse_u64(entry.value(), "length", file, what);
    }
    external = read_external(file, location, offset, length, nbytes, what);
  }
  // The data's size is checked before the tensor is allocated.
  const auto check_count = [&](int64_t count, std::string_view field) {
    if (count != numel) {
      fail(field, " holds ", count, " values, the shape ", shape.to_string(), " needs ", numel);
    }
  };
  if (is_external) {
    // read_external checked the length.
  } else if (raw != nullptr) {
    if (raw->size() != nbytes) {
      fail("raw_data is ", raw->size(), " bytes, the shape ", shape.to_string(), " of ",
           onnx_type_name(proto.data_type()), " needs ", nbytes);
    }
  } else {
    switch (proto.data_type()) {
      case kFloat:
        check_count(proto.float_data_size(), "float_data");
        break;
      case kDouble:
        check_count(proto.double_data_size(), "double_data");
        break;
      case kInt64:
        check_count(proto.int64_data_size(), "int64_data");
        break;
      default:
        check_count(proto.int32_data_size(), "int32_data");
        break;
    }
  }
  Tensor tensor = Tensor::empty(shape, *dtype);
  void* out = tensor.raw_data();
  if (is_external || raw != nullptr) {
    const uint8_t* bytes =
        is_external ? external.data() : reinterpret_cast<const uint8_t*>(raw->data());
    if (nbytes) std::memcpy(out, bytes, nbytes);
    if (*dtype == DType::kBool) {
      for (uint64_t i = 0; i < nbytes; ++i) {
        if (static_cast<uint8_t*>(out)[i] > 1) fail("a bool is neither 0 nor 1");
      }
    }
  } else {
    switch (proto.data_type()) {
      case kFloat:
        copy_repeated(proto.float_data(), *dtype, out);
        break;
      case kDouble:
        copy_repeated(proto.double_data(), *dtype, out);
        break;
      case kInt64:
        copy_repeated(proto.int64_data(), *dtype, out);
        break;
      default:
        copy_repeated(proto.int32_data(), *dtype, out);
        break;
    }
  }
  return tensor;
}

}  // namespace tandem::serialization
