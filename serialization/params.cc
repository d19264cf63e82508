#include "serialization/params.h"

#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

#include "core/error.h"
#include "serialization/file_io.h"
#include "serialization/little_endian.h"
#include "serialization/tensor_check.h"

namespace tandem::serialization {
namespace {

// Tensor bytes are copied between file and storage as they lie in memory.
static_assert(std::endian::native == std::endian::little,
              "the params reader and writer assume a little-endian host");

// The layout is documented field by field in serialization/FORMAT.md.
constexpr std::string_view kMagic = "\x89TNDPRM\n";
constexpr uint16_t kMajorVersion = 1;
constexpr uint16_t kMinorVersion = 0;
constexpr uint32_t kByteOrderMark = 0x01020304;
constexpr uint32_t kSwappedByteOrderMark = 0x04030201;  // Written by a big-endian host.
constexpr uint64_t kHeaderSize = 36;
// What the header's checksum covers of the header itself: all but the checksum.
constexpr uint64_t kHeaderChecksummed = 32;
constexpr uint64_t kAlignment = 64;
constexpr uint32_t kMaxNameLength = 4096;
constexpr int kMaxRank = 32;
// The index is read into memory whole; a real one is a few bytes per tensor.
constexpr uint64_t kMaxIndexLength = uint64_t{256} << 20;

// An index entry: u32 name length, the name, u8 dtype, u8 rank, the dims,
// u64 offset, u64 length, u32 crc.
constexpr uint64_t entry_size(uint64_t name_length, int rank) {
  return 4 + name_length + 1 + 1 + 8 * static_cast<uint64_t>(rank) + 8 + 8 + 4;
}
constexpr uint64_t kMinEntrySize = entry_size(1, 0);

// The first bytes of files people hand us by mistake, for the bad-magic message.
struct ForeignFormat {
  std::string_view magic;
  std::string_view description;
};
constexpr ForeignFormat kForeignFormats[] = {
    {"PK\x03\x04", "a zip archive, such as a PyTorch checkpoint"},
    {"{", "JSON text, such as a Tandem graph file"},
    {"TNDMSD01",
     "an eager checkpoint in the old TNDMSD01 format, which this Tandem no longer reads"},
    {"\x93NUMPY", "a NumPy .npy file"},
};

uint64_t align_up(uint64_t offset) { return (offset + kAlignment - 1) / kAlignment * kAlignment; }

uint32_t crc32_of(const void* data, uint64_t length, uint32_t crc = 0) {
  // zlib takes a null pointer (an empty vector's data()) as "start again".
  if (length == 0) return crc;
  return static_cast<uint32_t>(crc32_z(crc, static_cast<const Bytef*>(data), length));
}

std::string hex32(uint32_t value) { return str_cat("0x", absl::Hex(value, absl::kZeroPad8)); }

// Why `name` cannot name a tensor, or nothing when it can: names are UTF-8
// text that prints on one line, in messages as in the graph JSON.
std::optional<std::string> name_problem(std::string_view name) {
  if (name.empty()) return "is empty";
  if (name.size() > kMaxNameLength) {
    return str_cat("is ", name.size(), " bytes long, more than ", kMaxNameLength);
  }
  // The smallest code point that needs each encoded length; below is overlong.
  constexpr uint32_t kMinCodePoint[] = {0, 0, 0x80, 0x800, 0x10000};
  for (size_t i = 0; i < name.size();) {
    const auto lead = static_cast<uint8_t>(name[i]);
    const int length = lead < 0x80           ? 1
                       : (lead >> 5) == 0x6  ? 2
                       : (lead >> 4) == 0xE  ? 3
                       : (lead >> 3) == 0x1E ? 4
                                             : 0;
    const std::string invalid = str_cat("is not valid UTF-8 (at byte ", i, ")");
    if (length == 0 || length > static_cast<int>(name.size() - i)) return invalid;
    uint32_t code = length == 1 ? lead : lead & (0x7F >> length);
    for (int k = 1; k < length; ++k) {
      const auto next = static_cast<uint8_t>(name[i + k]);
      if ((next & 0xC0) != 0x80) return invalid;
      code = (code << 6) | (next & 0x3F);
    }
    if (code < kMinCodePoint[length] || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) {
      return invalid;
    }
    if (code < 0x20 || (code >= 0x7F && code <= 0x9F)) {
      return str_cat("contains the control character U+",
                     absl::AsciiStrToUpper(str_cat(absl::Hex(code, absl::kZeroPad4))), " (at byte ",
                     i, ")");
    }
    i += length;
  }
  return std::nullopt;
}

// ---- Reading ----

// Every reading error: "params file '<name>': <problem> at byte offset N".
template <class... Args>
[[noreturn]] void fail(std::string_view file, uint64_t offset, const Args&... problem) {
  detail::throw_check_failure(
      str_cat("params file '", file, "': ", problem..., " at byte offset ", offset));
}

struct Header {
  uint64_t count = 0;
  uint64_t index_length = 0;
  uint32_t checksum = 0;
  uint8_t bytes[kHeaderSize] = {};
};

void check_magic(std::string_view file, absl::Span<const uint8_t> head) {
  const std::string_view seen(reinterpret_cast<const char*>(head.data()), head.size());
  if (kMagic.substr(0, seen.size()) == seen) return;  // A short file is caught as truncated.
  std::string guess;
  for (const auto& foreign : kForeignFormats) {
    if (seen.substr(0, foreign.magic.size()) == foreign.magic) {
      guess = str_cat(" (", foreign.description, ")");
    }
  }
  fail(file, 0, "not a Tandem params file: bad magic \"", absl::CHexEscape(detail::piece(seen)),
       "\"", guess, ", expected \"", absl::CHexEscape(detail::piece(kMagic)), "\"");
}

Header read_header(const ByteSource& source, std::string_view file) {
  const uint64_t size = source.size();
  if (size == 0) fail(file, 0, "the file is empty, expected a params header");
  Header header;
  source.read_at(0, absl::MakeSpan(header.bytes, std::min(size, kHeaderSize)));
  check_magic(file, absl::MakeConstSpan(header.bytes, std::min<uint64_t>(size, kMagic.size())));
  if (size < kHeaderSize) {
    fail(file, size, "truncated: the header needs bytes up to ", kHeaderSize, ", file has ", size);
  }
  // Before the version, which a big-endian writer would have swapped too.
  const uint32_t mark = load_le<uint32_t>(header.bytes + 12);
  if (mark == kSwappedByteOrderMark) fail(file, 12, "big-endian params file not supported");
  if (mark != kByteOrderMark) {
    fail(file, 12, "bad byte-order mark ", hex32(mark), ", expected ", hex32(kByteOrderMark));
  }
  const uint16_t major = load_le<uint16_t>(header.bytes + 8);
  const uint16_t minor = load_le<uint16_t>(header.bytes + 10);
  // A newer minor version only adds what older readers may ignore.
  if (major != kMajorVersion) {
    fail(file, 8, "params format version ", major, ".", minor,
         " is not supported: this Tandem reads version ", kMajorVersion, ".x",
         major > kMajorVersion ? " (the file comes from a newer Tandem)" : "");
  }
  header.count = load_le<uint64_t>(header.bytes + 16);
  header.index_length = load_le<uint64_t>(header.bytes + 24);
  header.checksum = load_le<uint32_t>(header.bytes + 32);
  // Sizes are checked against the file before anything is allocated for them.
  if (header.index_length > size - kHeaderSize) {
    fail(file, 24, "truncated: the index length ", header.index_length, " exceeds the ",
         size - kHeaderSize, " bytes after the header");
  }
  if (header.index_length > kMaxIndexLength) {
    fail(file, 24, "the index length ", header.index_length, " exceeds the limit of ",
         kMaxIndexLength, " bytes");
  }
  if (header.count > header.index_length / kMinEntrySize) {
    fail(file, 16, "the tensor count ", header.count, " cannot fit in an index of ",
         header.index_length, " bytes (an entry takes at least ", kMinEntrySize, ")");
  }
  return header;
}

// Reads the index's fields in order, each checked against the index's end.
class IndexCursor {
 public:
  IndexCursor(std::string_view file, absl::Span<const uint8_t> index)
      : file_(file), index_(index) {}

