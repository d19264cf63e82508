#include "serialization/npy.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"

#include "core/error.h"
#include "serialization/file_io.h"
#include "serialization/little_endian.h"
#include "serialization/tensor_check.h"

namespace tandem::serialization {
namespace {

// Little-endian arrays are copied as they lie; big-endian ones are swapped.
static_assert(std::endian::native == std::endian::little,
              "the .npy reader and writer assume a little-endian host");

// The layout, as numpy/lib/format.py writes it: magic, u8 major, u8 minor,
// header length (u16 in 1.0, u32 in 2.0 and 3.0), the header (a Python dict
// literal padded with spaces and ending in '\n'), then the elements.
constexpr std::string_view kMagic = "\x93NUMPY";
// NumPy's own default for np.load(max_header_size=...): longer headers are
// refused as unsafe to parse.
constexpr uint64_t kMaxHeaderLength = 10000;
constexpr int kMaxRank = 64;  // NumPy 2's NPY_MAXDIMS.
// NumPy pads the header so that the elements start on a multiple of this...
constexpr uint64_t kArrayAlign = 64;
// ...after leaving room for the leading dimension to grow to 21 digits, so
// that appending rows can rewrite the header in place.
constexpr size_t kGrowthAxisMaxDigits = 21;

// The dtypes Tensor and NumPy share, by their little-endian descr.
struct NpyType {
  DType dtype;
  std::string_view descr;
};
constexpr NpyType kTypes[] = {
    {DType::kFloat32, "<f4"}, {DType::kFloat64, "<f8"}, {DType::kFloat16, "<f2"},
    {DType::kInt32, "<i4"},   {DType::kInt64, "<i8"},   {DType::kUInt8, "|u1"},
    {DType::kBool, "|b1"},
};

// Every reading error: "npy file '<name>': <problem> at byte offset N".
template <class... Args>
[[noreturn]] void fail(std::string_view file, uint64_t offset, const Args&... problem) {
  detail::throw_check_failure(
      str_cat("npy file '", file, "': ", problem..., " at byte offset ", offset));
}

// `text` for a message: printable ASCII as it is, other bytes as \xNN.
std::string printable(std::string_view text) {
  std::string out;
  for (const char c : text) {
    if (c >= 0x20 && c < 0x7F) {
      out.push_back(c);
    } else {
      out += str_cat("\\x", absl::Hex(static_cast<uint8_t>(c), absl::kZeroPad2));
    }
  }
  return out;
}

struct Header {
  DType dtype = DType::kFloat32;
  bool swap = false;  // Big-endian elements.
  Shape::Dims dims;
};

// The header dict, e.g. "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }":
// a Python literal that NumPy evaluates, and that this reads as untrusted
// text with a grammar of just what NumPy writes (strings without escapes,
// True/False, tuples of non-negative ints), each key exactly once.
class HeaderParser {
 public:
  HeaderParser(std::string_view file, std::string_view text, uint64_t base)
      : file_(file), text_(text), base_(base) {}

  Header parse() {
    Header header;
    bool seen_descr = false, seen_order = false, seen_shape = false;
    expect('{', "'{' opening the header dict");
    while (!eat('}')) {
      skip_spaces();
      const uint64_t key_at = pos_;
      const std::string key = parse_string("a key");
      auto first = [&](bool& seen) {
        if (seen) fail_at(key_at, "the key '", key, "' appears twice");
        seen = true;
      };
      expect(':', "':' after the key");
      if (key == "descr") {
        first(seen_descr);
        parse_descr(header);
      } else if (key == "fortran_order") {
        first(seen_order);
        skip_spaces();
        const uint64_t value_at = pos_;
        if (parse_bool()) {
          fail_at(value_at,
                  "Fortran-order arrays are not supported; save a C-order copy with "
                  "np.save(path, np.ascontiguousarray(a))");
        }
      } else if (key == "shape") {
        first(seen_shape);
        header.dims = parse_shape();
      } else {
        fail_at(key_at, "unexpected key '", key,
                "' (a .npy header has exactly 'descr', 'fortran_order' and 'shape')");
      }
      if (!eat(',')) {
        expect('}', "',' or '}' after a value");
        break;
      }
    }
    const char* missing = !seen_descr   ? "descr"
                          : !seen_order ? "fortran_order"
                          : !seen_shape ? "shape"
                                        : nullptr;
    if (missing != nullptr) fail_at(pos_, "the header has no '", missing, "' key");
    // NumPy pads with spaces and ends the header with a newline.
    const size_t tail = text_.find_first_not_of(' ', pos_);
    if (tail != text_.size() - 1 || text_.back() != '\n') {
      fail_at(std::min(tail, text_.size()),
              "expected only spaces and a final newline after the header dict");
    }
    return header;
  }

