#include "eager/data/idx.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/shape.h"

namespace tandem::data {
namespace {

// Bytes read from the file per read(2) call, and the step by which a gzip
// buffer grows at least (see Note [Untrusted IDX bytes]).
constexpr size_t kChunkBytes = size_t{1} << 20;

// The fixed part of the header: two zero bytes, the type byte, the rank byte.
constexpr int64_t kPrefixBytes = 4;

std::string errno_text(int error) { return std::generic_category().message(error); }

// "0x00AB" for hex(0xAB, 4).
std::string hex(uint64_t value, int digits) {
  char text[24];
  std::snprintf(text, sizeof text, "0x%0*llX", digits, static_cast<unsigned long long>(value));
  return text;
}

bool starts_with_dir(std::string_view path, std::string_view dir) {
  return path.size() > dir.size() && path.substr(0, dir.size()) == dir && path[dir.size()] == '/';
}

// Closes a file descriptor when it goes out of scope.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileDescriptor(FileDescriptor&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// One element type of the format.
struct IdxType {
  uint8_t code;
  const char* name;
  int64_t size;  // bytes per element in the file
  DType dtype;   // dtype of the tensor read_idx returns
};

constexpr IdxType kIdxTypes[] = {
    {0x08, "uint8", 1, DType::kUInt8},     {0x09, "int8", 1, DType::kInt32},
    {0x0B, "int16", 2, DType::kInt32},     {0x0C, "int32", 4, DType::kInt32},
    {0x0D, "float32", 4, DType::kFloat32}, {0x0E, "float64", 8, DType::kFloat64},
};

const IdxType* find_type(uint8_t code) {
  for (const IdxType& type : kIdxTypes) {
    if (type.code == code) return &type;
  }
  return nullptr;
}

// The logical byte stream of an IDX file: the file itself, or what its gzip
// stream decompresses to. Errors name `path_`.
class ByteSource {
 public:
  ByteSource(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  virtual ~ByteSource() = default;

  // Reads up to `n` bytes; fewer only at the end of the stream.
  virtual size_t read(uint8_t* dst, size_t n) = 0;
  virtual bool is_gzip() const = 0;

 protected:
  // One read(2) of up to `n` bytes; 0 at the end of the file.
  size_t read_file(uint8_t* dst, size_t n) {
    for (;;) {
      ssize_t got = ::read(fd_, dst, n);
      if (got >= 0) return static_cast<size_t>(got);
      if (errno != EINTR) {
        TANDEM_CHECK(false, path_, ": read failed: ", errno_text(errno));
      }
    }
  }

  std::string path_;
  int fd_;
};

class PlainSource : public ByteSource {
 public:
  using ByteSource::ByteSource;

  size_t read(uint8_t* dst, size_t n) override {
    size_t total = 0;
    while (total < n) {
      size_t got = read_file(dst + total, n - total);
      if (got == 0) break;
      total += got;
    }
    return total;
  }
  bool is_gzip() const override { return false; }
};

// Decompresses one or more concatenated gzip members (as gzip(1) does); any
// other bytes after a member, a truncated stream, or a failed CRC or length
// check is an error.
class GzipSource : public ByteSource {
 public:
  GzipSource(std::string path, int fd) : ByteSource(std::move(path), fd), input_(kChunkBytes) {
    // 16 + MAX_WBITS: expect a gzip header and trailer (checked by inflate).
    int rc = inflateInit2(&stream_, 16 + MAX_WBITS);
    TANDEM_CHECK(rc == Z_OK, path_, ": cannot start gzip decompression (zlib error ", rc, ")");
  }
  ~GzipSource() override { inflateEnd(&stream_); }

  bool is_gzip() const override { return true; }

