// The params file (serialization/params.h): the writer produces exactly the
// layout of serialization/FORMAT.md, every dtype and shape round-trips, and
// every malformed file is a tandem::Error naming
// the file, the byte offset and the problem, from the file and from memory.
#include "serialization/params.h"

#include <sys/mman.h>
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
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

// ---- A second, independent encoder of the documented layout ----

std::string le(uint64_t value, int bytes) {
  std::string out;
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>(value >> (8 * i)));
  return out;
}

uint32_t crc(const std::string& bytes) {
  return static_cast<uint32_t>(
      crc32(0, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(bytes.size())));
}

std::string hex(uint32_t value) {
  char text[16];
  std::snprintf(text, sizeof(text), "0x%08x", value);
  return text;
}

// One index entry and its data; the optional fields override what the
// layout rules would put there.
struct RawEntry {
  std::string name;
  uint8_t dtype = 0;  // float32
  std::vector<uint64_t> dims;
  std::string data;
  std::optional<uint64_t> offset, length;
  std::optional<uint32_t> crc32;
};

RawEntry raw_entry(std::string name, std::vector<uint64_t> dims, std::string data) {
  RawEntry entry;
  entry.name = std::move(name);
  entry.dims = std::move(dims);
  entry.data = std::move(data);
  return entry;
}

struct RawFile {
  std::string magic = "\x89TNDPRM\n";
  uint16_t major = 1, minor = 0;
  uint32_t byte_order = 0x01020304;
  std::optional<uint64_t> count, index_length;
  std::vector<RawEntry> entries;
  std::string index_extra;  // Appended to the index.
  std::string trailer;      // Appended to the file.
};

// The bytes of `file`, with a correct header checksum unless the fields are
// inconsistent on purpose (the checksum always covers what is written).
std::string encode(const RawFile& file) {
  std::string index;
  uint64_t end = 0;
  std::vector<uint64_t> data_at;
  for (const RawEntry& e : file.entries) {
    index += le(e.name.size(), 4) + e.name + le(e.dtype, 1) + le(e.dims.size(), 1);
    for (uint64_t d : e.dims) index += le(d, 8);
    index +=
        "OFFSET__" + le(e.length.value_or(e.data.size()), 8) + le(e.crc32.value_or(crc(e.data)), 4);
  }
  index += file.index_extra;
  end = 36 + index.size();
  // Offsets follow the rules: each tensor at the next multiple of 64.
  size_t cursor = 0;
  for (const RawEntry& e : file.entries) {
    const uint64_t at = (end + 63) / 64 * 64;
    data_at.push_back(at);
    cursor = index.find("OFFSET__", cursor);
    index.replace(cursor, 8, le(e.offset.value_or(at), 8));
    end = at + e.data.size();
  }
  std::string head = file.magic + le(file.major, 2) + le(file.minor, 2) + le(file.byte_order, 4) +
                     le(file.count.value_or(file.entries.size()), 8) +
                     le(file.index_length.value_or(index.size()), 8);
  std::string out = head + le(crc(head + index), 4) + index;
  for (size_t i = 0; i < file.entries.size(); ++i) {
    out.resize(data_at[i], '\0');
    out += file.entries[i].data;
  }
  return out + file.trailer;
}

std::string floats(std::vector<float> values) {
  return std::string(reinterpret_cast<const char*>(values.data()), 4 * values.size());
}

// One float32 tensor "w" of shape [2] holding {1, 2}: FORMAT.md's example.
RawFile example() {
  RawFile file;
  file.entries.push_back(raw_entry("w", {2}, floats({1, 2})));
  return file;
}

// Three tensors, among them a zero-size one and a scalar.
std::vector<NamedTensor> three_tensors() {
  return {{"layer.weight", Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3})},
          {"empty", Tensor::empty({0, 5})},
          {"step", Tensor::from_vector<int64_t>({42}, {1}).reshape({})}};
}

