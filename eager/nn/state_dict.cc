#include "eager/nn/state_dict.h"

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <system_error>

#include "absl/strings/str_join.h"

#include "core/error.h"

namespace tandem::nn {
namespace {

// The raw element bytes are written as they lie in memory; see Note [State
// dict file format, TNDMSD01].
static_assert(std::endian::native == std::endian::little,
              "the TNDMSD01 writer and reader assume a little-endian host");

constexpr char kMagic[8] = {'T', 'N', 'D', 'M', 'S', 'D', '0', '1'};
constexpr uint64_t kMaxNameLength = 4096;
constexpr uint32_t kMaxRank = 64;

void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

// Reads fields of a file image, bounds-checking each one.
class Reader {
 public:
  Reader(const std::string& path, const std::string& bytes) : path_(path), bytes_(bytes) {}

  size_t offset() const { return pos_; }
  size_t remaining() const { return bytes_.size() - pos_; }

  // Throws naming the file, the current offset and `what`.
  [[noreturn]] void fail(const std::string& what) const { fail_at(pos_, what); }
  [[noreturn]] void fail_at(size_t offset, const std::string& what) const {
    throw Error(str_cat("state dict file '", path_, "': ", what, " at byte offset ", offset));
  }

  const char* take(size_t n, const char* what) {
    if (n > remaining()) {
      fail(str_cat("truncated: expected ", n, " bytes of ", what, ", only ", remaining(), " left"));
    }
    const char* p = bytes_.data() + pos_;
    pos_ += n;
    return p;
  }
  uint64_t u64(const char* what) {
    const auto* p = reinterpret_cast<const unsigned char*>(take(8, what));
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
    return v;
  }
  uint32_t u32(const char* what) {
    const auto* p = reinterpret_cast<const unsigned char*>(take(4, what));
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
    return v;
  }
  uint8_t u8(const char* what) { return static_cast<unsigned char>(*take(1, what)); }

 private:
  const std::string& path_;
  const std::string& bytes_;
  size_t pos_ = 0;
};

std::string encode(const StateDict& state) {
  std::string out(kMagic, sizeof(kMagic));
  put_u64(out, state.size());
  for (const auto& [name, tensor] : state) {
    TANDEM_CHECK(tensor.defined(), "state dict entry '", name, "' is an undefined tensor");
    TANDEM_CHECK(tensor.device().is_cpu(), "state dict entry '", name, "' is on ",
                 tensor.device().to_string(), "; only CPU tensors can be saved for now");
    put_u64(out, name.size());
    out += name;
    out.push_back(static_cast<char>(tensor.dtype()));
    put_u32(out, static_cast<uint32_t>(tensor.rank()));
    for (int64_t d : tensor.shape()) put_u64(out, static_cast<uint64_t>(d));
    put_u64(out, tensor.nbytes());
    tensor.wait_to_read();
    out.append(static_cast<const char*>(tensor.raw_data()), tensor.nbytes());
  }
  return out;
}

Tensor decode_tensor(Reader& r, const std::string& name) {
  const size_t dtype_offset = r.offset();
  const uint8_t code = r.u8("dtype");
  if (code >= kNumDTypes) {
    r.fail_at(dtype_offset,
              str_cat("tensor '", name, "' has unknown dtype code ", static_cast<int>(code)));
  }
  const auto dtype = static_cast<DType>(code);
  const uint32_t rank = r.u32("rank");
  if (rank > kMaxRank)
    r.fail(str_cat("tensor '", name, "' has rank ", rank, " (max ", kMaxRank, ")"));
  std::vector<int64_t> dims(rank);
  uint64_t expected = dtype_size(dtype);  // Bytes; overflow-checked below.
  bool overflow = false;
  for (uint32_t i = 0; i < rank; ++i) {
    const uint64_t d = r.u64("a dimension");
    if (d > static_cast<uint64_t>(INT64_MAX)) {
      r.fail(str_cat("tensor '", name, "' has a negative dimension ", static_cast<int64_t>(d)));
    }
    dims[i] = static_cast<int64_t>(d);
    overflow = overflow || __builtin_mul_overflow(expected, d, &expected);
  }
  if (overflow || expected > static_cast<uint64_t>(INT64_MAX)) {
    r.fail(str_cat("tensor '", name, "' has shape [", absl::StrJoin(dims, ", "),
                   "], too large to exist"));
  }
  const uint64_t length = r.u64("byte length");
  if (length != expected) {
    r.fail(str_cat("tensor '", name, "' of ", dtype_name(dtype), " shape [",
                   absl::StrJoin(dims, ", "), "] declares ", length, " bytes, expected ",
                   expected));
  }
  const char* data = r.take(length, "tensor data");
  Tensor t = Tensor::empty(Shape(absl::MakeConstSpan(dims)), dtype);
  if (length > 0) std::memcpy(t.raw_data(), data, length);
  return t;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TANDEM_CHECK(in.is_open(), "cannot open state dict file '", path, "': ", std::strerror(errno));
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  TANDEM_CHECK(!in.bad(), "cannot read state dict file '", path, "'");
  return bytes;
}

}  // namespace

void StateDict::insert(const std::string& name, Tensor tensor) {
  TANDEM_CHECK(!contains(name), "state dict already has an entry '", name, "'");
  index_.emplace(name, entries_.size());
  entries_.emplace_back(name, std::move(tensor));
}

const Tensor& StateDict::at(const std::string& name) const {
  auto it = index_.find(name);
  TANDEM_CHECK(it != index_.end(), "state dict has no entry '", name, "'");
  return entries_[it->second].second;
}

std::vector<std::string> StateDict::keys() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& entry : entries_) out.push_back(entry.first);
  return out;
}