  // The file offset of the next field.
  uint64_t offset() const { return kHeaderSize + pos_; }
  uint64_t remaining() const { return index_.size() - pos_; }
  // Names the entry being read in messages.
  void start_entry(uint64_t entry) { entry_ = entry; }

  absl::Span<const uint8_t> take(uint64_t length, const char* what) {
    if (length > remaining()) {
      fail(file_, offset(), "index entry ", entry_, ": its ", what,
           " runs past the end of the index at byte ", kHeaderSize + index_.size());
    }
    const auto bytes = index_.subspan(pos_, length);
    pos_ += length;
    return bytes;
  }
  template <class T>
  T take_le(const char* what) {
    return load_le<T>(take(sizeof(T), what).data());
  }

 private:
  std::string_view file_;
  absl::Span<const uint8_t> index_;
  uint64_t pos_ = 0;
  uint64_t entry_ = 0;
};

class IndexParser {
 public:
  IndexParser(std::string_view file, uint64_t file_size, absl::Span<const uint8_t> index)
      : file_(file),
        file_size_(file_size),
        cursor_(file, index),
        end_(kHeaderSize + index.size()) {}

  // The entries, each checked on its own and against the one before.
  std::vector<ParamsEntry> parse(uint64_t count) {
    std::vector<ParamsEntry> entries;
    entries.reserve(count);  // read_header bounded it by the index length.
    for (uint64_t i = 0; i < count; ++i) {
      cursor_.start_entry(i);
      entries.push_back(parse_entry(i));
    }
    if (cursor_.remaining() != 0) {
      fail(file_, cursor_.offset(), "the index has ", cursor_.remaining(),
           " unused bytes after its last entry");
    }
    if (file_size_ != end_) {
      fail(file_, end_, "trailing bytes: the data ends at byte ", end_, ", the file has ",
           file_size_, " bytes");
    }
    return entries;
  }

