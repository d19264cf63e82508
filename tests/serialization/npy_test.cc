// NumPy .npy files (serialization/npy.h): byte-for-byte what np.save writes,
// what np.save and older NumPys wrote is read, every supported dtype
// round-trips, and every malformed header or data section is a tandem::Error
// naming the file, the byte offset and the problem.
#include "serialization/npy.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/error.h"
#include "tests/serialization/raw_file.h"
#include "tests/serialization/test_util.h"

namespace tandem::serialization {
namespace {

using ::tandem::testing::as_span;
using ::tandem::testing::expect_error;
using ::tandem::testing::expect_refused;
using ::tandem::testing::read_bytes;
using ::tandem::testing::ScratchDir;
using ::tandem::testing::write_bytes;
using ::testing::ElementsAre;

template <class T>
std::string bytes_of(std::vector<T> values) {
  return std::string(reinterpret_cast<const char*>(values.data()), sizeof(T) * values.size());
}

// Files exactly as NumPy writes them (numpy/lib/format.py): magic, version,
// little-endian header length, the dict, spaces (21 - digits of the leading
// dimension, left for it to grow, then padding to a multiple of 64 bytes),
// a newline, the data.
const std::string kPrefixV1 = std::string("\x93NUMPY\x01\x00", 8);

// np.save(f, np.arange(6, dtype=np.float32).reshape(2, 3))
std::string numpy_float32_2x3() {
  return kPrefixV1 + std::string("\x76\x00", 2) +
         "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }" + std::string(58, ' ') +
         "\n" + bytes_of<float>({0, 1, 2, 3, 4, 5});
}

// np.save(f, np.int64(-3))
std::string numpy_int64_scalar() {
  return kPrefixV1 + std::string("\x76\x00", 2) +
         "{'descr': '<i8', 'fortran_order': False, 'shape': (), }" + std::string(62, ' ') + "\n" +
         bytes_of<int64_t>({-3});
}

// np.save(f, np.array([True, False, False, True]))
std::string numpy_bool_4() {
  return kPrefixV1 + std::string("\x76\x00", 2) +
         "{'descr': '|b1', 'fortran_order': False, 'shape': (4,), }" + std::string(60, ' ') + "\n" +
         std::string("\x01\x00\x00\x01", 4);
}

// np.save(f, np.array([1.0, 2.0, -0.5], dtype='>f8')): big-endian doubles.
std::string numpy_big_endian_float64() {
  return kPrefixV1 + std::string("\x76\x00", 2) +
         "{'descr': '>f8', 'fortran_order': False, 'shape': (3,), }" + std::string(60, ' ') + "\n" +
         std::string("\x3f\xf0\0\0\0\0\0\0\x40\0\0\0\0\0\0\0\xbf\xe0\0\0\0\0\0\0", 24);
}

// NumPy before 1.23 (no growth spaces) and before 1.9 padded to 16 bytes.
std::string numpy_old_16_byte_aligned() {
  return kPrefixV1 + std::string("\x46\x00", 2) +
         "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }" + std::string(10, ' ') +
         "\n" + bytes_of<float>({0, 1, 2, 3, 4, 5});
}

// Format 2.0 (u32 header length), and 3.0 (the same with a UTF-8 header).
std::string numpy_version(char major) {
  return std::string("\x93NUMPY", 6) + major + std::string("\0\x74\0\0\0", 5) +
         "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }" + std::string(58, ' ') + "\n" +
         bytes_of<int32_t>({7, -8});
}

// A version 1.0 file of `dict` and `data`, padded as NumPy pads.
std::string npy_file(const std::string& dict, const std::string& data) {
  const size_t unpadded = 10 + dict.size() + 1;
  const size_t padding = 64 - unpadded % 64;
  const size_t header_length = dict.size() + padding + 1;
  return kPrefixV1 + static_cast<char>(header_length & 0xFF) +
         static_cast<char>(header_length >> 8) + dict + std::string(padding, ' ') + "\n" + data;
}

std::string dict_of(const std::string& descr, const std::string& shape) {
  return "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
}

class NpyTest : public ::testing::Test {
 protected:
  // Expects `bytes` to be refused, from a file and from memory.
  void expect_bad(const std::string& bytes, std::vector<std::string> parts) {
    const std::string path = dir_.file("bad.npy");
    parts.push_back("npy file '" + path + "': ");
    expect_refused(path, bytes, parts, read_npy, parse_npy);
  }
  Tensor parse(const std::string& bytes) { return parse_npy(as_span(bytes), "<buffer>"); }
  std::string written(const Tensor& t) {
    const std::string path = dir_.file("out.npy");
    write_npy(path, t);
    return read_bytes(path);
  }