class ParamsTest : public ::testing::Test {
 protected:
  // Expects `bytes` to be refused, from a file and from memory, with a
  // message holding every part and naming the file.
  void expect_bad(const std::string& bytes, std::vector<std::string> parts) {
    const std::string path = dir_.file("bad.params");
    parts.push_back("params file '" + path + "': ");
    expect_refused(
        path, bytes, parts, [](const std::string& p) { return read_params(p); }, parse_params);
  }
  ParamsFile parse(const std::string& bytes) { return parse_params(as_span(bytes), "<buffer>"); }
  // The file write_params makes of `tensors`.
  std::string written(absl::Span<const NamedTensor> tensors) {
    const std::string path = dir_.file("written.params");
    write_params(path, tensors);
    return read_bytes(path);
  }

  ScratchDir dir_;
};

// ---- Layout and round trips ----

// Verifies that the writer produces FORMAT.md's example byte for byte, and
// that the documented offsets hold.
TEST_F(ParamsTest, FileLayoutIsAsDocumented) {
  const std::string bytes = written({{"w", Tensor::from_vector<float>({1, 2}, {2})}});
  EXPECT_EQ(bytes, encode(example()));
  EXPECT_EQ(bytes.size(), 136u);
  EXPECT_EQ(bytes.substr(0, 8), "\x89TNDPRM\n");
  EXPECT_EQ(bytes.substr(24, 8), le(35, 8));   // Index length.
  EXPECT_EQ(bytes.substr(51, 8), le(128, 8));  // The tensor's offset.
  EXPECT_EQ(bytes.substr(128), floats({1, 2}));
}

// Verifies that every dtype, a scalar, a zero-size tensor and views at an
// offset into their storage round-trip, and that the index is returned.
TEST_F(ParamsTest, RoundTripsEveryDTypeAndShape) {
  Tensor matrix = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {3, 2});
  const std::vector<NamedTensor> tensors = {
      {"f32", Tensor::from_vector<float>({1.5f, -2}, {2})},
      {"f64", Tensor::from_vector<double>({3.25}, {1, 1})},
      {"f16", Tensor::from_vector<Half>({Half(1.0f), Half(-0.5f)}, {2})},
      {"bf16", Tensor::from_vector<BFloat16>({BFloat16(2.0f)}, {1})},
      {"i32", Tensor::from_vector<int32_t>({-7, 8, 9}, {3})},
      {"i64", Tensor::from_vector<int64_t>({1LL << 40}, {1}).reshape({})},
      {"u8", Tensor::from_vector<uint8_t>({0, 255}, {2, 1})},
      {"bool", Tensor::from_vector<bool>({true, false, true}, {3})},
      {"empty", Tensor::empty({0, 5})},
      {"row", matrix[1]},                                       // A view 8 bytes into its storage.
      {"rows", matrix.slice(1, 3)},                             // A view of rows 1 and 2.
      {"caf\xc3\xa9.w", Tensor::from_vector<float>({7}, {1})},  // UTF-8 names are fine.
  };
  const std::string path = dir_.file("all.params");
  const std::vector<ParamsEntry> entries = write_params(path, tensors);
  const ParamsFile back = read_params(path);
  EXPECT_EQ(back.entries, entries);
  ASSERT_EQ(back.tensors.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& want = tensors[i].tensor;
    const Tensor& got = back.tensors[i].tensor;
    EXPECT_EQ(back.tensors[i].name, tensors[i].name);
    EXPECT_EQ(got.shape(), want.shape()) << tensors[i].name;
    EXPECT_EQ(got.dtype(), want.dtype()) << tensors[i].name;
    EXPECT_TRUE(got.device().is_cpu());
    EXPECT_EQ(std::string(static_cast<const char*>(got.raw_data()), got.nbytes()),
              std::string(static_cast<const char*>(want.raw_data()), want.nbytes()))
        << tensors[i].name;
    EXPECT_EQ(entries[i].offset % 64, 0u);
    EXPECT_EQ(entries[i].length, want.nbytes());
  }
  EXPECT_THAT(back.tensors[9].tensor.to_vector<float>(), ElementsAre(3, 4));
  EXPECT_THAT(back.tensors[10].tensor.to_vector<float>(), ElementsAre(3, 4, 5, 6));
  // The same bytes from memory give the same result.
  EXPECT_EQ(parse(read_bytes(path)).entries, entries);
}