 private:
  template <class... Args>
  [[noreturn]] void fail_at(uint64_t pos, const Args&... problem) const {
    fail(file_, base_ + pos, "header: ", problem...);
  }

  void skip_spaces() {
    while (pos_ < text_.size() && text_[pos_] == ' ') ++pos_;
  }
  // Consumes `c` (after spaces) if it comes next.
  bool eat(char c) {
    skip_spaces();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void expect(char c, const char* what) {
    if (!eat(c)) fail_at(pos_, "expected ", what, ", found ", next_text());
  }
  std::string next_text() const {
    if (pos_ >= text_.size()) return "the end of the header";
    return str_cat("\"", printable(text_.substr(pos_, 12)), "\"");
  }

  std::string parse_string(const char* what) {
    skip_spaces();
    const char quote = pos_ < text_.size() ? text_[pos_] : '\0';
    if (quote != '\'' && quote != '"') fail_at(pos_, "expected ", what, ", found ", next_text());
    const size_t end = text_.find(quote, pos_ + 1);
    if (end == std::string_view::npos) fail_at(pos_, "unterminated string");
    const std::string_view body = text_.substr(pos_ + 1, end - pos_ - 1);
    for (char c : body) {
      if (c == '\\' || c < 0x20 || c > 0x7E) {
        fail_at(pos_, "unsupported character in string \"", printable(body), "\"");
      }
    }
    pos_ = end + 1;
    return std::string(body);
  }

  void parse_descr(Header& header) {
    skip_spaces();
    const uint64_t at = pos_;
    if (eat('[')) {
      fail_at(at, "structured arrays (a list descr) are not supported; save one field at a time");
    }
    const std::string descr = parse_string("a dtype string for 'descr'");
    // NumPy writes '<' or '>' before multi-byte codes and '|' before one-byte codes.
    for (const NpyType& type : kTypes) {
      const std::string_view code = type.descr.substr(1);
      if (descr.size() != type.descr.size() || descr.substr(1) != code) continue;
      const bool one_byte = dtype_size(type.dtype) == 1;
      if (descr[0] == '<' || (one_byte && (descr[0] == '|' || descr[0] == '>'))) {
        header.dtype = type.dtype;
        return;
      }
      if (descr[0] == '>') {
        header.dtype = type.dtype;
        header.swap = true;
        return;
      }
    }
    fail_at(at, "dtype '", descr,
            "' is not supported; supported are '<f4', '<f8', '<f2', '<i4', '<i8', '|u1' and "
            "'|b1' (and '>' for big-endian)");
  }

  bool parse_bool() {
    skip_spaces();
    for (const auto& [word, value] : {std::pair{"True", true}, std::pair{"False", false}}) {
      if (text_.substr(pos_, std::strlen(word)) == word) {
        pos_ += std::strlen(word);
        return value;
      }
    }
    fail_at(pos_, "expected True or False for 'fortran_order', found ", next_text());
  }

  // "()", "(3,)", "(2, 3)" or "(2, 3,)": a single element needs its comma.
  Shape::Dims parse_shape() {
    Shape::Dims dims;
    expect('(', "a tuple for 'shape'");
    while (!eat(')')) {
      skip_spaces();
      const uint64_t at = pos_;
      if (dims.size() == kMaxRank) fail_at(at, "rank exceeds the limit of ", kMaxRank);
      dims.push_back(parse_dimension());
      if (!eat(',')) {
        if (dims.size() == 1) fail_at(pos_, "expected ',' after the only dimension");
        expect(')', "',' or ')' in 'shape'");
        break;
      }
    }
    return dims;
  }

  int64_t parse_dimension() {
    const uint64_t at = pos_;
    if (pos_ < text_.size() && text_[pos_] == '-') {
      fail_at(at, "negative dimension in 'shape'");
    }
    int64_t value = 0;
    const uint64_t digits_at = pos_;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      if (__builtin_mul_overflow(value, 10, &value) ||
          __builtin_add_overflow(value, text_[pos_] - '0', &value)) {
        fail_at(at, "a dimension in 'shape' overflows int64");
      }
      ++pos_;
    }
    if (pos_ == digits_at) fail_at(at, "expected a dimension in 'shape', found ", next_text());
    return value;
  }

