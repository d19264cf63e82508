// Tests of eager/data: read_idx on good and bad files, Fashion-MNIST loading,
// and DataLoader batching, ordering, threading and failure handling.
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/error.h"
#include "core/tensor.h"
#include "eager/data/dataloader.h"
#include "eager/data/idx.h"
#include "tests/error_of.h"
#include "tests/scoped_env.h"
#include "tests/serialization/test_util.h"

namespace tandem::data {
namespace {

using tandem::testing::error_of;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

using Bytes = std::vector<uint8_t>;

// ---------------------------------------------------------------------------
// Helpers: building IDX bytes, writing files, catching errors.
// ---------------------------------------------------------------------------

void append_be32(Bytes& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(v >> shift));
}

void append_be64(Bytes& out, uint64_t v) {
  append_be32(out, static_cast<uint32_t>(v >> 32));
  append_be32(out, static_cast<uint32_t>(v));
}

Bytes idx_header(uint8_t type, std::initializer_list<uint32_t> dims) {
  Bytes out = {0, 0, type, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) append_be32(out, d);
  return out;
}

// A file name under the test temp dir, unique to the running test.
std::string temp_path(std::string_view name) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return str_cat(::testing::TempDir(), "tandem_data_", info->name(), "_", ::getpid(), "_", name);
}

std::string write_plain(std::string_view name, const Bytes& bytes) {
  std::string path = temp_path(name);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  EXPECT_TRUE(out.good()) << path;
  return path;
}