  size_t read(uint8_t* dst, size_t n) override {
    size_t produced = 0;
    while (produced < n) {
      if (stream_.avail_in == 0 && !file_ended_) refill();
      if (member_ended_) {
        if (stream_.avail_in == 0) break;  // The end of the last member and of the file.
        // More bytes follow a complete member: they must be another member.
        inflateReset(&stream_);
        member_ended_ = false;
        in_later_member_ = true;
      }
      TANDEM_CHECK(stream_.avail_in > 0, path_,
                   ": corrupt gzip file: the compressed stream ends early, at compressed byte "
                   "offset ",
                   compressed_offset(), " (the file is truncated)");
      stream_.next_out = dst + produced;
      stream_.avail_out = static_cast<uInt>(std::min<size_t>(n - produced, kChunkBytes));
      const uInt out_before = stream_.avail_out;
      int rc = inflate(&stream_, Z_NO_FLUSH);
      produced += out_before - stream_.avail_out;
      if (rc == Z_STREAM_END) {
        member_ended_ = true;
      } else if (rc != Z_OK && !(rc == Z_BUF_ERROR && stream_.avail_in == 0)) {
        fail(rc);
      }
    }
    return produced;
  }

 private:
  void refill() {
    size_t got = read_file(input_.data(), input_.size());
    if (got == 0) file_ended_ = true;
    consumed_ += static_cast<int64_t>(got);
    stream_.next_in = input_.data();
    stream_.avail_in = static_cast<uInt>(got);
  }

  int64_t compressed_offset() const { return consumed_ - stream_.avail_in; }

  [[noreturn]] void fail(int rc) {
    std::string why = stream_.msg ? stream_.msg : str_cat("zlib error ", rc);
    if (in_later_member_ && stream_.total_out == 0) {
      TANDEM_CHECK(false, path_, ": ", "unexpected bytes after the gzip stream, near compressed ",
                   "byte offset ", compressed_offset(), " (", why, ")");
    }
    TANDEM_CHECK(false, path_, ": corrupt gzip data near compressed byte offset ",
                 compressed_offset(), " (", why, ")");
  }