  ScratchDir dir_;
};

// Verifies that the writer's bytes are np.save's.
TEST_F(NpyTest, WritesWhatNumPyWrites) {
  EXPECT_EQ(written(Tensor::from_vector<float>({0, 1, 2, 3, 4, 5}, {2, 3})), numpy_float32_2x3());
  EXPECT_EQ(written(Tensor::from_vector<int64_t>({-3}, {1}).reshape({})), numpy_int64_scalar());
  EXPECT_EQ(written(Tensor::from_vector<bool>({true, false, false, true}, {4})), numpy_bool_4());
}

// Verifies that files NumPy wrote, in every version and byte order, load.
TEST_F(NpyTest, ReadsWhatNumPyWrote) {
  Tensor t = parse(numpy_float32_2x3());
  EXPECT_EQ(t.shape(), Shape({2, 3}));
  EXPECT_THAT(t.to_vector<float>(), ElementsAre(0, 1, 2, 3, 4, 5));
  t = parse(numpy_int64_scalar());
  EXPECT_EQ(t.rank(), 0);
  EXPECT_EQ(t.item<int64_t>(), -3);
  EXPECT_EQ(parse(numpy_bool_4()).to_vector<bool>(), std::vector<bool>({true, false, false, true}));
  t = parse(numpy_big_endian_float64());
  EXPECT_EQ(t.dtype(), DType::kFloat64);
  EXPECT_THAT(t.to_vector<double>(), ElementsAre(1.0, 2.0, -0.5));
  EXPECT_THAT(parse(numpy_old_16_byte_aligned()).to_vector<float>(), ElementsAre(0, 1, 2, 3, 4, 5));
  EXPECT_THAT(parse(numpy_version(2)).to_vector<int32_t>(), ElementsAre(7, -8));
  EXPECT_THAT(parse(numpy_version(3)).to_vector<int32_t>(), ElementsAre(7, -8));
  // Hand-written headers: double quotes, no spaces, a trailing comma in the shape.
  t = parse(npy_file("{\"descr\":\"<i4\",\"fortran_order\":False,\"shape\":(2,1,),}",
                     bytes_of<int32_t>({5, 6})));
  EXPECT_EQ(t.shape(), Shape({2, 1}));
  EXPECT_THAT(
      parse(npy_file(dict_of(">i4", "(1,)"), std::string("\0\0\1\2", 4))).to_vector<int32_t>(),
      ElementsAre(0x0102));
  EXPECT_THAT(parse(npy_file(dict_of("<u1", "(1,)"), "\x07")).to_vector<uint8_t>(), ElementsAre(7));
}

// Verifies that every dtype NumPy shares, a scalar, a zero-size array and a
// view into a larger storage round-trip through a file.
TEST_F(NpyTest, RoundTripsEverySupportedDType) {
  Tensor matrix = Tensor::from_vector<int32_t>({1, 2, 3, 4, 5, 6}, {3, 2});
  const std::vector<Tensor> tensors = {
      Tensor::from_vector<float>({1.5f, -2, 3}, {3, 1}),
      Tensor::from_vector<double>({3.25, -1e300}, {2}),
      Tensor::from_vector<Half>({Half(1.0f), Half(-0.5f)}, {1, 2}),
      Tensor::from_vector<int32_t>({-7, 8}, {2}),
      Tensor::from_vector<int64_t>({int64_t{1} << 40}, {1}).reshape({}),
      Tensor::from_vector<uint8_t>({0, 255}, {2}),
      Tensor::from_vector<bool>({true, false}, {2}),
      Tensor::empty({0, 3}),
      matrix.slice(1, 3),
  };
  const std::string path = dir_.file("t.npy");
  for (const Tensor& want : tensors) {
    write_npy(path, want);
    const Tensor got = read_npy(path);
    EXPECT_EQ(got.shape(), want.shape());
    EXPECT_EQ(got.dtype(), want.dtype());
    EXPECT_EQ(std::string(static_cast<const char*>(got.raw_data()), got.nbytes()),
              std::string(static_cast<const char*>(want.raw_data()), want.nbytes()))
        << dtype_name(want.dtype()) << want.shape().to_string();
    EXPECT_EQ(read_bytes(path).size() % 64, want.nbytes() % 64);  // Data starts 64-aligned.
  }
}

// Verifies the writer's refusals, which leave the old file as it was.
TEST_F(NpyTest, WriterRefusals) {
  const std::string path = dir_.file("x.npy");
  write_bytes(path, "old");
  expect_error([&] { write_npy(path, Tensor::from_vector<BFloat16>({BFloat16(1.0f)}, {1})); },
               {"cannot write npy file '" + path + "'", "bfloat16 has no NumPy dtype",
                "convert the tensor to float32 first"});
  expect_error([&] { write_npy(path, Tensor()); }, {"the tensor is undefined"});
  expect_error([&] { write_npy(path, Tensor::empty(Shape(std::vector<int64_t>(65, 1)))); },
               {"rank 65 exceeds NumPy's limit of 64"});
  EXPECT_EQ(read_bytes(path), "old");
  expect_error([&] { write_npy(dir_.file("no/x.npy"), Tensor::empty({1})); },
               {"cannot write", "No such file or directory"});
}

// Verifies refusals of the prefix: empty, short, wrong magic, versions and
// header lengths.
TEST_F(NpyTest, BadPrefix) {
  expect_bad("", {"the file is empty", "byte offset 0"});
  expect_bad("\x93NUM", {"truncated: the header needs at least 10 bytes, file has 4"});
  expect_bad("PK\x03\x04 zip", {"not a .npy file: bad magic \"PK\\x03\\x04 z\"", "byte offset 0"});
  std::string bytes = numpy_float32_2x3();
  bytes[6] = 4;
  expect_bad(bytes, {".npy format version 4.0 is not supported", "byte offset 6"});
  bytes[6] = 1;
  bytes[7] = 1;
  expect_bad(bytes, {"version 1.1 is not supported"});
  expect_bad(numpy_version(2).substr(0, 11), {"truncated: the header needs bytes up to 12"});
  // 2.0 allows a u32 length: past NumPy's own 10000-byte limit, and past the end.
  bytes = numpy_version(2);
  bytes.replace(8, 4, std::string("\x11\x27\0\0", 4));
  expect_bad(bytes, {"the header length 10001 exceeds the limit of 10000 bytes", "byte offset 8"});
  bytes = numpy_float32_2x3();
  bytes[8] = 0x7F;
  bytes[9] = 0;
  bytes.resize(100);
  expect_bad(bytes, {"truncated: the header needs bytes up to 137, file has 100"});
}

// Verifies that the header dict is parsed strictly, each error at its byte.
TEST_F(NpyTest, BadHeaders) {
  const std::string f4 = bytes_of<float>({1});
  auto bad_dict = [&](const std::string& dict, std::vector<std::string> parts) {
    expect_bad(npy_file(dict, f4), std::move(parts));
  };
  bad_dict("{'descr': '<f4', 'fortran_order': True, 'shape': (1,), }",
           {"Fortran-order arrays are not supported", "np.save(path, np.ascontiguousarray(a))",
            "byte offset 44"});
  bad_dict("{'descr': '<i2', 'fortran_order': False, 'shape': (1,), }",
           {"header: dtype '<i2' is not supported", "'<f4', '<f8', '<f2', '<i4', '<i8', '|u1'",
            "byte offset 20"});
  bad_dict(dict_of("|f4", "(1,)"), {"dtype '|f4' is not supported"});
  bad_dict(dict_of("<c8", "(1,)"), {"dtype '<c8' is not supported"});
  bad_dict("{'descr': [('x', '<f4')], 'fortran_order': False, 'shape': (1,), }",
           {"structured arrays", "byte offset 20"});
  bad_dict("{'descr': '<f4', 'fortran_order': 0, 'shape': (1,), }",
           {"expected True or False for 'fortran_order', found \"0"});
  bad_dict("{'descr': '<f4', 'fortran_order': False}", {"the header has no 'shape' key"});
  bad_dict("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,), }",
           {"the key 'descr' appears twice", "byte offset 27"});
  bad_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'extra': 1, }",
           {"unexpected key 'extra'"});
  bad_dict(dict_of("<f4", "(1)"), {"expected ',' after the only dimension"});
  bad_dict(dict_of("<f4", "[1]"), {"expected a tuple for 'shape', found \"[1]"});
  bad_dict(dict_of("<f4", "(1, -1)"), {"negative dimension in 'shape'"});
  bad_dict(dict_of("<f4", "(99999999999999999999,)"), {"a dimension in 'shape' overflows int64"});
  bad_dict(dict_of("<f4", "(4294967296, 4294967296)"),
           {"the element count of shape [4294967296, 4294967296] overflows int64"});
  bad_dict(dict_of("<f4", "(1, 2 3)"), {"expected ',' or ')' in 'shape'"});
  std::string rank_65 = "(";
  for (int i = 0; i < 65; ++i) rank_65 += "1,";
  bad_dict(dict_of("<f4", rank_65 + ")"), {"rank exceeds the limit of 64"});
  bad_dict("{'descr': '<f\\x34', 'fortran_order': False, 'shape': (1,), }",
           {"unsupported character in string"});
  bad_dict("{'descr' '<f4', 'fortran_order': False, 'shape': (1,), }",
           {"expected ':' after the key, found \"'<f4'", "byte offset 19"});
  bad_dict("{'descr", {"unterminated string", "byte offset 11"});
  bad_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), } x",
           {"expected only spaces and a final newline after the header dict"});
  bad_dict("('descr', '<f4')", {"expected '{' opening the header dict"});
  bad_dict("{\xff: 1}", {"expected a key, found \"\\xff: 1}", "byte offset 11"});
  // The header must end in a newline.
  std::string bytes = numpy_float32_2x3();
  bytes[127] = ' ';
  expect_bad(bytes, {"expected only spaces and a final newline", "byte offset 128"});
}

// Verifies that the data must fill the file exactly, and that bool bytes are
// 0 or 1.
TEST_F(NpyTest, BadData) {
  const std::string good = numpy_float32_2x3();
  expect_bad(
      good.substr(0, good.size() - 1),
      {"truncated: shape [2, 3] float32 needs bytes up to 152, file has 151", "byte offset 128"});
  expect_bad(good + "x", {"trailing bytes: the data ends at byte 152, the file has 153 bytes",
                          "byte offset 152"});
  std::string bools = numpy_bool_4();
  bools[130] = 2;
  expect_bad(bools, {"bool element 2 has the byte value 2, expected 0 or 1", "byte offset 130"});
}

// Verifies that every cut of a valid file is an error, never a crash.
TEST_F(NpyTest, EveryTruncationIsAnError) {
  for (const std::string& good : {numpy_float32_2x3(), numpy_int64_scalar(), numpy_version(3)}) {
    for (size_t n = 0; n < good.size(); ++n) {
      EXPECT_THROW(parse(good.substr(0, n)), Error) << "cut at " << n;
    }
  }
}

}  // namespace
}  // namespace tandem::serialization
