#include "serialization/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

#include "core/error.h"

namespace tandem::serialization {
namespace {

// A std::string may hold a NUL that the C calls below would silently cut the
// path at ("w.bin\0.txt" opening "w.bin"); refuse it (RELIABILITY.md F06).
void check_path(const std::string& path, const char* action) {
  // Escaped: the message itself would end at the NUL.
  TANDEM_CHECK(path.find('\0') == std::string::npos, "cannot ", action, " \"",
               absl::CHexEscape(path), "\": the path contains a NUL byte");
}

std::string errno_text(int error) { return std::strerror(error); }

const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// A name no other writer will pick: 64 random bits.
std::string temp_name(const std::string& path) {
  std::random_device random;
  const uint64_t bits = (static_cast<uint64_t>(random()) << 32) | random();
  return str_cat(path, ".tmp-", absl::Hex(bits, absl::kZeroPad16));
}

}  // namespace

std::vector<uint8_t> read_file(const std::string& path, uint64_t max_bytes) {
  InputFile file(path);
  TANDEM_CHECK(file.size() <= max_bytes, "cannot read '", path, "': it has ", file.size(),
               " bytes, more than the limit of ", max_bytes);
  std::vector<uint8_t> bytes(file.size());
  file.read_at(0, absl::MakeSpan(bytes));
  return bytes;
}

void MemorySource::read_at(uint64_t offset, absl::Span<uint8_t> out) const {
  TANDEM_INTERNAL_ASSERT(offset <= bytes_.size() && out.size() <= bytes_.size() - offset,
                         "read of ", out.size(), " bytes at ", offset, " from a buffer of ",
                         bytes_.size());
  if (!out.empty()) std::memcpy(out.data(), bytes_.data() + offset, out.size());
}

InputFile::InputFile(const std::string& path, bool no_follow) : path_(path) {
  check_path(path, "open");
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
  // It changes nothing for the regular files that get past fstat below.
  const int flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | (no_follow ? O_NOFOLLOW : 0);
  fd_ = ::open(path.c_str(), flags);
  if (fd_ < 0) {
    const int error = errno;
    TANDEM_CHECK(!(no_follow && error == ELOOP), "cannot open '", path,
                 "': it is a symbolic link, which is not followed here");
    TANDEM_CHECK(false, "cannot open '", path, "': ", errno_text(error));
  }
  struct stat info;
  if (::fstat(fd_, &info) != 0) {
    const int error = errno;
    ::close(fd_);
    TANDEM_CHECK(false, "cannot read '", path, "': fstat failed: ", errno_text(error));
  }
  if (!S_ISREG(info.st_mode)) {
    ::close(fd_);
    TANDEM_CHECK(false, "cannot read '", path, "': it is ", file_kind(info.st_mode),
                 ", not a regular file");
  }
  size_ = static_cast<uint64_t>(info.st_size);
}

InputFile::~InputFile() { ::close(fd_); }

void InputFile::read_at(uint64_t offset, absl::Span<uint8_t> out) const {
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n =
        ::pread(fd_, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    TANDEM_CHECK(n >= 0, "cannot read '", path_, "' at byte offset ", offset + done, ": ",
                 errno_text(errno));
    TANDEM_CHECK(n > 0, "cannot read '", path_, "': it ended at byte offset ", offset + done,
                 ", wanted bytes up to ", offset + out.size(), " (did it shrink while open?)");
    done += static_cast<size_t>(n);
  }
}

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  check_path(path_, "write");
  temp_path_ = temp_name(path_);
  // O_EXCL: never write through a file (or a planted link) already there.
  const int fd = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  TANDEM_CHECK(fd >= 0, "cannot write '", path_, "': cannot create '", temp_path_,
               "': ", errno_text(errno));
  file_ = ::fdopen(fd, "wb");
  if (file_ == nullptr) {
    const int error = errno;
    ::close(fd);
    ::unlink(temp_path_.c_str());
    TANDEM_CHECK(false, "cannot write '", path_, "': ", errno_text(error));
  }
}

AtomicFile::~AtomicFile() {
  if (committed_) return;
  if (file_ != nullptr) std::fclose(file_);
  ::unlink(temp_path_.c_str());
}

void AtomicFile::write(absl::Span<const uint8_t> bytes) {
  TANDEM_INTERNAL_ASSERT(file_ != nullptr, "write to '", path_, "' after commit or failure");
  if (bytes.empty()) return;
  if (std::fwrite(bytes.data(), 1, bytes.size(), file_) != bytes.size()) {
    const int error = errno;
    // Closed now, so that a caller who catches and carries on cannot write
    // into a file that has lost bytes.
    std::fclose(file_);
    file_ = nullptr;
    TANDEM_CHECK(false, "cannot write '", path_, "' (at byte ", written_, "): ", errno_text(error));
  }
  written_ += bytes.size();
}

void AtomicFile::write(std::string_view bytes) {
  write(absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
}

void AtomicFile::commit() {
  TANDEM_INTERNAL_ASSERT(file_ != nullptr, "commit of '", path_, "' after commit or failure");
  // The buffered tail reaches the disk (and a full disk says so) only here.
  const bool flushed = std::fflush(file_) == 0 && ::fsync(::fileno(file_)) == 0;
  int error = errno;
  const bool closed = std::fclose(file_) == 0;
  file_ = nullptr;
  if (flushed && !closed) error = errno;
  TANDEM_CHECK(flushed && closed, "cannot write '", path_, "': ", errno_text(error));
  TANDEM_CHECK(::rename(temp_path_.c_str(), path_.c_str()) == 0, "cannot write '", path_,
               "': renaming '", temp_path_, "' over it failed: ", errno_text(errno));
  committed_ = true;
  // Make the rename itself durable; a file system that cannot sync a
  // directory has still renamed, so a failure here is not an error.
  const std::string::size_type slash = path_.rfind('/');
  const std::string folder = slash == std::string::npos ? "." : path_.substr(0, slash + 1);
  const int dir = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
}

}  // namespace tandem::serialization