  std::vector<uint8_t> input_;
  z_stream stream_{};
  int64_t consumed_ = 0;  // Compressed bytes read from the file so far.
  bool file_ended_ = false;
  bool member_ended_ = false;
  bool in_later_member_ = false;
};

// Reads exactly `n` header bytes at logical offset `offset`, or throws.
void read_header_bytes(ByteSource& source, const std::string& path, uint8_t* dst, size_t n,
                       int64_t offset, const char* what) {
  size_t got = source.read(dst, n);
  TANDEM_CHECK(got == n, path, ": truncated header: expected ", n, " bytes of ", what,
               " at byte offset ", offset, ", but the ", source.is_gzip() ? "decompressed " : "",
               "data ends at byte offset ", offset + static_cast<int64_t>(got));
}

uint32_t load_be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

uint64_t load_be64(const uint8_t* p) {
  return (uint64_t{load_be32(p)} << 32) | uint64_t{load_be32(p + 4)};
}

// Converts `count` big-endian elements of `type` at `raw` into `out`.
void decode(const IdxType& type, const uint8_t* raw, int64_t count, const Tensor& out) {
  switch (type.code) {
    case 0x08:
      if (count > 0) std::memcpy(out.raw_data(), raw, static_cast<size_t>(count));
      return;
    case 0x09: {
      int32_t* dst = out.data<int32_t>();
      for (int64_t i = 0; i < count; ++i) dst[i] = static_cast<int8_t>(raw[i]);
      return;
    }
    case 0x0B: {
      int32_t* dst = out.data<int32_t>();
      for (int64_t i = 0; i < count; ++i) {
        dst[i] = static_cast<int16_t>(static_cast<uint16_t>((raw[2 * i] << 8) | raw[2 * i + 1]));
      }
      return;
    }
    case 0x0C: {
      int32_t* dst = out.data<int32_t>();
      for (int64_t i = 0; i < count; ++i) dst[i] = static_cast<int32_t>(load_be32(raw + 4 * i));
      return;
    }
    case 0x0D: {
      float* dst = out.data<float>();
      for (int64_t i = 0; i < count; ++i) {
        uint32_t bits = load_be32(raw + 4 * i);
        std::memcpy(&dst[i], &bits, sizeof bits);
      }
      return;
    }
    case 0x0E: {
      double* dst = out.data<double>();
      for (int64_t i = 0; i < count; ++i) {
        uint64_t bits = load_be64(raw + 8 * i);
        std::memcpy(&dst[i], &bits, sizeof bits);
      }
      return;
    }
  }
  TANDEM_INTERNAL_ASSERT(false, "unhandled IDX type ", type.code);
}

std::string fashion_mnist_install_hint() {
  return str_cat(
      "Fashion-MNIST comes from Debian's dataset-fashion-mnist package: install it with ",
      "`tools/tandem.sh deps` (or `apt-get install dataset-fashion-mnist`), or set ",
      "TANDEM_FASHION_MNIST_DIR to a folder holding the files");
}

bool file_exists(const std::string& path) {
  struct stat info;
  return ::stat(path.c_str(), &info) == 0;
}

}  // namespace

namespace {

void check_path(const std::string& path) {
  TANDEM_CHECK(!path.empty(), "the path is empty");
  if (path.find('\0') != std::string::npos) {
    std::string shown;
    for (char c : path) shown += c == '\0' ? std::string("\\0") : std::string(1, c);
    TANDEM_CHECK(false, "the path \"", shown, "\" contains a NUL byte");
  }
}

// Opens `path` for reading; refuses anything but a regular file.
FileDescriptor open_regular_file(const std::string& path, int64_t* file_bytes) {
  // O_NONBLOCK: opening a FIFO must not hang; it is rejected below.
  FileDescriptor file(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (file.get() < 0) {
    int error = errno;
    std::string hint;
    if (error == ENOENT && starts_with_dir(path, kFashionMnistPackageDir)) {
      hint = str_cat(". ", fashion_mnist_install_hint());
    }
    TANDEM_CHECK(false, "cannot open ", path, ": ", errno_text(error), hint);
  }
  struct stat info;
  TANDEM_CHECK(::fstat(file.get(), &info) == 0, path, ": cannot stat: ", errno_text(errno));
  TANDEM_CHECK(S_ISREG(info.st_mode), path, ": not a regular file",
               S_ISDIR(info.st_mode) ? " (it is a directory)" : "");
  *file_bytes = info.st_size;
  return file;
}

// The file's bytes, inflated if it is gzip (told by its first two bytes,
// peeked without moving the offset).
std::unique_ptr<ByteSource> open_source(const std::string& path, int fd) {
  uint8_t peek[2] = {0, 0};
  ssize_t peeked = ::pread(fd, peek, sizeof peek, 0);
  TANDEM_CHECK(peeked >= 0, path, ": read failed: ", errno_text(errno));
  if (peeked == 2 && peek[0] == 0x1f && peek[1] == 0x8b) {
    return std::make_unique<GzipSource>(path, fd);
  }
  return std::make_unique<PlainSource>(path, fd);
}

struct IdxHeader {
  const IdxType* type;
  Shape::Dims dims;
  std::string dims_text;  // "[60000, 28, 28]", for messages.
  int64_t header_bytes;
  int64_t count;       // Elements.
  int64_t data_bytes;  // Overflow-checked and within kMaxIdxDataBytes.
};

// Header: 00 00 type rank, then rank big-endian int32 dimensions.
IdxHeader read_header(ByteSource& source, const std::string& path) {
  const bool gzip = source.is_gzip();
  IdxHeader header;
  uint8_t prefix[kPrefixBytes];
  read_header_bytes(source, path, prefix, kPrefixBytes, 0, "magic number");
  TANDEM_CHECK(prefix[0] == 0 && prefix[1] == 0, path, ": bad magic ", hex(load_be32(prefix), 8),
               " at byte offset 0", gzip ? " of the decompressed data" : "",
               ": an IDX file starts with two zero bytes, a type byte and a rank byte",
               gzip ? "" : " (and this is not a gzip file either)");
  header.type = find_type(prefix[2]);
  TANDEM_CHECK(
      header.type != nullptr, path, ": unknown element type code ", hex(prefix[2], 2),
      " at byte offset 2; expected 0x08 (uint8), 0x09 (int8), 0x0B (int16), 0x0C (int32), ",
      "0x0D (float32) or 0x0E (float64)");
  const int rank = prefix[3];
  TANDEM_CHECK(rank >= 1 && rank <= kMaxIdxRank, path, ": rank ", rank,
               " at byte offset 3 is out of range; expected 1 to ", kMaxIdxRank, " dimensions");

  uint8_t dim_bytes[4 * kMaxIdxRank];
  read_header_bytes(source, path, dim_bytes, 4 * static_cast<size_t>(rank), kPrefixBytes,
                    "dimensions");
  header.dims_text = "[";
  for (int i = 0; i < rank; ++i) {
    uint32_t dim = load_be32(dim_bytes + 4 * i);
    absl::StrAppend(&header.dims_text, i ? ", " : "", dim);
    TANDEM_CHECK(dim <= 0x7FFFFFFFu, path, ": dimension ", i, " at byte offset ",
                 kPrefixBytes + 4 * i, " is ", dim, " (", hex(dim, 8),
                 "), more than the largest IDX dimension 2147483647");
    header.dims.push_back(dim);
  }
  header.dims_text += "]";
  header.header_bytes = kPrefixBytes + 4 * rank;

  // Element count and byte size, overflow-checked. Shape also requires the
  // product of the nonzero dimensions to fit, so check that too.
  try {
    int64_t count = 1, nonzero = 1;
    for (int64_t dim : header.dims) {
      count = checked_mul(count, dim, "IDX element count");
      nonzero = checked_mul(nonzero, std::max<int64_t>(dim, 1), "IDX element count");
    }
    header.count = count;
    header.data_bytes = checked_mul(count, header.type->size, "IDX data size");
  } catch (const Error&) {
    TANDEM_CHECK(false, path, ": the header's dimensions ", header.dims_text, " (",
                 header.type->name, ") at byte offset ", kPrefixBytes,
                 " overflow: their element count or byte size does not fit in int64");
  }
  TANDEM_CHECK(header.data_bytes <= kMaxIdxDataBytes, path, ": the header's dimensions ",
               header.dims_text, " (", header.type->name, ") promise ", header.data_bytes,
               " data bytes, more than the limit of ", kMaxIdxDataBytes,
               " bytes (kMaxIdxDataBytes)");
  return header;
}

// A plain file's size must match the header's promise, checked before
// anything is allocated.
void check_plain_file_size(const IdxHeader& header, int64_t file_bytes, const std::string& path) {
  const int64_t available = file_bytes - header.header_bytes;
  const int64_t promised = header.data_bytes;
  TANDEM_CHECK(available >= promised, path, ": truncated data: the header promises ",
               header.dims_text, " ", header.type->name, " = ", promised,
               " data bytes from byte offset ", header.header_bytes,
               ", but the file ends at byte offset ", file_bytes, " (", available, " data bytes)");
  TANDEM_CHECK(available == promised, path, ": ", available - promised,
               " trailing byte(s) after the data, at byte offset ", header.header_bytes + promised,
               " (the header promises ", header.dims_text, " ", header.type->name, " = ", promised,
               " data bytes; the file has ", file_bytes, " bytes)");
}

// The data bytes, and then the check that nothing follows them. The buffer
// grows only as bytes arrive, so memory stays within about twice what the
// file really holds (see Note [Untrusted IDX bytes]).
std::vector<uint8_t> read_data(ByteSource& source, const IdxHeader& header,
                               const std::string& path) {
  const bool gzip = source.is_gzip();
  const char* data_kind = gzip ? "decompressed data" : "file";
  std::vector<uint8_t> raw;
  int64_t have = 0;
  while (have < header.data_bytes) {
    int64_t want = gzip ? std::min(header.data_bytes, std::max<int64_t>(2 * have, kChunkBytes))
                        : header.data_bytes;
    raw.resize(static_cast<size_t>(want));
    size_t got = source.read(raw.data() + have, static_cast<size_t>(want - have));
    have += static_cast<int64_t>(got);
    TANDEM_CHECK(have == want, path, ": truncated data: the header promises ", header.dims_text,
                 " ", header.type->name, " = ", header.data_bytes, " data bytes from byte offset ",
                 header.header_bytes, ", but the ", data_kind, " ends at byte offset ",
                 header.header_bytes + have, " (", have, " data bytes)");
  }
  // For gzip this read also drives inflate to the end of the stream, which
  // checks the CRC and length trailer.
  uint8_t extra = 0;
  TANDEM_CHECK(source.read(&extra, 1) == 0, path,
               ": trailing bytes after the data, at byte offset ",
               header.header_bytes + header.data_bytes, gzip ? " of the decompressed data" : "",
               " (the header promises ", header.dims_text, " ", header.type->name, " = ",
               header.data_bytes, " data bytes)");
  return raw;
}

}  // namespace

Tensor read_idx(const std::string& path, std::source_location where) {
  CallSiteScope site("read_idx", where);
  check_path(path);
  int64_t file_bytes = 0;
  const FileDescriptor file = open_regular_file(path, &file_bytes);
  std::unique_ptr<ByteSource> source = open_source(path, file.get());
  const IdxHeader header = read_header(*source, path);
  if (!source->is_gzip()) check_plain_file_size(header, file_bytes, path);
  const std::vector<uint8_t> raw = read_data(*source, header, path);
  Tensor out = Tensor::empty(Shape(absl::MakeConstSpan(header.dims)), header.type->dtype);
  decode(*header.type, raw.data(), header.count, out);
  return out;
}

std::string fashion_mnist_dir() {
  const char* env = std::getenv("TANDEM_FASHION_MNIST_DIR");
  if (env != nullptr && env[0] != '\0') return env;
  return std::string(kFashionMnistPackageDir);
}

FashionMnist load_fashion_mnist(std::string_view split, std::source_location where) {
  CallSiteScope site("load_fashion_mnist", where);
  TANDEM_CHECK(split == "train" || split == "test", "unknown split \"", split,
               "\"; expected \"train\" or \"test\"");
  const std::string dir = fashion_mnist_dir();
  const std::string prefix = split == "train" ? "train" : "t10k";

  // The package ships gzipped files; an unpacked copy works too.
  auto locate = [&](const std::string& name) {
    std::string base = str_cat(dir, "/", name);
    if (file_exists(base + ".gz")) return base + ".gz";
    if (file_exists(base)) return base;
    const char* env = std::getenv("TANDEM_FASHION_MNIST_DIR");
    std::string hint = (env != nullptr && env[0] != '\0')
                           ? str_cat("TANDEM_FASHION_MNIST_DIR is set to \"", env,
                                     "\"; point it at a folder holding the Fashion-MNIST files, ",
                                     "or unset it to use ", kFashionMnistPackageDir)
                           : fashion_mnist_install_hint();
    TANDEM_CHECK(false, "Fashion-MNIST file ", base, ".gz (or ", name, " unpacked) not found. ",
                 hint);
    return std::string();  // Unreachable.
  };
  const std::string images_path = locate(prefix + "-images-idx3-ubyte");
  const std::string labels_path = locate(prefix + "-labels-idx1-ubyte");

  FashionMnist out;
  out.images = read_idx(images_path, where);
  out.labels = read_idx(labels_path, where);
  const Shape& images = out.images.shape();
  const Shape& labels = out.labels.shape();
  TANDEM_CHECK(out.images.dtype() == DType::kUInt8 && images.rank() == 3 && images[1] == 28 &&
                   images[2] == 28,
               images_path, ": expected uint8 images of shape [N, 28, 28], got ",
               dtype_name(out.images.dtype()), " ", images.to_string());
  TANDEM_CHECK(out.labels.dtype() == DType::kUInt8 && labels.rank() == 1, labels_path,
               ": expected uint8 labels of shape [N], got ", dtype_name(out.labels.dtype()), " ",
               labels.to_string());
  TANDEM_CHECK(images[0] == labels[0], "Fashion-MNIST ", split, ": ", images_path, " holds ",
               images[0], " images but ", labels_path, " holds ", labels[0], " labels");
  const uint8_t* label = out.labels.data<uint8_t>();
  for (int64_t i = 0; i < labels[0]; ++i) {
    TANDEM_CHECK(label[i] < kFashionMnistClasses.size(), labels_path, ": label ", int{label[i]},
                 " at index ", i, " is not a class; expected 0 to ",
                 kFashionMnistClasses.size() - 1);
  }
  return out;
}

}  // namespace tandem::data