// Verifies that writing is deterministic and that an empty file round-trips.
TEST_F(ParamsTest, DeterministicAndEmpty) {
  EXPECT_EQ(written(three_tensors()), written(three_tensors()));
  const std::string empty = written({});
  EXPECT_EQ(empty.size(), 36u);  // The header alone.
  EXPECT_TRUE(parse(empty).tensors.empty());
}

// Verifies that a newer minor version is read (it only adds what may be
// ignored), while another major version is not.
TEST_F(ParamsTest, Versions) {
  RawFile file = example();
  file.minor = 7;
  EXPECT_THAT(parse(encode(file)).tensors.at(0).tensor.to_vector<float>(), ElementsAre(1, 2));
  file.major = 2;
  expect_bad(encode(file),
             {"params format version 2.7 is not supported", "newer Tandem", "byte offset 8"});
  file.major = 0;
  expect_bad(encode(file), {"params format version 0.7 is not supported", "byte offset 8"});
}

// ---- The writer's refusals ----

// Verifies that bad names and tensors are refused before any file exists,
// and that a refused save leaves the old file byte for byte.
TEST_F(ParamsTest, WriterRefusesBadInput) {
  const std::string path = dir_.file("out.params");
  write_bytes(path, "old contents");
  const Tensor x = Tensor::from_vector<float>({1}, {1});
  auto refuse = [&](std::vector<NamedTensor> tensors, std::vector<std::string> parts) {
    parts.push_back("cannot write params file '" + path + "'");
    expect_error([&] { write_params(path, tensors); }, parts);
  };
  refuse({{"a", x}, {"a", x}}, {"two tensors are named 'a'"});
  refuse({{"", x}}, {"the tensor name \"\" is empty"});
  refuse({{"a\nb", x}}, {"contains the control character U+000A (at byte 1)"});
  refuse({{"\xff", x}}, {"is not valid UTF-8 (at byte 0)"});
  refuse({{std::string(4097, 'n'), x}}, {"is 4097 bytes long, more than 4096"});
  refuse({{"u", Tensor()}}, {"tensor 'u' is undefined"});
  refuse({{"r", Tensor::empty(Shape(std::vector<int64_t>(33, 1)))}},
         {"tensor 'r' has rank 33, more than the format's limit of 32"});
  EXPECT_EQ(read_bytes(path), "old contents");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_.path()),
                          std::filesystem::directory_iterator()),
            1);
  expect_error([&] { write_params(dir_.file("missing/x.params"), {}); },
               {"cannot write '" + dir_.file("missing/x.params") + "'", "No such file"});
  expect_error([&] { read_params(dir_.file("none.params")); },
               {"cannot open '" + dir_.file("none.params") + "'", "No such file"});
}

// ---- Malformed files, one rule each (docs/security.md) ----

// Verifies P02/P01: empty and short files.
TEST_F(ParamsTest, EmptyAndShortFiles) {
  expect_bad("", {"the file is empty", "byte offset 0"});
  expect_bad("\x89TNDP",
             {"truncated: the header needs bytes up to 36, file has 5", "byte offset 5"});
  expect_bad(encode(example()).substr(0, 35), {"file has 35"});
}

// Verifies P03: a wrong file is named by what it looks like.
TEST_F(ParamsTest, BadMagicRecognisesForeignFiles) {
  const std::string rest = encode(example()).substr(8);
  expect_bad("PK\x03\x04" + rest, {"not a Tandem params file",
                                   "a zip archive, such as a PyTorch "
                                   "checkpoint",
                                   "expected \"\\x89TNDPRM\\n\"", "byte offset 0"});
  expect_bad("{\"graph\": {}}", {"JSON text, such as a Tandem graph file"});
  expect_bad("TNDMSD01" + rest, {"old TNDMSD01 format"});
  expect_bad("\x93NUMPY\x01\x00", {"a NumPy .npy file"});
  expect_bad("GIF89a", {"bad magic \"GIF89a\"", "expected"});
}