 private:
  ParamsEntry parse_entry(uint64_t i) {
    ParamsEntry entry;
    const uint64_t name_at = cursor_.offset();
    const uint32_t name_length = cursor_.take_le<uint32_t>("name length");
    if (name_length == 0 || name_length > kMaxNameLength) {
      fail(file_, name_at, "index entry ", i, ": name length ", name_length, ", expected 1..",
           kMaxNameLength);
    }
    const auto name = cursor_.take(name_length, "name");
    entry.name.assign(name.begin(), name.end());
    if (auto problem = name_problem(entry.name)) {
      fail(file_, name_at + 4, "index entry ", i, ": the tensor name \"",
           absl::CHexEscape(entry.name), "\" ", *problem);
    }
    const auto [previous, inserted] = index_of_.try_emplace(entry.name, i);
    if (!inserted) {
      fail(file_, name_at + 4, "duplicate tensor name '", entry.name, "' (index entries ",
           previous->second, " and ", i, ")");
    }
    const std::string tensor = str_cat("tensor '", entry.name, "': ");

    const uint64_t dtype_at = cursor_.offset();
    const uint8_t code = cursor_.take_le<uint8_t>("dtype");
    if (code >= kNumDTypes) fail(file_, dtype_at, tensor, "unknown dtype code ", int{code});
    entry.dtype = static_cast<DType>(code);
    const uint64_t rank_at = cursor_.offset();
    const uint8_t rank = cursor_.take_le<uint8_t>("rank");
    if (rank > kMaxRank) {
      fail(file_, rank_at, tensor, "rank ", int{rank}, " exceeds the limit of ", kMaxRank);
    }
    const uint64_t dims_at = cursor_.offset();
    Shape::Dims dims(rank);
    for (auto& d : dims) d = static_cast<int64_t>(cursor_.take_le<uint64_t>("dimensions"));
    if (auto problem = shape_problem(dims, entry.dtype)) fail(file_, dims_at, tensor, *problem);
    entry.shape = Shape(dims);
    const uint64_t expected_length = entry.shape.numel() * dtype_size(entry.dtype);

    const uint64_t offset_at = cursor_.offset();
    entry.offset = cursor_.take_le<uint64_t>("data offset");
    entry.length = cursor_.take_le<uint64_t>("data length");
    entry.crc32 = cursor_.take_le<uint32_t>("checksum");
    if (entry.length != expected_length) {
      fail(file_, offset_at + 8, tensor, "shape ", entry.shape.to_string(), " ",
           dtype_name(entry.dtype), " needs ", expected_length, " bytes, the index says ",
           entry.length);
    }
    place(entry, offset_at, tensor);
    return entry;
  }