void write_state_dict(const std::string& path, const StateDict& state) {
  const std::string bytes = encode(state);
  std::random_device random;
  const std::string tmp = str_cat(path, ".tmp-", random(), random());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    TANDEM_CHECK(out.is_open(), "cannot write state dict file '", path, "': cannot create '", tmp,
                 "': ", std::strerror(errno));
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out.good()) {
      out.close();
      std::remove(tmp.c_str());
      throw Error(str_cat("cannot write state dict file '", path, "': writing '", tmp,
                          "' failed (disk full?)"));
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    throw Error(str_cat("cannot write state dict file '", path, "': renaming '", tmp,
                        "' failed: ", ec.message()));
  }
}

StateDict read_state_dict(const std::string& path) {
  const std::string bytes = read_file(path);
  Reader r(path, bytes);
  const char* magic = r.take(sizeof(kMagic), "magic \"TNDMSD01\"");
  if (std::memcmp(magic, kMagic, sizeof(kMagic)) != 0) {
    throw Error(str_cat("state dict file '", path,
                        "': bad magic at byte offset 0, expected \"TNDMSD01\" (not a Tandem "
                        "state dict, or a newer format)"));
  }
  const uint64_t count = r.u64("tensor count");
  // Each entry takes at least 22 bytes (a 1-byte name, no dims, no data).
  if (count > r.remaining() / 22) {
    r.fail(str_cat("tensor count ", count, " cannot fit in the ", r.remaining(),
                   " bytes that follow (truncated or corrupt file)"));
  }
  StateDict state;
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t name_length = r.u64("name length");
    if (name_length == 0 || name_length > kMaxNameLength) {
      r.fail(str_cat("tensor ", i, " has name length ", name_length, ", expected 1..",
                     kMaxNameLength));
    }
    const size_t name_offset = r.offset();
    std::string name(r.take(name_length, "name"), name_length);
    if (state.contains(name)) {
      r.fail_at(name_offset, str_cat("duplicate tensor name '", name, "'"));
    }
    state.insert(name, decode_tensor(r, name));
  }
  if (r.remaining() != 0) {
    r.fail(str_cat(r.remaining(), " unexpected bytes after the last of ", count, " tensors"));
  }
  return state;
}

}  // namespace tandem::nn