// Verifies P21: a big-endian file, and a damaged byte-order mark.
TEST_F(ParamsTest, ByteOrderMark) {
  RawFile file = example();
  file.byte_order = 0x04030201;
  expect_bad(encode(file), {"big-endian params file not supported", "byte offset 12"});
  file.byte_order = 0x01020305;
  expect_bad(encode(file), {"bad byte-order mark 0x01020305, expected 0x01020304"});
}

// Verifies P05/P14: counts and lengths are checked against the file's size
// before anything is allocated: a 100-byte file declaring 2^40 tensors fails
// at once, as do index lengths past the end or past the cap.
TEST_F(ParamsTest, CountAndLengthBombs) {
  RawFile file = example();
  file.count = uint64_t{1} << 40;
  std::string bomb = encode(file);
  bomb.resize(100);  // Still a consistent index length: 100 - 36 bytes.
  bomb.replace(24, 8, le(64, 8));
  expect_bad(bomb, {"the tensor count 1099511627776 cannot fit in an index of 64 bytes",
                    "byte offset 16"});
  file.count.reset();
  file.index_length = ~uint64_t{0};
  expect_bad(encode(file), {"truncated: the index length 18446744073709551615 exceeds the 100 "
                            "bytes after the header",
                            "byte offset 24"});
  file.index_length = 34;  // One byte less than the entry.
  expect_bad(encode(file), {"index entry 0: its checksum runs past the end of the index at byte 70",
                            "byte offset 67"});

  // Past the 256 MiB cap: an image that big is mapped, never touched beyond
  // its header, so the test costs no memory.
  const size_t size = (size_t{256} << 20) + 4096;
  void* image = mmap(nullptr, size, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(image, MAP_FAILED);
  RawFile huge;
  huge.index_length = size - 36;
  const std::string head = encode(huge).substr(0, 36);
  std::memcpy(image, head.data(), head.size());
  expect_error(
      [&] {
        parse_params({static_cast<const uint8_t*>(image), size}, "<huge>");
      },
      {"params file '<huge>': the index length 268439516 exceeds the limit of 268435456",
       "byte offset 24"});
  munmap(image, size);
}

// Verifies P14/P06: name lengths and names.
TEST_F(ParamsTest, BadNames) {
  RawFile file = example();
  std::string bytes = encode(file);
  bytes.replace(36, 4, le(0, 4));
  expect_bad(bytes, {"index entry 0: name length 0, expected 1..4096", "byte offset 36"});
  bytes.replace(36, 4, le(uint64_t{1} << 31, 4));
  expect_bad(bytes, {"name length 2147483648", "byte offset 36"});
  bytes.replace(36, 4, le(500, 4));
  expect_bad(bytes, {"index entry 0: its name runs past the end of the index at byte 71",
                     "byte offset 40"});
  const std::vector<std::pair<std::string, std::string>> bad_names = {
      {"\xff", "is not valid UTF-8 (at byte 0)"},
      {"a\xc0\x80", "is not valid UTF-8 (at byte 1)"},  // Overlong NUL.
      {"\xed\xa0\x80", "is not valid UTF-8"},           // A surrogate.
      {"\xf4\x90\x80\x80", "is not valid UTF-8"},       // Above U+10FFFF.
      {"w\xc3", "is not valid UTF-8 (at byte 1)"},      // Cut short.
      {"a\tb", "contains the control character U+0009 (at byte 1)"},
      {"x\x7f", "U+007F"},
      {"\xc2\x85", "U+0085"},  // C1 "next line".
  };
  for (const auto& [name, problem] : bad_names) {
    file.entries[0].name = name;
    expect_bad(encode(file), {"index entry 0: the tensor name", problem, "byte offset 40"});
  }
}

// Verifies P15: duplicate names are named as such.
TEST_F(ParamsTest, DuplicateNames) {
  RawFile file = example();
  file.entries.push_back(file.entries[0]);
  expect_bad(encode(file), {"duplicate tensor name 'w' (index entries 0 and 1)", "byte offset 75"});
}

// Verifies P07/P13/P12: dtype codes, ranks, dims and size arithmetic.
TEST_F(ParamsTest, BadDTypesRanksAndShapes) {
  RawFile file = example();
  file.entries[0].dtype = 8;
  expect_bad(encode(file), {"tensor 'w': unknown dtype code 8", "byte offset 41"});
  file.entries[0].dtype = 255;
  expect_bad(encode(file), {"unknown dtype code 255"});
  file.entries[0].dtype = 0;

  file.entries[0].dims.assign(33, 1);
  expect_bad(encode(file), {"tensor 'w': rank 33 exceeds the limit of 32", "byte offset 42"});
  auto shape_error = [&](std::vector<uint64_t> dims, uint8_t dtype, std::string problem) {
    file.entries[0].dims = std::move(dims);
    file.entries[0].dtype = dtype;
    expect_bad(encode(file), {"tensor 'w': " + problem, "byte offset 43"});
  };
  shape_error({~uint64_t{0}, 4}, 0, "negative dimension -1 in shape [-1, 4]");
  shape_error({4, uint64_t{1} << 63}, 0, "negative dimension -9223372036854775808");
  shape_error({uint64_t{1} << 32, uint64_t{1} << 32}, 0,
              "the element count of shape [4294967296, 4294967296] overflows int64");
  shape_error({0, uint64_t{1} << 62, 4}, 0, "the element count of shape [0, ");  // Empty, yet.
  shape_error({uint64_t{1} << 62}, 1,
              "the byte length of shape [4611686018427387904] float64 overflows int64");
}

// Verifies P11: the length must be numel * dtype size exactly.
TEST_F(ParamsTest, LengthMustMatchShape) {
  RawFile file = example();
  file.entries[0].length = 12;
  expect_bad(encode(file),
             {"tensor 'w': shape [2] float32 needs 8 bytes, the index says 12", "byte offset 59"});
}

// Verifies P17/P08/P09/P10: offsets are aligned, in order, and leave
// neither overlaps nor holes.
TEST_F(ParamsTest, OffsetsAlignedInOrderWithoutHolesOrOverlaps) {
  RawFile file = example();
  file.entries[0].offset = 130;
  expect_bad(encode(file),
             {"tensor 'w': data offset 130 is not a multiple of 64", "byte offset 51"});
  file.entries[0].offset = 64;
  expect_bad(encode(file), {"data offset 64 overlaps the index, which ends at byte 71 (expected "
                            "offset 128)"});
  file.entries[0].offset = 192;
  expect_bad(encode(file), {"data offset 192 leaves a hole after the index: bytes [71, 192) "
                            "unused (expected offset 128)"});
  file.entries[0].offset = ~uint64_t{0};
  expect_bad(encode(file), {"data offset 18446744073709551615 is not a multiple of 64"});
  file.entries[0].offset = ~uint64_t{0} - 63;
  expect_bad(encode(file), {"data offset 18446744073709551552 leaves a hole"});

  // Two tensors at one place (aliasing), and in the wrong order.
  file = example();
  file.entries.push_back(raw_entry("v", {2}, floats({3, 4})));
  const std::string good = encode(file);
  const uint64_t second_offset_at = 71 + 35 - 20;
  ASSERT_EQ(good.substr(second_offset_at, 8), le(192, 8));
  file.entries[1].offset = 128;
  expect_bad(encode(file), {"tensor 'v': data offset 128 overlaps tensor 'w', which ends at byte "
                            "136",
                            "byte offset 86"});
  file.entries[0].offset = 192;
  expect_bad(encode(file), {"tensor 'w': data offset 192 leaves a hole after the index"});
}

// Verifies P10/P01: padding is zero, truncation says where the data ends, and
// nothing follows the last tensor.
TEST_F(ParamsTest, PaddingTruncationAndTrailingBytes) {
  const std::string good = encode(example());
  std::string bytes = good;
  bytes[100] = 1;
  expect_bad(bytes, {"non-zero padding byte 0x01 before tensor 'w'", "byte offset 100"});
  expect_bad(good.substr(0, 132),
             {"truncated: tensor 'w' needs bytes up to 136, file has 132", "byte offset 128"});
  expect_bad(good + "x", {"trailing bytes: the data ends at byte 136, the file has 137 bytes",
                          "byte offset 136"});
  expect_bad(good + "PK\x03\x04 a polyglot", {"trailing bytes"});
  RawFile file = example();
  file.index_extra = std::string(8, '\0');
  expect_bad(encode(file), {"the index has 8 unused bytes after its last entry", "byte offset 71"});
  RawFile none;
  none.trailer = "x";
  expect_bad(encode(none), {"trailing bytes: the data ends at byte 36", "byte offset 36"});
}

// Verifies P18: a flipped bit in a tensor or in the header and index is
// caught by its checksum, which the message quotes.
TEST_F(ParamsTest, ChecksumMismatch) {
  std::string bytes = encode(example());
  bytes[129] ^= 0x10;
  const uint32_t stored = crc(floats({1, 2}));
  const uint32_t computed = crc(bytes.substr(128));
  expect_bad(bytes, {"tensor 'w': checksum mismatch (stored crc32 " + hex(stored) + ", computed " +
                         hex(computed) + "); the file is corrupt",
                     "byte offset 128"});
  bytes = encode(example());
  bytes[10] = 1;  // The minor version: valid, but not what was written.
  expect_bad(bytes, {"header checksum mismatch (stored crc32 0x", "byte offset 32"});
  RawFile zero_size;
  zero_size.entries.push_back(raw_entry("z", {0, 5}, ""));
  zero_size.entries[0].crc32 = 1;
  expect_bad(encode(zero_size), {"tensor 'z': checksum mismatch (stored crc32 0x00000001, "
                                 "computed 0x00000000)"});
}

// Verifies that a bool tensor's bytes are 0 or 1, even with a matching CRC:
// any other byte would be a bool with an undefined value.
TEST_F(ParamsTest, BoolBytesAreZeroOrOne) {
  RawFile file;
  file.entries.push_back(raw_entry("b", {2}, std::string("\x01\x02", 2)));
  file.entries[0].dtype = 7;
  expect_bad(encode(file), {"tensor 'b': bool element 1 has the byte value 2, expected 0 or 1",
                            "byte offset 129"});
}

// Verifies P01 and P18 exhaustively on a small file with a zero-size tensor
// and a scalar: every cut and every single-bit flip is a tandem::Error.
TEST_F(ParamsTest, EveryTruncationAndEveryBitFlipIsAnError) {
  const std::string good = written(three_tensors());
  ASSERT_EQ(parse(good).tensors.size(), 3u);
  for (size_t n = 0; n < good.size(); ++n) {
    EXPECT_THROW(parse(good.substr(0, n)), Error) << "cut at " << n;
  }
  for (size_t i = 0; i < good.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string bytes = good;
      bytes[i] = static_cast<char>(bytes[i] ^ (1 << bit));
      EXPECT_THROW(parse(bytes), Error) << "bit " << bit << " of byte " << i;
    }
  }
}

// Verifies P16: zero-size and scalar tensors load with their shapes.
TEST_F(ParamsTest, ZeroSizeAndScalarTensors) {
  const ParamsFile back = parse(written(three_tensors()));
  EXPECT_EQ(back.tensors[1].tensor.shape(), Shape({0, 5}));
  EXPECT_EQ(back.entries[1].length, 0u);
  EXPECT_EQ(back.tensors[2].tensor.shape(), Shape{});
  EXPECT_EQ(back.tensors[2].tensor.item<int64_t>(), 42);
  EXPECT_THAT(back.tensors[0].tensor.to_vector<float>(), ElementsAre(1, 2, 3, 4, 5, 6));
}

}  // namespace
}  // namespace tandem::serialization