  // Tensors follow the index in index order, each at the first multiple of
  // 64 after the end of what precedes it; nothing else is allowed.
  void place(const ParamsEntry& entry, uint64_t offset_at, const std::string& tensor) {
    auto before = [&] {
      return previous_.empty() ? std::string("the index") : str_cat("tensor '", previous_, "'");
    };
    const uint64_t expected = align_up(end_);  // end_ <= file size: no overflow.
    if (entry.offset % kAlignment != 0) {
      fail(file_, offset_at, tensor, "data offset ", entry.offset, " is not a multiple of ",
           kAlignment);
    }
    if (entry.offset < expected) {
      fail(file_, offset_at, tensor, "data offset ", entry.offset, " overlaps ", before(),
           ", which ends at byte ", end_, " (expected offset ", expected, ")");
    }
    if (entry.offset > expected) {
      fail(file_, offset_at, tensor, "data offset ", entry.offset, " leaves a hole after ",
           before(), ": bytes [", end_, ", ", entry.offset, ") unused (expected offset ", expected,
           ")");
    }
    if (entry.offset > file_size_ || entry.length > file_size_ - entry.offset) {
      fail(file_, entry.offset, "truncated: tensor '", entry.name, "' needs bytes up to ",
           entry.offset + entry.length, ", file has ", file_size_);
    }
    end_ = entry.offset + entry.length;
    previous_ = entry.name;
  }

