// Files from and to disk, the way every Tandem file is read and written.
//
//   std::vector<uint8_t> bytes = read_file("model.json", /*max_bytes=*/64 << 20);
//   AtomicFile out("model.params");   // a temporary file in the same folder
//   out.write(header);
//   out.commit();                     // fsync, then rename over "model.params"
//
// Reading trusts nothing: only a regular file is read (a FIFO or /dev/zero
// would never end), its size is checked against a cap before anything is
// allocated, and errors name the path. A path holding a NUL byte is refused
// rather than cut short at it. Writing never truncates the
// destination in place: a failed or interrupted save, even a killed process,
// leaves the old file byte for byte, and no
// temporary file behind (Note [Atomic writes]).
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
//; opening never blocks, even on a FIFO.
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

// Note [Atomic writes]
// A file is written whole or not at all, and a writer that dies at any
// instant (kill -9, a crash, a full disk) leaves the old file byte for byte
// and nothing else behind:
//
// * The bytes go to a temporary file in the destination's folder (so that
//   the final rename cannot cross file systems). Where the file system has
//   Linux's O_TMPFILE (ext4, xfs, btrfs, tmpfs), the temporary file has no
//   name while it is written: a dead writer's file vanishes with its
//   descriptor. commit() fsyncs it, links it into the folder under a
//   temporary name and renames that over the destination, so only a writer
//   killed between those two calls leaves a name behind.
// * Elsewhere the temporary file is named from the start. Either way the
//   name is ".tandem-tmp-<16 random hex digits>": its length does not depend
//   on the destination's (any name the file system accepts can be written),
//   and it is recognizable. Its writer holds an flock(2) on it, which the
//   kernel drops when the writer dies, so the next AtomicFile in that folder
//   removes every such file that nobody holds: a stale one. (A writer that
//   finds its new file already removed by such a sweep starts another.)
// * The new file gets the permission bits and, where the process may set
//   it, the owner of the file it replaces (or of `like`, see Options); a
//   new file gets 0666 less the umask, as open(2) gives.
// * A destination that is a symbolic link is written through: the file the
//   link points to (after every link in a chain) is replaced, and the link
//   stays. A replaced file's other hard links keep the old bytes.
// * After the rename, the folder is fsynced, so that the new name is on
//   disk before anything written next (export writes the params file, then
//   the graph file that names it).
//
// Several AtomicFiles may write to one folder at once; two writing the same
// destination at once each write it whole, and the last rename wins.

// A file written atomically to `path` (Note [Atomic writes]).
//
//   AtomicFile out("model.params");
//   out.write(header);
//   out.commit();   // Now "model.params" holds all of it; before, the old bytes.
//
// Destroyed without commit(), it removes its temporary file. A write or
// commit that fails leaves `path` as it was; the object can then only be
// destroyed.
class AtomicFile {
 public:
  struct Options {
    // Where a file that does not exist yet takes its permission bits and
    // owner from, if that file exists (the exporter names its previous
    // params file). Empty: from nothing, 0666 less the umask.
    std::string like;
    // Always a named temporary file, even where the file system has
    // O_TMPFILE: for tests of that path.
    bool named_temporary = false;
  };

  // Throws tandem::Error naming `path` if the temporary file cannot be
  // created (no such folder, no permission, a NUL in the path).
  explicit AtomicFile(std::string path) : AtomicFile(std::move(path), Options()) {}
  AtomicFile(std::string path, const Options& options);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Throws tandem::Error naming the path (and errno's text: "No space left
  // on device") on failure.
  void write(absl::Span<const uint8_t> bytes);
  void write(std::string_view bytes);
  uint64_t bytes_written() const { return written_; }
  // Flushes and fsyncs the temporary file, then renames it over the
  // destination: afterwards `path` holds all the new bytes, before it the
  // old ones.
  void commit();

 private:
  // Creates and locks a named temporary file in folder_; returns its descriptor.
  int create_named_temporary();
  // Gives the unnamed temporary file a temporary name in folder_.
  void link_unnamed_temporary();
  // Removes the temporary file, named or not, and closes it.
  void discard_temporary();

  std::string path_;       // As given, for messages.
  std::string target_;     // path_, or the file its symbolic links lead to.
  std::string folder_;     // target_'s folder, where the temporary file lies.
  std::string temp_path_;  // The temporary file's name; empty while it has none.
  std::FILE* file_ = nullptr;
  uint64_t written_ = 0;
  bool committed_ = false;
};

}  // namespace tandem::serialization
