// Files from and to disk (serialization/file_io.h): only regular files are
// read, symbolic links are refused on request, sizes are capped, and an
// atomic write either replaces the file whole or leaves it as it was, with no
// temporary file behind.
#include "serialization/file_io.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/error.h"
#include "tests/serialization/raw_file.h"
#include "tests/serialization/test_util.h"

namespace tandem::serialization {
namespace {

namespace fs = std::filesystem;
using ::tandem::testing::expect_error;
using ::tandem::testing::read_bytes;
using ::tandem::testing::ScratchDir;
using ::tandem::testing::write_bytes;
using ::testing::ElementsAre;

std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string as_string(const std::vector<uint8_t>& bytes) { return {bytes.begin(), bytes.end()}; }

// Verifies that read_file returns a regular file's bytes, and refuses files
// over the cap before reading them.
TEST(FileIoTest, ReadFileAndItsCap) {
  ScratchDir dir;
  const std::string path = dir.file("a.bin");
  write_bytes(path, std::string("ab\0c", 4));
  EXPECT_EQ(as_string(read_file(path, 4)), std::string("ab\0c", 4));
  write_bytes(dir.file("empty"), "");
  EXPECT_TRUE(read_file(dir.file("empty"), 0).empty());
  expect_error([&] { read_file(path, 3); },
               {"cannot read '" + path + "': it has 4 bytes, more than the limit of 3"});
}

// Verifies F04/F06: what is not a regular file, or has no valid path, is
// refused naming the path, and a FIFO does not hang the open.
TEST(FileIoTest, RefusesWhatIsNotARegularFile) {
  ScratchDir dir;
  expect_error([&] { read_file(dir.file("none"), 10); },
               {"cannot open '" + dir.file("none") + "': No such file or directory"});
  expect_error(
      [&] { read_file(dir.path().string(), 10); },
      {"cannot read '" + dir.path().string() + "': it is a directory, not a regular file"});
  const std::string fifo = dir.file("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  expect_error([&] { InputFile file(fifo); }, {"'" + fifo + "': it is a FIFO"});
  expect_error([&] { read_file("/dev/zero", 10); }, {"it is a character device"});
  const std::string with_nul("w.bin\0.txt", 10);
  expect_error([&] { InputFile file(with_nul); },
               {"cannot open \"w.bin\\x00.txt\": the path contains a NUL byte"});
  expect_error([&] { AtomicFile file(with_nul); },
               {"cannot write \"w.bin\\x00.txt\": the path contains a NUL byte"});
}

// Verifies F03/F07: a symbolic link is followed unless no_follow says not to.
TEST(FileIoTest, NoFollowRefusesSymbolicLinks) {
  ScratchDir dir;
  const std::string target = dir.file("target");
  const std::string link = dir.file("link");
  write_bytes(target, "data");
  fs::create_symlink(target, link);
  EXPECT_EQ(InputFile(link).size(), 4u);
  EXPECT_EQ(InputFile(target, /*no_follow=*/true).size(), 4u);
  expect_error([&] { InputFile file(link, /*no_follow=*/true); },
               {"cannot open '" + link + "': it is a symbolic link, which is not followed here"});
}

// Verifies that read_at reads any range, and that a read past the end names
// the path and the offsets.
TEST(FileIoTest, ReadAt) {
  ScratchDir dir;
  const std::string path = dir.file("f");
  write_bytes(path, "0123456789");
  const InputFile file(path);
  EXPECT_EQ(file.path(), path);
  std::string out(4, '\0');
  file.read_at(3, absl::MakeSpan(reinterpret_cast<uint8_t*>(out.data()), out.size()));
  EXPECT_EQ(out, "3456");
  file.read_at(10, {});
  expect_error([&] { file.read_at(8, absl::MakeSpan(reinterpret_cast<uint8_t*>(out.data()), 4)); },
               {"cannot read '" + path + "': it ended at byte offset 10, wanted bytes up to 12"});
}

// Verifies that reading a memory image past its end is reported as a Tandem
// bug: loaders must check ranges first.
TEST(FileIoTest, MemorySourceBounds) {
  const uint8_t bytes[4] = {1, 2, 3, 4};
  const MemorySource source(bytes);
  EXPECT_EQ(source.size(), 4u);
  uint8_t out[2];
  source.read_at(2, out);
  EXPECT_THAT(out, ElementsAre(3, 4));
  expect_error([&] { source.read_at(3, out); }, {"This is a Tandem bug"});
  expect_error([&] { source.read_at(~uint64_t{0}, out); }, {"This is a Tandem bug"});
}

bool is_temporary_name(const std::string& name) {
  return std::regex_match(name, std::regex(R"(\.tandem-tmp-[0-9a-f]{16})"));
}

mode_t permissions_of(const std::string& path) {
  struct stat info;
  EXPECT_EQ(::stat(path.c_str(), &info), 0) << path;
  return info.st_mode & 07777;
}

// An AtomicFile's destination, which holds "old" before each test; each
// test runs with an unnamed temporary file (O_TMPFILE, where the file system
// has it) and with a named one.
class AtomicFileTest : public ::testing::TestWithParam<bool> {
 protected:
  AtomicFileTest() { write_bytes(path_, "old"); }

  AtomicFile::Options options(std::string like = "") const {
    return {.like = std::move(like), .named_temporary = GetParam()};
  }
  void save(const std::string& path, const std::string& bytes) const {
    AtomicFile out(path, options());
    out.write(bytes);
    out.commit();
  }

  ScratchDir dir_;
  const std::string path_ = dir_.file("out.bin");
};

// Verifies F08: commit replaces the file whole; until then the old file is
// untouched and the new bytes sit in a temporary file that has no name, or
// a recognizable one that does not depend on the destination's.
TEST_P(AtomicFileTest, Commit) {
  {
    AtomicFile out(path_, options());
    out.write(std::string_view("new "));
    const uint8_t more[] = {'b', 'y', 't', 'e', 's'};
    out.write(absl::MakeConstSpan(more));
    EXPECT_EQ(out.bytes_written(), 9u);
    EXPECT_EQ(read_bytes(path_), "old");
    const auto names = names_in(dir_.path());
    if (GetParam()) {
      ASSERT_EQ(names.size(), 2u);
      EXPECT_TRUE(is_temporary_name(names[0])) << names[0];
    } else {
      EXPECT_THAT(names, ElementsAre("out.bin"));  // O_TMPFILE: no name while written.
    }
    out.commit();
  }
  EXPECT_EQ(read_bytes(path_), "new bytes");
  EXPECT_THAT(names_in(dir_.path()), ElementsAre("out.bin"));
}

// Verifies F08/U3: an AtomicFile dropped without commit (an exception
// mid-save) leaves the old file and removes its temporary file.
TEST_P(AtomicFileTest, WithoutCommitLeavesNothing) {
  {
    AtomicFile out(path_, options());
    out.write(std::string_view("half a file"));
  }
  { AtomicFile unused(dir_.file("never.bin"), options()); }
  EXPECT_EQ(read_bytes(path_), "old");
  EXPECT_THAT(names_in(dir_.path()), ElementsAre("out.bin"));
}

// Verifies F08: a full disk (here a file-size limit, which fails the same
// write calls) is an error naming the path and errno's text, and leaves the
// old file and no temporary file.
TEST_P(AtomicFileTest, WriteFailure) {
  rlimit old_limit;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  rlimit small = old_limit;
  small.rlim_cur = 1000;
  // Past the limit the kernel sends SIGXFSZ, which would kill the process.
  auto* old_handler = signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  expect_error(
      [&] {
        AtomicFile out(path_, options());
        out.write(std::string(100000, 'x'));
        out.commit();
      },
      {"cannot write '" + path_ + "'", "File too large"});
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &old_limit), 0);
  signal(SIGXFSZ, old_handler);
  EXPECT_EQ(read_bytes(path_), "old");
  EXPECT_THAT(names_in(dir_.path()), ElementsAre("out.bin"));
}

// Verifies that a failed create or rename names the path and the reason,
// and that a failed rename removes the temporary file.
TEST_P(AtomicFileTest, CreateAndRenameFailures) {
  expect_error([&] { AtomicFile out(dir_.file("missing/out.bin"), options()); },
               {"cannot write '" + dir_.file("missing/out.bin") + "': cannot create",
                dir_.file("missing"), "No such file or directory"});
  const std::string folder = dir_.file("folder");
  fs::create_directory(folder);
  write_bytes(folder + "/inside", "x");
  expect_error([&] { save(folder, "data"); },
               {"cannot write '" + folder + "': renaming '" + dir_.file(".tandem-tmp-"),
                "over '" + folder + "' failed"});
  EXPECT_THAT(names_in(dir_.path()), ElementsAre("folder", "out.bin"));
}

// Verifies that replacing a file keeps its permission bits (a private
// checkpoint stays private), that a new file takes those of `like`, and
// that, with the privilege to, the owner is kept too.
TEST_P(AtomicFileTest, KeepsPermissionsAndOwner) {
  for (mode_t mode : {0600, 0640, 0444, 0755}) {
    ASSERT_EQ(::chmod(path_.c_str(), mode), 0);
    save(path_, "new");
    EXPECT_EQ(permissions_of(path_), mode);
    EXPECT_EQ(read_bytes(path_), "new");
  }
  ASSERT_EQ(::chmod(path_.c_str(), 0604), 0);
  const std::string fresh = dir_.file("fresh.bin");
  {
    AtomicFile out(fresh, options(path_));
    out.commit();
  }
  EXPECT_EQ(permissions_of(fresh), 0604u);
  if (::geteuid() == 0) {
    ASSERT_EQ(::chown(path_.c_str(), 1234, 5678), 0);
    save(path_, "owned");
    struct stat info;
    ASSERT_EQ(::stat(path_.c_str(), &info), 0);
    EXPECT_EQ(info.st_uid, 1234u);
    EXPECT_EQ(info.st_gid, 5678u);
  }
}

// Verifies that a destination that is a symbolic link (or a chain of them,
// relative or absolute, into another folder) is written through: the file
// at the end of the chain gets the new bytes and every link stays a link.
TEST_P(AtomicFileTest, WritesThroughSymbolicLinks) {
  fs::create_directory(dir_.file("real"));
  write_bytes(dir_.file("real/data.bin"), "old");
  fs::create_symlink("real/data.bin", dir_.file("relative"));
  fs::create_symlink(dir_.file("relative"), dir_.file("absolute"));
  save(dir_.file("absolute"), "through two links");
  EXPECT_TRUE(fs::is_symlink(dir_.file("absolute")));
  EXPECT_TRUE(fs::is_symlink(dir_.file("relative")));
  EXPECT_EQ(read_bytes(dir_.file("real/data.bin")), "through two links");
  EXPECT_THAT(names_in(dir_.file("real")), ElementsAre("data.bin"));
  // A link to a file not there yet creates it.
  fs::create_symlink("real/later.bin", dir_.file("dangling"));
  save(dir_.file("dangling"), "created");
  EXPECT_TRUE(fs::is_symlink(dir_.file("dangling")));
  EXPECT_EQ(read_bytes(dir_.file("real/later.bin")), "created");
  // A loop is an error, not a hang.
  fs::create_symlink(dir_.file("loop_b"), dir_.file("loop_a"));
  fs::create_symlink(dir_.file("loop_a"), dir_.file("loop_b"));
  expect_error([&] { save(dir_.file("loop_a"), "x"); }, {"more than 40 symbolic links"});
}

// Verifies that any name the file system takes can be written, up to the
// 255 bytes of NAME_MAX: the temporary file's name does not grow with it.
TEST_P(AtomicFileTest, LongestFileNames) {
  for (size_t length : {245, 255}) {
    const std::string path = dir_.file(std::string(length, 'n'));
    save(path, "long");
    EXPECT_EQ(read_bytes(path), "long");
    save(path, "again");
    EXPECT_EQ(read_bytes(path), "again");
    fs::remove(path);
  }
  EXPECT_THAT(names_in(dir_.path()), ElementsAre("out.bin"));
}

// Verifies Note [Atomic writes]: a temporary file that no writer holds (its
// writer was killed) is removed by the next AtomicFile in the folder; one
// whose writer still holds it, or a name that only looks alike, is kept.
TEST_P(AtomicFileTest, RemovesStaleTemporaryFiles) {
  const std::string stale = dir_.file(".tandem-tmp-0123456789abcdef");
  const std::string held = dir_.file(".tandem-tmp-fedcba9876543210");
  const std::string alike = dir_.file(".tandem-tmp-0123");
  write_bytes(stale, "left by a killed writer");
  write_bytes(held, "being written");
  write_bytes(alike, "someone else's");
  fs::create_symlink(path_, dir_.file(".tandem-tmp-00000000000000aa"));
  const int fd = ::open(held.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX), 0);
  save(path_, "new");
  ::close(fd);
  EXPECT_THAT(names_in(dir_.path()), ElementsAre(".tandem-tmp-00000000000000aa", ".tandem-tmp-0123",
                                                 ".tandem-tmp-fedcba9876543210", "out.bin"));
  EXPECT_EQ(read_bytes(path_), "new");
}

INSTANTIATE_TEST_SUITE_P(Serialization, AtomicFileTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Named" : "Unnamed"; });

}  // namespace
}  // namespace tandem::serialization