  std::string_view file_;
  uint64_t file_size_;
  IndexCursor cursor_;
  absl::flat_hash_map<std::string, uint64_t> index_of_;
  uint64_t end_;          // Of the index or the last placed tensor.
  std::string previous_;  // The last placed tensor; empty before the first.
};

// The padding before `entry` must be zero: no byte of the file goes unchecked.
void check_padding(const ByteSource& source, std::string_view file, uint64_t from,
                   const ParamsEntry& entry) {
  uint8_t padding[kAlignment];
  const auto span = absl::MakeSpan(padding, entry.offset - from);
  source.read_at(from, span);
  for (size_t k = 0; k < span.size(); ++k) {
    if (span[k] != 0) {
      fail(file, from + k, "non-zero padding byte ", "0x", absl::Hex(span[k], absl::kZeroPad2),
           " before tensor '", entry.name, "'");
    }
  }
}

Tensor read_tensor(const ByteSource& source, std::string_view file, const ParamsEntry& entry) {
  Tensor tensor = Tensor::empty(entry.shape, entry.dtype);
  // A fresh storage that no op uses yet: fill it directly.
  if (entry.length > 0) {
    source.read_at(entry.offset,
                   absl::MakeSpan(static_cast<uint8_t*>(tensor.raw_data()), entry.length));
  }
  const uint32_t computed = crc32_of(tensor.raw_data(), entry.length);
  if (computed != entry.crc32) {
    fail(file, entry.offset, "tensor '", entry.name, "': checksum mismatch (stored crc32 ",
         hex32(entry.crc32), ", computed ", hex32(computed), "); the file is corrupt");
  }
  if (entry.dtype == DType::kBool) {
    const auto* data = static_cast<const uint8_t*>(tensor.raw_data());
    if (auto i = invalid_bool(absl::MakeConstSpan(data, entry.length))) {
      fail(file, entry.offset + *i, "tensor '", entry.name, "': bool element ", *i,
           " has the byte value ", int{data[*i]}, ", expected 0 or 1");
    }
  }
  return tensor;
}

ParamsFile read_from(const ByteSource& source, std::string_view file) {
  const Header header = read_header(source, file);
  std::vector<uint8_t> index(header.index_length);
  source.read_at(kHeaderSize, absl::MakeSpan(index));
  ParamsFile out;
  out.entries = IndexParser(file, source.size(), index).parse(header.count);
  // After the structural checks, so that a damaged field gets its own message.
  const uint32_t computed =
      crc32_of(index.data(), index.size(), crc32_of(header.bytes, kHeaderChecksummed));
  if (computed != header.checksum) {
    fail(file, 32, "header checksum mismatch (stored crc32 ", hex32(header.checksum), ", computed ",
         hex32(computed), "); the file is corrupt");
  }
  // Everything is checked; only now is memory allocated for the tensors.
  out.tensors.reserve(out.entries.size());
  uint64_t end = kHeaderSize + header.index_length;
  for (const ParamsEntry& entry : out.entries) {
    check_padding(source, file, end, entry);
    out.tensors.push_back({entry.name, read_tensor(source, file, entry)});
    end = entry.offset + entry.length;
  }
  return out;
}

}  // namespace

// ---- Writing ----

ParamsImage::ParamsImage(absl::Span<const NamedTensor> tensors, std::string_view display_name) {
  const std::string cannot = str_cat("cannot write params file '", display_name, "': ");
  // Every tensor is checked before anything is written.
  absl::flat_hash_set<std::string_view> seen;
  uint64_t index_length = 0;
  for (const NamedTensor& named : tensors) {
    const auto problem = name_problem(named.name);
    TANDEM_CHECK(!problem, cannot, "the tensor name \"", absl::CHexEscape(named.name), "\" ",
                 *problem);
    TANDEM_CHECK(seen.insert(named.name).second, cannot, "two tensors are named '", named.name,
                 "'");
    const Tensor& t = named.tensor;
    TANDEM_CHECK(t.defined(), cannot, "tensor '", named.name, "' is undefined");
    TANDEM_CHECK(t.device().is_cpu(), cannot, "tensor '", named.name, "' is on ",
                 t.device().to_string(), "; only CPU tensors can be saved");
    TANDEM_CHECK(t.rank() <= kMaxRank, cannot, "tensor '", named.name, "' has rank ", t.rank(),
                 ", more than the format's limit of ", kMaxRank);
    index_length += entry_size(named.name.size(), t.rank());
  }
  // Snapshots: a later assign_ cannot swap the bytes mid-write.
  uint64_t end = kHeaderSize + index_length;
  for (const NamedTensor& named : tensors) {
    Tensor value = named.tensor.snapshot();
    value.wait_to_read();
    ParamsEntry entry{named.name, value.dtype(), value.shape(), align_up(end), value.nbytes(), 0};
    entry.crc32 = crc32_of(value.raw_data(), entry.length);
    end = entry.offset + entry.length;
    entries_.push_back(std::move(entry));
    values_.push_back(std::move(value));
  }

  head_ = std::string(kMagic);
  append_le(head_, kMajorVersion);
  append_le(head_, kMinorVersion);
  append_le(head_, kByteOrderMark);
  append_le<uint64_t>(head_, entries_.size());
  for (const ParamsEntry& entry : entries_) {
    append_le(index_, static_cast<uint32_t>(entry.name.size()));
    index_ += entry.name;
    append_le(index_, static_cast<uint8_t>(entry.dtype));
    append_le(index_, static_cast<uint8_t>(entry.shape.rank()));
    for (int64_t d : entry.shape) append_le(index_, static_cast<uint64_t>(d));
    append_le(index_, entry.offset);
    append_le(index_, entry.length);
    append_le(index_, entry.crc32);
  }
  append_le<uint64_t>(head_, index_.size());
  checksum_ = crc32_of(index_.data(), index_.size(), crc32_of(head_.data(), head_.size()));
  append_le(head_, checksum_);
}

void ParamsImage::write_to(AtomicFile& out) const {
  TANDEM_INTERNAL_ASSERT(out.bytes_written() == 0, "a params image written after other bytes");
  out.write(head_);
  out.write(index_);
  static constexpr char kZeros[kAlignment] = {};
  for (size_t i = 0; i < entries_.size(); ++i) {
    const uint64_t padding = entries_[i].offset - out.bytes_written();
    TANDEM_INTERNAL_ASSERT(padding < kAlignment, "params layout: tensor ", i, " at ",
                           entries_[i].offset, " after byte ", out.bytes_written());
    out.write(std::string_view(kZeros, padding));
    out.write(absl::MakeConstSpan(static_cast<const uint8_t*>(values_[i].raw_data()),
                                  entries_[i].length));
  }
}

std::vector<ParamsEntry> write_params(const std::string& path,
                                      absl::Span<const NamedTensor> tensors) {
  const ParamsImage image(tensors, path);
  AtomicFile out(path);
  image.write_to(out);
  out.commit();
  return image.entries();
}

ParamsFile read_params(const std::string& path, bool no_follow) {
  const InputFile file(path, no_follow);
  return read_from(file, path);
}

ParamsFile parse_params(absl::Span<const uint8_t> bytes, std::string_view display_name) {
  return read_from(MemorySource(bytes), display_name);
}

}  // namespace tandem::serialization
