// Reading IDX files (the MNIST format) and the Fashion-MNIST data set.
//
//   using namespace tandem::data;
//   Tensor images = read_idx("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz");
//   images.shape();  // [10000, 28, 28], uint8
//
//   FashionMnist train = load_fashion_mnist("train");
//   train.images;    // uint8 [60000, 28, 28]
//   train.labels;    // uint8 [60000], each < 10 (see kFashionMnistClasses)
//
// The IDX format (http://yann.lecun.com/exdb/mnist/): two zero bytes, a type
// byte, a rank byte, then `rank` big-endian int32 dimensions, then the
// elements, big-endian, row-major:
//
//   type byte  element        Tensor dtype
//   0x08       uint8          uint8
//   0x09       int8           int32 (widened)
//   0x0B       int16          int32 (widened)
//   0x0C       int32          int32
//   0x0D       float32        float32
//   0x0E       float64        float64
//
// A file that starts with the gzip magic (1f 8b) is decompressed on the fly;
// anything else is read as a plain IDX file.
//
// Note [Untrusted IDX bytes]
// Every byte of the file is untrusted. Anything that does not match the
// format exactly is a tandem::Error naming the file, the problem and, where
// one exists, the byte offset (an offset into the decompressed data for a
// gzipped file): a missing or non-regular file, bad magic, an unknown type
// byte, a rank of 0 or above 8, a negative dimension, an element count or byte
// size that overflows, data larger than kMaxIdxDataBytes, fewer data bytes
// than the header promises, bytes after the data, and a corrupt or truncated
// gzip stream. A dimension of 0 is valid (an empty tensor). Memory is never
// committed ahead of the bytes that back it: a plain file's size is compared
// with the header before anything is allocated, and gzipped data is
// decompressed in chunks into a buffer that grows only as data arrives, so a
// 100-byte file that claims gigabytes fails fast, with no large allocation.
#pragma once

#include <array>
#include <cstdint>
#include <source_location>
#include <string>
#include <string_view>

#include "core/tensor.h"

namespace tandem::data {

// The most data bytes (after decompression) read_idx accepts from one file:
// 4 GiB, about 85 times the Fashion-MNIST training images.
inline constexpr int64_t kMaxIdxDataBytes = int64_t{4} << 30;

// The most dimensions an IDX header may declare.
inline constexpr int kMaxIdxRank = 8;

// Reads the IDX file at `path` (plain or gzipped) into a new CPU tensor; see
// the table above for the dtype. Throws tandem::Error for any file that is
// not exactly one valid IDX file (see Note [Untrusted IDX bytes]); `where` is
// the caller's line, which the error names.
Tensor read_idx(const std::string& path,
                std::source_location where = std::source_location::current());

// ---------------------------------------------------------------------------
// Fashion-MNIST (https://github.com/zalandoresearch/fashion-mnist): 28x28
// grey-scale images of clothes in 10 classes, 60000 for training and 10000
// for testing. Debian's `dataset-fashion-mnist` package installs it (run
// `tools/tandem.sh deps`).
// ---------------------------------------------------------------------------

// Where the `dataset-fashion-mnist` package installs its files.
inline constexpr std::string_view kFashionMnistPackageDir = "/usr/share/datasets/fashion-mnist";

// The label names, indexed by label value.
inline constexpr std::array<std::string_view, 10> kFashionMnistClasses = {
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};

// The folder load_fashion_mnist reads: $TANDEM_FASHION_MNIST_DIR when that is
// set and not empty, otherwise kFashionMnistPackageDir.
std::string fashion_mnist_dir();

// One split of Fashion-MNIST.
struct FashionMnist {
  Tensor images;  // uint8 [N, 28, 28], pixel values 0 (background) to 255
  Tensor labels;  // uint8 [N], each in [0, 10)
};

// Loads split "train" (N = 60000) or "test" (N = 10000) from
// fashion_mnist_dir(): `<prefix>-images-idx3-ubyte` and
// `<prefix>-labels-idx1-ubyte`, with prefix "train" or "t10k", each gzipped
// (".gz", as the package ships them) or plain. Throws tandem::Error for an
// unknown split, a missing file (saying how to install the package), any
// read_idx error, images that are not uint8 [N, 28, 28], labels that are not
// uint8 [N] with the same N, or a label >= 10 (naming its index).
FashionMnist load_fashion_mnist(std::string_view split,
                                std::source_location where = std::source_location::current());

}  // namespace tandem::data