// Gzip-compresses `bytes` into one gzip member (via zlib's gz* API).
Bytes gzip_bytes(const Bytes& bytes) {
  std::string path = temp_path("scratch.gz");
  gzFile gz = gzopen(path.c_str(), "wb");
  EXPECT_NE(gz, nullptr);
  if (!bytes.empty()) {
    EXPECT_EQ(gzwrite(gz, bytes.data(), static_cast<unsigned>(bytes.size())),
              static_cast<int>(bytes.size()));
  }
  EXPECT_EQ(gzclose(gz), Z_OK);
  std::ifstream in(path, std::ios::binary);
  Bytes out((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::remove(path.c_str());
  return out;
}

std::string write_gzip(std::string_view name, const Bytes& bytes) {
  return write_plain(name, gzip_bytes(bytes));
}

Bytes concat(Bytes a, const Bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// read_idx(path) must fail with a message naming the file and each of `parts`.
void expect_idx_error(const std::string& path, std::initializer_list<std::string_view> parts) {
  std::string what = error_of([&] { read_idx(path); });
  EXPECT_THAT(what, HasSubstr(path));
  EXPECT_THAT(what, HasSubstr("read_idx"));
  for (std::string_view part : parts) EXPECT_THAT(what, HasSubstr(std::string(part)));
}

Bytes counting_bytes(size_t n) {
  Bytes out(n);
  uint32_t x = 12345;
  for (auto& b : out) {
    x = x * 1103515245u + 12345u;
    b = static_cast<uint8_t>(x >> 16);
  }
  return out;
}

// ---------------------------------------------------------------------------
// read_idx: valid files
// ---------------------------------------------------------------------------

// Verifies that a plain uint8 file reads with its shape, dtype and values.
TEST(ReadIdxTest, PlainUint8) {
  Bytes bytes = concat(idx_header(0x08, {2, 3}), {0, 1, 2, 3, 128, 255});
  Tensor t = read_idx(write_plain("u8.idx", bytes));
  EXPECT_EQ(t.dtype(), DType::kUInt8);
  EXPECT_EQ(t.shape(), Shape({2, 3}));
  EXPECT_THAT(t.to_vector<uint8_t>(), ElementsAre(0, 1, 2, 3, 128, 255));
}

// Verifies that gzipped files are detected and decompressed.
TEST(ReadIdxTest, GzipUint8) {
  Bytes data = counting_bytes(3 * 5 * 7);
  Tensor t = read_idx(write_gzip("u8.idx.gz", concat(idx_header(0x08, {3, 5, 7}), data)));
  EXPECT_EQ(t.shape(), Shape({3, 5, 7}));
  EXPECT_EQ(t.to_vector<uint8_t>(), data);
}

// Verifies that int32 elements are read big-endian, in plain and gzip files.
TEST(ReadIdxTest, Int32BigEndian) {
  Bytes bytes = idx_header(0x0C, {4});
  for (int32_t v : {1, -2, 0x01020304, std::numeric_limits<int32_t>::min()}) {
    append_be32(bytes, static_cast<uint32_t>(v));
  }
  for (const std::string& path : {write_plain("i32.idx", bytes), write_gzip("i32.idx.gz", bytes)}) {
    Tensor t = read_idx(path);
    EXPECT_EQ(t.dtype(), DType::kInt32);
    EXPECT_EQ(t.shape(), Shape({4}));
    EXPECT_THAT(t.to_vector<int32_t>(),
                ElementsAre(1, -2, 0x01020304, std::numeric_limits<int32_t>::min()));
  }
}

// Verifies float32 and float64 elements, bit for bit.
TEST(ReadIdxTest, Float32AndFloat64) {
  const float f32[] = {1.5f, -0.25f, 3.0e38f, std::numeric_limits<float>::infinity()};
  Bytes bytes = idx_header(0x0D, {2, 2});
  for (float f : f32) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    append_be32(bytes, bits);
  }
  Tensor t = read_idx(write_plain("f32.idx", bytes));
  EXPECT_EQ(t.dtype(), DType::kFloat32);
  EXPECT_EQ(t.shape(), Shape({2, 2}));
  EXPECT_THAT(t.to_vector<float>(), ElementsAre(f32[0], f32[1], f32[2], f32[3]));

  Bytes bytes64 = idx_header(0x0E, {2});
  for (double d : {0.1, -1e300}) {
    uint64_t bits;
    std::memcpy(&bits, &d, 8);
    append_be64(bytes64, bits);
  }
  Tensor t64 = read_idx(write_gzip("f64.idx.gz", bytes64));
  EXPECT_EQ(t64.dtype(), DType::kFloat64);
  EXPECT_THAT(t64.to_vector<double>(), ElementsAre(0.1, -1e300));
}

// Verifies that int8 and int16 widen to int32 with their sign.
TEST(ReadIdxTest, Int8AndInt16WidenToInt32) {
  Tensor i8 = read_idx(write_plain("i8.idx", concat(idx_header(0x09, {3}), {0xFF, 0x7F, 0x80})));
  EXPECT_EQ(i8.dtype(), DType::kInt32);
  EXPECT_THAT(i8.to_vector<int32_t>(), ElementsAre(-1, 127, -128));

  Bytes bytes = concat(idx_header(0x0B, {3}), {0xFE, 0xD4, 0x7F, 0xFF, 0x80, 0x00});
  Tensor i16 = read_idx(write_plain("i16.idx", bytes));
  EXPECT_EQ(i16.dtype(), DType::kInt32);
  EXPECT_THAT(i16.to_vector<int32_t>(), ElementsAre(-300, 32767, -32768));
}

// Verifies that a zero dimension gives an empty tensor.
TEST(ReadIdxTest, ZeroDimensionIsEmpty) {
  Tensor t = read_idx(write_plain("empty.idx", idx_header(0x08, {0, 28, 28})));
  EXPECT_EQ(t.shape(), Shape({0, 28, 28}));
  EXPECT_EQ(t.numel(), 0);
  Tensor g = read_idx(write_gzip("empty.idx.gz", idx_header(0x0D, {5, 0})));
  EXPECT_EQ(g.shape(), Shape({5, 0}));
}

// Verifies that concatenated gzip members read as one stream, as gzip(1) does.
TEST(ReadIdxTest, MultiMemberGzip) {
  Bytes file = concat(gzip_bytes(idx_header(0x08, {4})), gzip_bytes({9, 8, 7, 6}));
  Tensor t = read_idx(write_plain("multi.idx.gz", file));
  EXPECT_THAT(t.to_vector<uint8_t>(), ElementsAre(9, 8, 7, 6));
}

// ---------------------------------------------------------------------------
// read_idx: bad files (see Note [Untrusted IDX bytes])
// ---------------------------------------------------------------------------

// Verifies that a missing file is named, with the system's reason.
TEST(ReadIdxBadFileTest, MissingFile) {
  expect_idx_error(temp_path("does-not-exist.idx"), {"cannot open", "No such file"});
}

// Verifies that a missing file under the package's folder says how to install it.
TEST(ReadIdxBadFileTest, MissingPackageFileSuggestsInstall) {
  std::string path = str_cat(kFashionMnistPackageDir, "/no-such-file-idx1-ubyte.gz");
  expect_idx_error(path, {"cannot open", "dataset-fashion-mnist", "tools/tandem.sh deps"});
}

// Verifies that directories and FIFOs are refused (a FIFO must not hang).
TEST(ReadIdxBadFileTest, NotARegularFile) {
  const tandem::testing::ScratchDir scratch;
  expect_idx_error(scratch.path().string(), {"not a regular file", "directory"});

  std::string fifo = temp_path("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_idx_error(fifo, {"not a regular file"});
  ::unlink(fifo.c_str());
}

// Verifies that a path with a NUL byte is refused rather than truncated.
TEST(ReadIdxBadFileTest, NulInPath) {
  std::string path = temp_path("a.idx");
  write_plain("a.idx", idx_header(0x08, {0}));
  std::string bad = path + std::string(1, '\0') + ".txt";
  std::string what = error_of([&] { read_idx(bad); });
  EXPECT_THAT(what, HasSubstr("a.idx\\0.txt\" contains a NUL byte"));
}

// Verifies that empty files and headers cut short name the missing field and offset.
TEST(ReadIdxBadFileTest, TruncatedHeader) {
  expect_idx_error(write_plain("empty.idx", {}), {"truncated header", "magic", "byte offset 0"});
  expect_idx_error(write_plain("short.idx", {0, 0, 8}), {"truncated header", "byte offset 3"});
  // Rank 3 but only one dimension present.
  Bytes bytes = {0, 0, 0x08, 3};
  append_be32(bytes, 60000);
  expect_idx_error(write_plain("dims.idx", bytes),
                   {"truncated header", "dimensions", "byte offset 4", "ends at byte offset 8"});
  expect_idx_error(write_gzip("dims.idx.gz", bytes),
                   {"truncated header", "dimensions", "decompressed"});
}

// Verifies that fewer data bytes than the header promises is an error, with offsets.
TEST(ReadIdxBadFileTest, TruncatedData) {
  Bytes bytes = concat(idx_header(0x08, {10}), {1, 2, 3, 4, 5});
  expect_idx_error(write_plain("short.idx", bytes),
                   {"truncated data", "10 data bytes", "ends at byte offset 13"});
  expect_idx_error(write_gzip("short.idx.gz", bytes),
                   {"truncated data", "decompressed data ends at byte offset 13"});
  // int32 data ending mid-element.
  Bytes i32 = concat(idx_header(0x0C, {2}), {0, 0, 0, 1, 0, 0});
  expect_idx_error(write_plain("i32.idx", i32), {"truncated data", "8 data bytes"});
}

// Verifies that a tiny file claiming ~2 GiB fails without allocating it
// (under ASan, a real 2 GiB allocation would show in the leak/RSS checks).
TEST(ReadIdxBadFileTest, HugeClaimInTinyFileFailsFast) {
  Bytes bytes = concat(idx_header(0x08, {0x7FFFFFFF}), {1, 2, 3});
  expect_idx_error(write_plain("huge.idx", bytes), {"truncated data", "2147483647 data bytes"});
  expect_idx_error(write_gzip("huge.idx.gz", bytes), {"truncated data", "2147483647 data bytes"});
}

// Verifies that a file that does not start with 00 00 is refused, naming the magic.
TEST(ReadIdxBadFileTest, BadMagic) {
  expect_idx_error(write_plain("magic.idx", {0x12, 0x34, 0x56, 0x78, 0, 0, 0, 0}),
                   {"bad magic 0x12345678", "byte offset 0", "not a gzip file"});
  expect_idx_error(write_gzip("magic.idx.gz", {0, 1, 8, 1, 0, 0, 0, 0}),
                   {"bad magic 0x00010801", "decompressed"});
}

// Verifies that an unknown type byte is refused, naming the code and offset.
TEST(ReadIdxBadFileTest, UnknownType) {
  expect_idx_error(write_plain("type.idx", concat(idx_header(0x07, {1}), {0})),
                   {"unknown element type code 0x07", "byte offset 2"});
  expect_idx_error(write_plain("type2.idx", concat(idx_header(0x0A, {1}), {0})),
                   {"unknown element type code 0x0A"});
}

// Verifies that ranks 0 and 9 are refused.
TEST(ReadIdxBadFileTest, RankOutOfRange) {
  expect_idx_error(write_plain("rank9.idx", idx_header(0x08, {1, 1, 1, 1, 1, 1, 1, 1, 1})),
                   {"rank 9", "byte offset 3", "1 to 8"});
  expect_idx_error(write_plain("rank0.idx", {0, 0, 0x08, 0, 7}), {"rank 0", "byte offset 3"});
}

// Verifies that element counts and byte sizes that overflow int64 are caught
// before any allocation, and that dimensions above int32 are refused.
TEST(ReadIdxBadFileTest, OverflowingDimensions) {
  Bytes bytes = idx_header(0x08, {0x7FFFFFFF, 0x7FFFFFFF, 0x7FFFFFFF, 0x7FFFFFFF, 0x7FFFFFFF,
                                  0x7FFFFFFF, 0x7FFFFFFF, 0x7FFFFFFF});
  expect_idx_error(write_plain("overflow.idx", bytes), {"overflow", "int64"});
  // A zero dimension does not hide an overflowing product of the others.
  expect_idx_error(
      write_plain("overflow0.idx", idx_header(0x08, {0, 0x7FFFFFFF, 0x7FFFFFFF, 0x7FFFFFFF})),
      {"overflow"});
  // The element count fits, the byte size does not.
  expect_idx_error(write_plain("bytes.idx", idx_header(0x0E, {0x7FFFFFFF, 0x7FFFFFFF, 0x7FFFFFF})),
                   {"overflow"});
  expect_idx_error(write_plain("neg.idx", idx_header(0x08, {2, 0xFFFFFFFF})),
                   {"dimension 1", "byte offset 8", "0xFFFFFFFF"});
}

// Verifies the cap on the data size (kMaxIdxDataBytes).
TEST(ReadIdxBadFileTest, OverLimit) {
  expect_idx_error(write_gzip("limit.idx.gz", idx_header(0x0E, {1 << 16, 1 << 16, 2})),
                   {"limit", "kMaxIdxDataBytes"});
}

// Verifies that bytes after the data are an error, in plain and gzip files.
TEST(ReadIdxBadFileTest, TrailingBytes) {
  Bytes bytes = concat(idx_header(0x08, {3}), {1, 2, 3, 4});
  expect_idx_error(write_plain("trail.idx", bytes),
                   {"1 trailing byte(s)", "byte offset 11", "12 bytes"});
  expect_idx_error(write_gzip("trail.idx.gz", bytes),
                   {"trailing bytes", "byte offset 11 of the decompressed data"});
}

// Verifies that non-gzip bytes after a complete gzip stream are an error.
TEST(ReadIdxBadFileTest, GarbageAfterGzipStream) {
  Bytes file = concat(gzip_bytes(concat(idx_header(0x08, {2}), {1, 2})), {'j', 'u', 'n', 'k'});
  expect_idx_error(write_plain("junk.idx.gz", file), {"after the gzip stream"});
}

// Verifies that corrupt compressed data and a wrong CRC are caught.
TEST(ReadIdxBadFileTest, CorruptGzip) {
  Bytes good = gzip_bytes(concat(idx_header(0x08, {4096}), counting_bytes(4096)));
  ASSERT_GT(good.size(), 200u);

  Bytes body = good;
  for (size_t i = body.size() / 2; i < body.size() / 2 + 16; ++i) body[i] ^= 0xA5;
  expect_idx_error(write_plain("body.idx.gz", body), {"corrupt gzip"});

  Bytes crc = good;
  crc[crc.size() - 8] ^= 0xFF;  // The trailer: CRC-32, then the length.
  expect_idx_error(write_plain("crc.idx.gz", crc), {"corrupt gzip", "incorrect data check"});

  Bytes header = good;
  header[2] = 7;  // Compression method: only 8 (deflate) exists.
  expect_idx_error(write_plain("method.idx.gz", header), {"corrupt gzip"});
}

// Verifies that a gzip file cut short is reported as truncated.
TEST(ReadIdxBadFileTest, TruncatedGzip) {
  Bytes good = gzip_bytes(concat(idx_header(0x08, {4096}), counting_bytes(4096)));
  Bytes cut(good.begin(), good.begin() + good.size() / 2);
  expect_idx_error(write_plain("cut.idx.gz", cut), {"ends early", "truncated"});
  // Only the trailer is missing: all data arrives, the stream still ends early.
  Bytes no_trailer(good.begin(), good.end() - 8);
  expect_idx_error(write_plain("trailer.idx.gz", no_trailer), {"ends early"});
}

// ---------------------------------------------------------------------------
// Fashion-MNIST
// ---------------------------------------------------------------------------

using tandem::testing::ScopedEnv;

// Verifies the default folder and its override.
TEST(FashionMnistTest, DirDefaultAndOverride) {
  {
    ScopedEnv env("TANDEM_FASHION_MNIST_DIR", "");
    EXPECT_EQ(fashion_mnist_dir(), kFashionMnistPackageDir);
  }
  ScopedEnv env("TANDEM_FASHION_MNIST_DIR", "/tmp/fm");
  EXPECT_EQ(fashion_mnist_dir(), "/tmp/fm");
}

// Verifies loading from an overridden folder of small unpacked files, and the
// checks on the pair of files.
TEST(FashionMnistTest, LoadsFromOverrideAndChecksFiles) {
  // A folder of its own, emptied first and removed after: pids repeat, and a
  // folder a killed run left behind must not fail the next one.
  const tandem::testing::ScratchDir scratch;
  const std::string dir = scratch.path().string();
  ScopedEnv env("TANDEM_FASHION_MNIST_DIR", dir);
  auto write = [&](const std::string& name, const Bytes& bytes) {
    std::ofstream out(dir + "/" + name, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
  };
  write("t10k-images-idx3-ubyte", concat(idx_header(0x08, {2, 28, 28}), counting_bytes(2 * 784)));
  write("t10k-labels-idx1-ubyte", concat(idx_header(0x08, {2}), {3, 9}));
  FashionMnist test = load_fashion_mnist("test");
  EXPECT_EQ(test.images.shape(), Shape({2, 28, 28}));
  EXPECT_THAT(test.labels.to_vector<uint8_t>(), ElementsAre(3, 9));

  // The train files are missing: the error names the variable.
  std::string what = error_of([] { load_fashion_mnist("train"); });
  EXPECT_THAT(what, HasSubstr("train-images-idx3-ubyte"));
  EXPECT_THAT(what, HasSubstr("TANDEM_FASHION_MNIST_DIR"));

  write("t10k-labels-idx1-ubyte", concat(idx_header(0x08, {3}), {3, 9, 1}));
  EXPECT_THAT(error_of([] { load_fashion_mnist("test"); }), HasSubstr("holds 2 images but"));
  write("t10k-labels-idx1-ubyte", concat(idx_header(0x08, {2}), {3, 10}));
  what = error_of([] { load_fashion_mnist("test"); });
  EXPECT_THAT(what, HasSubstr("label 10 at index 1"));
  write("t10k-images-idx3-ubyte", concat(idx_header(0x08, {2, 28, 27}), counting_bytes(2 * 756)));
  EXPECT_THAT(error_of([] { load_fashion_mnist("test"); }), HasSubstr("[N, 28, 28]"));
  EXPECT_THAT(error_of([] { load_fashion_mnist("validation"); }),
              HasSubstr("unknown split \"validation\""));
}

// Verifies the real data set: sizes, dtypes, and the balanced labels.
TEST(FashionMnistTest, LoadsInstalledDataSet) {
  ScopedEnv env("TANDEM_FASHION_MNIST_DIR", "");
  std::string probe = str_cat(kFashionMnistPackageDir, "/train-images-idx3-ubyte.gz");
  if (::access(probe.c_str(), R_OK) != 0) {
    GTEST_SKIP() << "Fashion-MNIST is not installed at " << kFashionMnistPackageDir
                 << " (install dataset-fashion-mnist with tools/tandem.sh deps)";
  }
  for (auto [split, n] : {std::pair<const char*, int64_t>{"train", 60000}, {"test", 10000}}) {
    FashionMnist data = load_fashion_mnist(split);
    EXPECT_EQ(data.images.dtype(), DType::kUInt8);
    EXPECT_EQ(data.images.shape(), Shape({n, 28, 28})) << split;
    EXPECT_EQ(data.labels.shape(), Shape({n})) << split;
    std::vector<int64_t> per_class(10, 0);
    for (uint8_t label : data.labels.to_vector<uint8_t>()) {
      ASSERT_LT(label, 10);
      ++per_class[label];
    }
    // Fashion-MNIST is balanced: N / 10 images of each class.
    for (int64_t count : per_class) EXPECT_EQ(count, n / 10) << split;
    std::vector<uint8_t> pixels = data.images.to_vector<uint8_t>();
    EXPECT_EQ(*std::max_element(pixels.begin(), pixels.end()), 255);
  }
}

// ---------------------------------------------------------------------------
// DataLoader
// ---------------------------------------------------------------------------

// N rows: x int32 [N, 3] with x[i][j] = 10 * i + j, y uint8 [N] with y[i] = i % 256.
std::vector<Tensor> make_dataset(int64_t n) {
  std::vector<int32_t> x(static_cast<size_t>(n * 3));
  std::vector<uint8_t> y(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    for (int j = 0; j < 3; ++j) x[i * 3 + j] = static_cast<int32_t>(10 * i + j);
    y[i] = static_cast<uint8_t>(i % 256);
  }
  return {Tensor::from_vector(x, {n, 3}), Tensor::from_vector(y, {n})};
}

// The row index of each row of every batch of one epoch (from x), checking
// that x and y rows stay paired.
std::vector<int64_t> rows_of_epoch(DataLoader& loader) {
  std::vector<int64_t> rows;
  for (const Batch& batch : loader) {
    std::vector<int32_t> x = batch[0].to_vector<int32_t>();
    std::vector<uint8_t> y = batch[1].to_vector<uint8_t>();
    for (int64_t r = 0; r < batch[0].shape()[0]; ++r) {
      int64_t row = x[r * 3] / 10;
      EXPECT_EQ(x[r * 3 + 2], 10 * row + 2);
      EXPECT_EQ(y[r], row % 256);
      rows.push_back(row);
    }
  }
  return rows;
}

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> out(static_cast<size_t>(n));
  std::iota(out.begin(), out.end(), int64_t{0});
  return out;
}

// Verifies batch counts and shapes, with and without drop_last.
TEST(DataLoaderTest, BatchCountAndShapes) {
  for (bool drop_last : {false, true}) {
    DataLoaderOptions options;
    options.batch_size = 4;
    options.drop_last = drop_last;
    DataLoader loader(make_dataset(10), options);
    EXPECT_EQ(loader.num_rows(), 10);
    EXPECT_EQ(loader.size(), drop_last ? 2 : 3);
    std::vector<int64_t> sizes;
    for (const Batch& batch : loader) {
      ASSERT_EQ(batch.size(), 2u);
      EXPECT_EQ(batch[0].dtype(), DType::kInt32);
      EXPECT_EQ(batch[1].dtype(), DType::kUInt8);
      EXPECT_EQ(batch[0].shape(), Shape({batch[0].shape()[0], 3}));
      EXPECT_EQ(batch[1].shape(), Shape({batch[0].shape()[0]}));
      sizes.push_back(batch[0].shape()[0]);
    }
    if (drop_last) {
      EXPECT_THAT(sizes, ElementsAre(4, 4));
    } else {
      EXPECT_THAT(sizes, ElementsAre(4, 4, 2));
    }
  }
  DataLoaderOptions exact;
  exact.batch_size = 5;
  exact.drop_last = true;
  EXPECT_EQ(DataLoader(make_dataset(10), exact).size(), 2);
}

// Verifies that without shuffle rows come in order, every epoch.
TEST(DataLoaderTest, NoShuffleKeepsOrder) {
  DataLoaderOptions options;
  options.batch_size = 3;
  DataLoader loader(make_dataset(10), options);
  EXPECT_EQ(rows_of_epoch(loader), iota(10));
  EXPECT_EQ(rows_of_epoch(loader), iota(10));
}

// Verifies that a shuffled epoch visits every row exactly once.
TEST(DataLoaderTest, ShuffleVisitsEveryRowOnce) {
  DataLoaderOptions options;
  options.batch_size = 7;
  options.shuffle = true;
  options.seed = 3;
  DataLoader loader(make_dataset(100), options);
  for (int epoch = 0; epoch < 3; ++epoch) {
    std::vector<int64_t> rows = rows_of_epoch(loader);
    EXPECT_NE(rows, iota(100));
    std::sort(rows.begin(), rows.end());
    EXPECT_EQ(rows, iota(100));
  }
}

// Verifies determinism: same seed => same order per epoch; epochs differ;
// seeds differ; the order matches epoch_order and set_epoch.
TEST(DataLoaderTest, SeededOrderIsDeterministic) {
  DataLoaderOptions options;
  options.batch_size = 8;
  options.shuffle = true;
  options.seed = 42;
  DataLoader a(make_dataset(100), options);
  DataLoader b(make_dataset(100), options);
  std::vector<int64_t> a0 = rows_of_epoch(a);
  std::vector<int64_t> a1 = rows_of_epoch(a);
  EXPECT_EQ(a.epoch(), 2u);
  EXPECT_EQ(rows_of_epoch(b), a0);
  EXPECT_EQ(rows_of_epoch(b), a1);
  EXPECT_NE(a0, a1);
  EXPECT_EQ(a0, a.epoch_order(0));
  EXPECT_EQ(a1, a.epoch_order(1));

  options.seed = 43;
  DataLoader c(make_dataset(100), options);
  EXPECT_NE(rows_of_epoch(c), a0);

  b.set_epoch(1);
  EXPECT_EQ(rows_of_epoch(b), a1);
}

// Verifies that breaking out after one batch of a large data set stops and
// joins the producer without hanging, epoch after epoch.
TEST(DataLoaderTest, EarlyBreakDoesNotHang) {
  Tensor images = Tensor::empty({10000, 28, 28}, DType::kUInt8);
  std::memset(images.raw_data(), 7, images.nbytes());
  Tensor labels = Tensor::empty({10000}, DType::kUInt8);
  std::memset(labels.raw_data(), 1, labels.nbytes());
  DataLoaderOptions options;
  options.batch_size = 32;
  options.shuffle = true;
  options.prefetch = 2;
  options.transform = [](Batch batch) {
    return Batch{to_float(batch[0], 1.0f / 255, 0.0f), to_int64(batch[1])};
  };
  DataLoader loader({images, labels}, options);
  for (int epoch = 0; epoch < 5; ++epoch) {
    int seen = 0;
    for (const Batch& batch : loader) {
      EXPECT_EQ(batch[0].shape(), Shape({32, 28, 28}));
      ++seen;
      break;
    }
    EXPECT_EQ(seen, 1);
  }
  // An iterator that never advanced, destroyed at once.
  { auto it = loader.begin(); }
}

// Verifies that an iterator keeps working after its loader is destroyed.
TEST(DataLoaderTest, IteratorOutlivesLoader) {
  DataLoader::Iterator it;
  int64_t expected = 0;
  {
    DataLoaderOptions options;
    options.batch_size = 3;
    DataLoader loader(make_dataset(10), options);
    expected = loader.size();
    it = loader.begin();
  }
  int64_t batches = 0;
  for (; it != DataLoader::Iterator(); ++it) ++batches;
  EXPECT_EQ(batches, expected);
}

// Verifies that an exception in the transform reaches the consumer, in order,
// as a tandem::Error naming the batch, for every prefetch depth.
TEST(DataLoaderTest, ProducerExceptionSurfaces) {
  for (int prefetch : {0, 1, 3}) {
    DataLoaderOptions options;
    options.batch_size = 2;
    options.prefetch = prefetch;
    options.transform = [calls = std::make_shared<int>(0)](Batch batch) {
      if ((*calls)++ == 2) throw std::runtime_error("boom in transform");
      return batch;
    };
    DataLoader loader(make_dataset(10), options);
    auto it = loader.begin();
    ASSERT_NE(it, loader.end());
    ++it;
    ASSERT_NE(it, loader.end());
    std::string what = error_of([&] { ++it; });
    EXPECT_THAT(what, HasSubstr("batch 2 of epoch 0")) << "prefetch " << prefetch;
    EXPECT_THAT(what, HasSubstr("boom in transform"));
    EXPECT_EQ(it, loader.end());
  }
}

// Verifies that a tandem::Error keeps its op, and that a failing first batch
// throws from begin() (and the range-for) without leaking the thread.
TEST(DataLoaderTest, FirstBatchFailureAndTandemErrors) {
  DataLoaderOptions options;
  options.batch_size = 4;
  options.transform = [](Batch batch) {
    return Batch{to_float(batch[0], 1.0f, 0.0f)};  // batch[0] is int32: to_float refuses.
  };
  DataLoader loader(make_dataset(10), options);
  std::string what = error_of([&] {
    for (const Batch& batch : loader) (void)batch;
  });
  EXPECT_THAT(what, HasSubstr("to_float"));
  EXPECT_THAT(what, HasSubstr("expected a uint8 tensor"));
  EXPECT_THAT(what, HasSubstr("batch 0 of epoch 0"));
}

// Verifies that prefetch = 0 builds batches on the caller's thread, and
// prefetch > 0 on another thread.
TEST(DataLoaderTest, PrefetchZeroIsSynchronous) {
  for (int prefetch : {0, 2}) {
    auto threads = std::make_shared<std::vector<std::thread::id>>();
    DataLoaderOptions options;
    options.batch_size = 4;
    options.prefetch = prefetch;
    options.transform = [threads](Batch batch) {
      threads->push_back(std::this_thread::get_id());
      return batch;
    };
    DataLoader loader(make_dataset(10), options);
    EXPECT_EQ(rows_of_epoch(loader), iota(10));
    ASSERT_EQ(threads->size(), 3u);
    for (std::thread::id id : *threads) {
      EXPECT_EQ(id == std::this_thread::get_id(), prefetch == 0) << "prefetch " << prefetch;
    }
  }
}

// Verifies the conversion helpers as a transform.
TEST(DataLoaderTest, ToFloatAndToInt64Transform) {
  Tensor images = Tensor::from_vector<uint8_t>({0, 255, 51, 102}, {2, 2});
  Tensor labels = Tensor::from_vector<uint8_t>({7, 2}, {2});
  DataLoaderOptions options;
  options.batch_size = 2;
  options.transform = [](Batch batch) {
    return Batch{to_float(batch[0], 2.0f / 255, -1.0f), to_int64(batch[1])};
  };
  DataLoader loader({images, labels}, options);
  int batches = 0;
  for (const Batch& batch : loader) {
    ++batches;
    EXPECT_EQ(batch[0].dtype(), DType::kFloat32);
    EXPECT_EQ(batch[0].shape(), Shape({2, 2}));
    std::vector<float> x = batch[0].to_vector<float>();
    EXPECT_NEAR(x[0], -1.0f, 1e-6);
    EXPECT_NEAR(x[1], 1.0f, 1e-6);
    EXPECT_NEAR(x[2], -0.6f, 1e-6);
    EXPECT_NEAR(x[3], -0.2f, 1e-6);
    EXPECT_EQ(batch[1].dtype(), DType::kInt64);
    EXPECT_THAT(batch[1].to_vector<int64_t>(), ElementsAre(7, 2));
  }
  EXPECT_EQ(batches, 1);
  EXPECT_THAT(to_int64(Tensor::from_vector<int32_t>({-3, 5}, {2})).to_vector<int64_t>(),
              ElementsAre(-3, 5));
  EXPECT_THAT(error_of([] { to_int64(Tensor::from_vector<float>({1}, {1})); }),
              HasSubstr("expected a uint8 or int32 tensor, got float32"));
}

// Verifies the checks on the data set and options.
TEST(DataLoaderTest, RejectsBadDatasetsAndOptions) {
  auto x = Tensor::from_vector<float>({1, 2, 3, 4}, {4});
  auto y = Tensor::from_vector<float>({1, 2, 3}, {3});
  EXPECT_THAT(error_of([&] { DataLoader({x, y}); }), HasSubstr("share their leading dimension"));
  EXPECT_THAT(error_of([] { DataLoader({}); }), HasSubstr("at least one tensor"));
  EXPECT_THAT(error_of([] { DataLoader({Tensor()}); }), HasSubstr("undefined"));
  EXPECT_THAT(error_of([&] { DataLoader({x[0]}); }), HasSubstr("scalar"));
  DataLoaderOptions options;
  options.batch_size = 0;
  EXPECT_THAT(error_of([&] { DataLoader({x}, options); }), HasSubstr("batch_size"));
  options.batch_size = 1;
  options.prefetch = -1;
  EXPECT_THAT(error_of([&] { DataLoader({x}, options); }), HasSubstr("prefetch"));
}

// Verifies that an empty data set has no batches.
TEST(DataLoaderTest, EmptyDataset) {
  DataLoader loader({Tensor::empty({0, 3}, DType::kFloat32)});
  EXPECT_EQ(loader.size(), 0);
  EXPECT_EQ(loader.begin(), loader.end());
  int batches = 0;
  for (const Batch& batch : loader) batches += static_cast<int>(batch.size());
  EXPECT_EQ(batches, 0);
}

// Verifies many full epochs with a slow consumer and a fast producer and the
// other way round (for the sanitizers: no race, leak or lost batch).
TEST(DataLoaderTest, ManyEpochsBothSpeeds) {
  for (bool slow_consumer : {false, true}) {
    DataLoaderOptions options;
    options.batch_size = 3;
    options.shuffle = true;
    options.prefetch = 2;
    options.transform = [slow_consumer](Batch batch) {
      if (!slow_consumer) std::this_thread::sleep_for(std::chrono::microseconds(200));
      return batch;
    };
    DataLoader loader(make_dataset(50), options);
    for (int epoch = 0; epoch < 4; ++epoch) {
      std::vector<int64_t> rows;
      for (const Batch& batch : loader) {
        if (slow_consumer) std::this_thread::sleep_for(std::chrono::microseconds(200));
        for (int32_t v : batch[0].to_vector<int32_t>()) {
          if (v % 10 == 0) rows.push_back(v / 10);
        }
      }
      std::sort(rows.begin(), rows.end());
      EXPECT_EQ(rows, iota(50));
    }
  }
}

}  // namespace
}  // namespace tandem::data