  std::string_view file_;
  std::string_view text_;
  uint64_t base_;  // The file offset of text_[0].
  size_t pos_ = 0;
};

// Reverses the bytes of each `width`-byte element.
void swap_bytes(uint8_t* data, uint64_t length, size_t width) {
  for (uint64_t i = 0; i + width <= length; i += width) std::reverse(data + i, data + i + width);
}

// Where the header dict lies: after the magic, the version and the length.
struct HeaderSpan {
  uint64_t at;
  uint64_t length;
};

// Checks the magic and the version, and the header length against the file.
HeaderSpan read_preamble(const ByteSource& source, std::string_view file) {
  const uint64_t size = source.size();
  if (size == 0) fail(file, 0, "the file is empty, expected a .npy header");
  uint8_t prefix[12] = {};
  source.read_at(0, absl::MakeSpan(prefix, std::min<uint64_t>(size, sizeof(prefix))));
  const std::string_view seen(reinterpret_cast<const char*>(prefix),
                              std::min<uint64_t>(size, kMagic.size()));
  if (kMagic.substr(0, seen.size()) != seen) {
    fail(file, 0, "not a .npy file: bad magic \"", printable(seen), "\", expected \"",
         printable(kMagic), "\"");
  }
  // Versions 2.0 and 3.0 widen the header length to u32; 3.0 allows UTF-8
  // in the header, which no header this reads can contain.
  const uint64_t length_at = kMagic.size() + 2;
  if (size < length_at + 2) {
    fail(file, size, "truncated: the header needs at least ", length_at + 2, " bytes, file has ",
         size);
  }
  const uint8_t major = prefix[6], minor = prefix[7];
  if (minor != 0 || major < 1 || major > 3) {
    fail(file, 6, ".npy format version ", int{major}, ".", int{minor},
         " is not supported (Tandem reads 1.0, 2.0 and 3.0)");
  }
  const uint64_t header_at = length_at + (major == 1 ? 2 : 4);
  if (size < header_at) {
    fail(file, size, "truncated: the header needs bytes up to ", header_at, ", file has ", size);
  }
  const uint64_t header_length =
      major == 1 ? load_le<uint16_t>(prefix + length_at) : load_le<uint32_t>(prefix + length_at);
  if (header_length > kMaxHeaderLength) {
    fail(file, length_at, "the header length ", header_length, " exceeds the limit of ",
         kMaxHeaderLength, " bytes");
  }
  if (header_length > size - header_at) {
    fail(file, length_at, "truncated: the header needs bytes up to ", header_at + header_length,
         ", file has ", size);
  }
  return {header_at, header_length};
}

Tensor read_from(const ByteSource& source, std::string_view file) {
  const uint64_t size = source.size();
  const HeaderSpan span = read_preamble(source, file);
  std::string text(span.length, '\0');
  source.read_at(span.at, absl::MakeSpan(reinterpret_cast<uint8_t*>(text.data()), text.size()));
  Header header = HeaderParser(file, text, span.at).parse();

  if (auto problem = shape_problem(header.dims, header.dtype)) fail(file, span.at, *problem);
  Shape shape(header.dims);
  const uint64_t data_at = span.at + span.length;
  const uint64_t length = shape.numel() * dtype_size(header.dtype);
  if (length > size - data_at) {
    fail(file, data_at, "truncated: shape ", shape.to_string(), " ", dtype_name(header.dtype),
         " needs bytes up to ", data_at + length, ", file has ", size);
  }
  if (length < size - data_at) {
    fail(file, data_at + length, "trailing bytes: the data ends at byte ", data_at + length,
         ", the file has ", size, " bytes");
  }
  // Everything is checked; only now is memory allocated.
  Tensor tensor = Tensor::empty(std::move(shape), header.dtype);
  auto* data = static_cast<uint8_t*>(tensor.raw_data());
  if (length > 0) source.read_at(data_at, absl::MakeSpan(data, length));
  if (header.swap) swap_bytes(data, length, dtype_size(header.dtype));
  if (header.dtype == DType::kBool) {
    if (auto i = invalid_bool(absl::MakeConstSpan(data, length))) {
      fail(file, data_at + *i, "bool element ", *i, " has the byte value ", int{data[*i]},
           ", expected 0 or 1");
    }
  }
  return tensor;
}

// The dict NumPy writes: keys sorted, the shape as Python's tuple repr.
std::string header_dict(std::string_view descr, const Shape& shape) {
  std::string text = str_cat("{'descr': '", descr, "', 'fortran_order': False, 'shape': (");
  for (int i = 0; i < shape.rank(); ++i) text += str_cat(i > 0 ? ", " : "", shape[i]);
  text += shape.rank() == 1 ? ",), }" : "), }";
  if (shape.rank() > 0) {
    text.append(kGrowthAxisMaxDigits - str_cat(shape[0]).size(), ' ');
  }
  return text;
}

// Magic, version 1.0, length and the padded header, as numpy/lib/format.py's
// _wrap_header. (2.0 exists for headers past 64 KiB, which a rank within
// kMaxRank never needs.)
std::string wrap_header(const std::string& dict) {
  constexpr uint64_t kPrefixLength = kMagic.size() + 2 + 2;
  const uint64_t unpadded = dict.size() + 1;  // The final '\n'.
  const uint64_t padding = kArrayAlign - (kPrefixLength + unpadded) % kArrayAlign;
  const uint64_t header_length = unpadded + padding;
  TANDEM_INTERNAL_ASSERT(header_length <= UINT16_MAX, "a .npy header of ", header_length, " bytes");
  std::string out(kMagic);
  out += std::string_view("\x01\x00", 2);
  append_le(out, static_cast<uint16_t>(header_length));
  out += dict;
  out.append(padding, ' ');
  out.push_back('\n');
  return out;
}

}  // namespace

void write_npy(const std::string& path, const Tensor& tensor) {
  const std::string cannot = str_cat("cannot write npy file '", path, "': ");
  TANDEM_CHECK(tensor.defined(), cannot, "the tensor is undefined");
  TANDEM_CHECK(tensor.device().is_cpu(), cannot, "the tensor is on ", tensor.device().to_string(),
               "; only CPU tensors can be saved");
  const NpyType* type = std::find_if(std::begin(kTypes), std::end(kTypes),
                                     [&](const NpyType& t) { return t.dtype == tensor.dtype(); });
  TANDEM_CHECK(type != std::end(kTypes), cannot, dtype_name(tensor.dtype()),
               " has no NumPy dtype; convert the tensor to float32 first");
  TANDEM_CHECK(tensor.rank() <= kMaxRank, cannot, "rank ", tensor.rank(),
               " exceeds NumPy's limit of ", kMaxRank);
  Tensor value = tensor.snapshot();  // A later assign_ cannot swap the bytes mid-write.
  value.wait_to_read();
  AtomicFile out(path);
  out.write(wrap_header(header_dict(type->descr, value.shape())));
  out.write(absl::MakeConstSpan(static_cast<const uint8_t*>(value.raw_data()), value.nbytes()));
  out.commit();
}

Tensor read_npy(const std::string& path) {
  const InputFile file(path);
  return read_from(file, path);
}

Tensor parse_npy(absl::Span<const uint8_t> bytes, std::string_view display_name) {
  return read_from(MemorySource(bytes), display_name);
}

}  // namespace tandem::serialization
