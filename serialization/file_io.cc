#include "serialization/file_io.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

#include "core/error.h"

namespace tandem::serialization {
namespace {

// A std::string may hold a NUL that the C calls below would silently cut the
// path at ("w.bin\0.txt" opening "w.bin"); refuse it (docs/security.md).
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

// Note [Atomic writes]: temporary files are ".tandem-tmp-" and 16 hex
// digits, 64 random bits: a name no other writer will pick.
constexpr std::string_view kTemporaryPrefix = ".tandem-tmp-";
constexpr size_t kTemporaryDigits = 16;

std::string random_temporary_name() {
  std::random_device random;
  const uint64_t bits = (static_cast<uint64_t>(random()) << 32) | random();
  return str_cat(kTemporaryPrefix, absl::Hex(bits, absl::kZeroPad16));
}

bool is_temporary_name(std::string_view name) {
  return name.size() == kTemporaryPrefix.size() + kTemporaryDigits &&
         name.substr(0, kTemporaryPrefix.size()) == kTemporaryPrefix &&
         std::all_of(name.begin() + kTemporaryPrefix.size(), name.end(),
                     [](char c) { return absl::ascii_isdigit(c) || (c >= 'a' && c <= 'f'); });
}

// The folder part of `path`: "." for a bare name.
std::string folder_of(const std::string& path) {
  const std::string::size_type slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

bool file_exists(const std::string& path) {
  struct stat info;
  return !path.empty() && ::stat(path.c_str(), &info) == 0;
}

// The file that `path` names once every symbolic link on the way is
// followed (the link's target may not exist yet); `path` when it is no link.
std::string resolve_links(const std::string& path) {
  std::string current = path;
  // Linux's own limit on links followed in one lookup.
  for (int hops = 0; hops < 40; ++hops) {
    struct stat info;
    if (::lstat(current.c_str(), &info) != 0 || !S_ISLNK(info.st_mode)) return current;
    std::error_code error;
    const std::string target = std::filesystem::read_symlink(current, error).string();
    TANDEM_CHECK(!error, "cannot write '", path, "': cannot read the symbolic link '", current,
                 "': ", error.message());
    current =
        !target.empty() && target[0] == '/' ? target : str_cat(folder_of(current), "/", target);
  }
  TANDEM_CHECK(false, "cannot write '", path, "': more than 40 symbolic links in a chain");
}

// The open(2) errors of a kernel or file system without O_TMPFILE.
bool lacks_o_tmpfile(int error) {
  return error == EOPNOTSUPP || error == EISDIR || error == EINVAL;
}

// Gives the file open as `fd` the permission bits and owner of the file at
// `like`, when there is one.
void take_mode_and_owner(int fd, const std::string& like) {
  struct stat info;
  if (like.empty() || ::stat(like.c_str(), &info) != 0) return;
  // The owner first: chown clears set-user-ID bits, which fchmod then sets.
  // Without the privilege to give the file away the process stays its
  // owner, and may still set the group if it is a member.
  if ((info.st_uid != ::geteuid() || info.st_gid != ::getegid()) &&
      ::fchown(fd, info.st_uid, info.st_gid) != 0) {
    static_cast<void>(::fchown(fd, static_cast<uid_t>(-1), info.st_gid));
  }
  TANDEM_CHECK(::fchmod(fd, info.st_mode & 07777) == 0,
               "cannot give a temporary file the permissions of '", like, "': ", errno_text(errno));
}

// Removes the temporary files in `folder` whose writer is gone (Note [Atomic
// writes]): a file is stale once its lock can be taken, and it is removed
// only while this sweep holds that lock and the name still leads to it.
void remove_stale_temporaries(const std::string& folder) {
  DIR* dir = ::opendir(folder.c_str());
  if (dir == nullptr) return;  // Creating the new file will say why.
  const int dir_fd = ::dirfd(dir);
  while (const dirent* entry = ::readdir(dir)) {
    if (!is_temporary_name(entry->d_name)) continue;
    const int fd = ::openat(dir_fd, entry->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) continue;
    struct stat held, named;
    if (::fstat(fd, &held) == 0 && S_ISREG(held.st_mode) && ::flock(fd, LOCK_EX | LOCK_NB) == 0 &&
        ::fstatat(dir_fd, entry->d_name, &named, AT_SYMLINK_NOFOLLOW) == 0 &&
        named.st_dev == held.st_dev && named.st_ino == held.st_ino) {
      ::unlinkat(dir_fd, entry->d_name, 0);
    }
    ::close(fd);
  }
  ::closedir(dir);
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

AtomicFile::AtomicFile(std::string path, const Options& options) : path_(std::move(path)) {
  check_path(path_, "write");
  check_path(options.like, "read the permissions of");
  target_ = resolve_links(path_);
  folder_ = folder_of(target_);
  remove_stale_temporaries(folder_);
  int fd = -1;
  if (!options.named_temporary) {
    fd = ::open(folder_.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
    const int error = errno;
    TANDEM_CHECK(fd >= 0 || lacks_o_tmpfile(error), "cannot write '", path_,
                 "': cannot create a temporary file in '", folder_, "': ", errno_text(error));
  }
  if (fd >= 0) {
    // Held from the start, so that the file is never unlocked under a name.
    ::flock(fd, LOCK_EX);
  } else {
    fd = create_named_temporary();
  }
  file_ = ::fdopen(fd, "wb");
  if (file_ == nullptr) {
    const int error = errno;
    ::close(fd);
    discard_temporary();
    TANDEM_CHECK(false, "cannot write '", path_, "': ", errno_text(error));
  }
  try {
    take_mode_and_owner(::fileno(file_), file_exists(target_) ? target_ : options.like);
  } catch (const Error&) {
    discard_temporary();
    throw;
  }
}

int AtomicFile::create_named_temporary() {
  while (true) {
    temp_path_ = str_cat(folder_, "/", random_temporary_name());
    // O_EXCL: never write through a file (or a planted link) already there.
    const int fd = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno == EEXIST) continue;
    if (fd < 0) {
      const int error = errno;
      const std::string temp = std::exchange(temp_path_, std::string());
      TANDEM_CHECK(false, "cannot write '", path_, "': cannot create '", temp,
                   "': ", errno_text(error));
    }
    ::flock(fd, LOCK_EX);
    struct stat info;
    if (::fstat(fd, &info) == 0 && info.st_nlink > 0) return fd;
    // Another writer's sweep took it for stale before it was locked.
    ::close(fd);
  }
}

void AtomicFile::link_unnamed_temporary() {
  const int fd = ::fileno(file_);
  const std::string by_proc = str_cat("/proc/self/fd/", fd);
  while (true) {
    const std::string name = str_cat(folder_, "/", random_temporary_name());
    if (::linkat(AT_FDCWD, by_proc.c_str(), AT_FDCWD, name.c_str(), AT_SYMLINK_FOLLOW) == 0 ||
        // Without /proc the descriptor itself can be linked, with privilege.
        (errno == ENOENT && ::linkat(fd, "", AT_FDCWD, name.c_str(), AT_EMPTY_PATH) == 0)) {
      temp_path_ = name;
      return;
    }
    if (errno == EEXIST) continue;
    TANDEM_CHECK(false, "cannot write '", path_,
                 "': cannot link the finished temporary file into '", folder_,
                 "': ", errno_text(errno));
  }
}

void AtomicFile::discard_temporary() {
  // Unlinked while still locked, so that no sweep sees it unlocked.
  if (!temp_path_.empty()) ::unlink(temp_path_.c_str());
  temp_path_.clear();
  if (file_ != nullptr) std::fclose(file_);
  file_ = nullptr;
}

AtomicFile::~AtomicFile() {
  if (!committed_) discard_temporary();
}

void AtomicFile::write(absl::Span<const uint8_t> bytes) {
  TANDEM_INTERNAL_ASSERT(file_ != nullptr, "write to '", path_, "' after commit or failure");
  if (bytes.empty()) return;
  if (std::fwrite(bytes.data(), 1, bytes.size(), file_) != bytes.size()) {
    const int error = errno;
    // Discarded now, so that a caller who catches and carries on cannot
    // commit a file that has lost bytes.
    discard_temporary();
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
  if (std::fflush(file_) != 0 || ::fsync(::fileno(file_)) != 0) {
    const int error = errno;
    discard_temporary();
    TANDEM_CHECK(false, "cannot write '", path_, "': ", errno_text(error));
  }
  try {
    if (temp_path_.empty()) link_unnamed_temporary();
  } catch (const Error&) {
    discard_temporary();
    throw;
  }
  if (::rename(temp_path_.c_str(), target_.c_str()) != 0) {
    const int error = errno;
    const std::string temp = temp_path_;
    discard_temporary();
    TANDEM_CHECK(false, "cannot write '", path_, "': renaming '", temp, "' over '", target_,
                 "' failed: ", errno_text(error));
  }
  committed_ = true;
  // Closed (and unlocked) only now that the temporary name is gone. Every
  // byte is on disk already, so a close that reports an error lost nothing.
  std::fclose(file_);
  file_ = nullptr;
  // Make the rename itself durable; a file system that cannot sync a
  // folder has still renamed, so a failure here is not an error.
  const int dir = ::open(folder_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
}

}  // namespace tandem::serialization
