// Files from and to disk (serialization/file_io.h): only regular files are
// read, symbolic links are refused on request, sizes are capped, and an
// atomic write either replaces the file whole or leaves it as it was, with no
// temporary file behind (shared/RELIABILITY.md B.3).
#include "serialization/file_io.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>

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

// An AtomicFile's destination, which holds "old" before each test.
class AtomicFileTest : public ::testing::Test {
 protected:
  AtomicFileTest() { write_bytes(path_, "old"); }

  ScratchDir dir_;
  const std::string path_ = dir_.file("out.bin");
};

// Verifies F08: commit replaces the file whole; until then the old file is
// untouched and the new bytes sit under "<path>.tmp-<16 hex digits>".
TEST_F(AtomicFileTest, Commit) {
  {
    AtomicFile out(path_);
    out.write(std::string_view("new "));
    const uint8_t more[] = {'b', 'y', 't', 'e', 's'};
    out.write(absl::MakeConstSpan(more));
    EXPECT_EQ(out.bytes_written(), 9u);
    EXPECT_EQ(read_bytes(path_), "old");
    const auto names = names_in(dir_.path());
    ASSERT_EQ(names.size(), 2u);
    EXPECT_TRUE(std::regex_match(names[1], std::regex(R"(out\.bin\.tmp-[0-9a-f]{16})")))
        << names[1];
    out.commit();
  }
  EXPECT_EQ(read_bytes(path_), "new bytes");
  EXPECT_THAT(names_in(dir_.path()), ElementsAre("out.bin"));
}

// Verifies F08/U3: an AtomicFile dropped without commit (an exception
// mid-save) leaves the old file and removes its temporary file.
TEST_F(AtomicFileTest, WithoutCommitLeavesNothing) {
  {
    AtomicFile out(path_);
    out.write(std::string_view("half a file"));
  }
  { AtomicFile unused(dir_.file("never.bin")); }
  EXPECT_EQ(read_bytes(path_), "old");
  EXPECT_THAT(names_in(dir_.path()), ElementsAre("out.bin"));
}

// Verifies F08: a full disk (here a file-size limit, which fails the same
// write calls) is an error naming the path and errno's text, and leaves the
// old file and no temporary file.
TEST_F(AtomicFileTest, WriteFailure) {
  rlimit old_limit;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  rlimit small = old_limit;
  small.rlim_cur = 1000;
  // Past the limit the kernel sends SIGXFSZ, which would kill the process.
  auto* old_handler = signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  expect_error(
      [&] {
        AtomicFile out(path_);
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
TEST(FileIoTest, AtomicFileCreateAndRenameFailures) {
  ScratchDir dir;
  expect_error([&] { AtomicFile out(dir.file("missing/out.bin")); },
               {"cannot write '" + dir.file("missing/out.bin") + "': cannot create '" +
                    dir.file("missing/out.bin.tmp-"),
                "No such file or directory"});
  const std::string folder = dir.file("folder");
  fs::create_directory(folder);
  write_bytes(folder + "/inside", "x");
  expect_error(
      [&] {
        AtomicFile out(folder);
        out.write(std::string_view("data"));
        out.commit();
      },
      {"cannot write '" + folder + "': renaming '" + folder + ".tmp-", "over it failed"});
  EXPECT_THAT(names_in(dir.path()), ElementsAre("folder"));
}

}  // namespace
}  // namespace tandem::serialization
