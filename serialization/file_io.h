// Files from and to disk, the way every Tandem file is read and written.
//
//   std::vector<uint8_t> bytes = read_file("model.json", /*max_bytes=*/64 << 20);
//   AtomicFile out("model.params");   // writes "model.params.tmp-<random>"
//   out.write(header);
//   out.commit();                     // fsync, then rename over "model.params"
//
// Reading trusts nothing: only a regular file is read (a FIFO or /dev/zero
// would never end), its size is checked against a cap before anything is
// allocated, and errors name the path. A path holding a NUL byte is refused
// rather than cut short at it. Writing never truncates the
// destination in place: a failed or interrupted save leaves the old file
// byte for byte (shared/RELIABILITY.md F08), and no temporary file behind.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "absl/types/span.h"

namespace tandem::serialization {

// The whole of the regular file at `path`. Throws tandem::Error naming the
// path if it cannot be opened, is not a regular file (directory, FIFO,
// device) or is larger than `max_bytes`.
std::vector<uint8_t> read_file(const std::string& path, uint64_t max_bytes);

// Bytes that a loader reads piece by piece: an open file, or a file's image
// in memory. The params and .npy loaders read through this one interface, so
// that a file and a buffer get the same checks from the same code.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual uint64_t size() const = 0;
  // Copies exactly `out.size()` bytes at `offset` into `out`; throws
  // tandem::Error if the source ends first.
  virtual void read_at(uint64_t offset, absl::Span<uint8_t> out) const = 0;
};

// A file image in memory, which must outlive the MemorySource. Loaders check
// every range against size() before reading, so reading past the end is a
// Tandem bug (TANDEM_INTERNAL_ASSERT), not a bad file.
class MemorySource final : public ByteSource {
 public:
  explicit MemorySource(absl::Span<const uint8_t> bytes) : bytes_(bytes) {}
  uint64_t size() const override { return bytes_.size(); }
  void read_at(uint64_t offset, absl::Span<uint8_t> out) const override;

 private:
  absl::Span<const uint8_t> bytes_;
};

// An open regular file read piece by piece (the params loader reads its
// header first and each tensor into its own storage). Symbolic links are not
// followed when `no_follow` is true. The file is opened once and checked on
// the open descriptor, so it cannot be swapped between check and read
// (shared/RELIABILITY.md F07); opening never blocks, even on a FIFO.
class InputFile final : public ByteSource {
 public:
  explicit InputFile(const std::string& path, bool no_follow = false);
  ~InputFile() override;
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  // The size when the file was opened.
  uint64_t size() const override { return size_; }
  const std::string& path() const { return path_; }
  // Reads exactly `out.size()` bytes at `offset`; throws naming the path and
  // offset if the file ends first (it shrank since it was opened).
  void read_at(uint64_t offset, absl::Span<uint8_t> out) const override;

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// A file written to a temporary name beside `path` ("<path>.tmp-<16 random
// hex digits>", in the same folder so that the rename cannot cross file
// systems) and renamed over `path` by commit(). Destroyed without commit(),
// it closes and removes the temporary file. A write or commit that fails
// leaves `path` as it was; the object can then only be destroyed.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Throws tandem::Error naming the path (and errno's text: "No space left
  // on device") on failure.
  void write(absl::Span<const uint8_t> bytes);
  void write(std::string_view bytes);
  uint64_t bytes_written() const { return written_; }
  // Flushes, fsyncs and closes the temporary file, then renames it over
  // `path`: afterwards `path` holds either the old bytes or all the new ones.
  void commit();

 private:
  std::string path_;
  std::string temp_path_;
  std::FILE* file_ = nullptr;
  uint64_t written_ = 0;
  bool committed_ = false;
};

}  // namespace tandem::serialization
