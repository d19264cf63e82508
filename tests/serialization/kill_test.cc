// A writer killed at any instant (kill -9, or the kernel stopping it at a
// chosen byte) leaves the old file or the new one, never neither, and no
// temporary files that pile up (Note [Atomic writes] in
// serialization/file_io.h, Note [Exporting two files] in
// serialization/model.cc). The writer is another process,
// tests/serialization/writer_child/writer_child.cc.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <random>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "serialization/model.h"
#include "tandem/tandem.h"
#include "tests/serialization/test_util.h"
#include "tests/serialization/writer_child/models.h"

extern char** environ;

namespace tandem {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::MatchesRegex;
using testing::ScratchDir;
using testing::writer_model;

// writer_child with `args`, its standard output read here.
class WriterChild {
 public:
  explicit WriterChild(std::vector<std::string> args) {
    args.insert(args.begin(), TANDEM_WRITER_CHILD_PATH);
    std::vector<char*> argv;
    for (std::string& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    int pipe_fds[2];
    EXPECT_EQ(::pipe2(pipe_fds, O_CLOEXEC), 0);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
    EXPECT_EQ(::posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&actions);
    ::close(pipe_fds[1]);
    out_ = pipe_fds[0];
  }
  ~WriterChild() {
    if (pid_ > 0) kill_and_wait();
    ::close(out_);
  }

  // Blocks until the child has written its file once more; false if it
  // ended first.
  bool wait_for_a_write() {
    char c;
    while (::read(out_, &c, 1) == 1) {
      if (c == '\n') return true;
    }
    return false;
  }
  // Waits for a child started with a file-size limit to be stopped by it
  // (SIGXFSZ); returns which model it wrote last, 0 if none (the old one).
  int wait_for_the_stop() {
    int writes = 0;
    while (wait_for_a_write()) ++writes;
    const int status = wait();
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGXFSZ) << "wait status " << status;
    return writes % 2;  // writer_child alternates 1, 0, 1, ...
  }
  // The child's wait status once it has ended by itself.
  int wait() {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }
  void kill_and_wait() {
    ::kill(pid_, SIGKILL);
    wait();
  }

 private:
  pid_t pid_ = -1;
  int out_ = -1;
};

std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

bool is_temporary(const std::string& name) {
  return std::regex_match(name, std::regex(R"(\.tandem-tmp-[0-9a-f]{16})"));
}

// A kill at a random instant within a write: after the first complete one
// (so that the file holds a model), within about two writes' time.
void kill_at_random(WriterChild& child, std::mt19937& rng) {
  ASSERT_TRUE(child.wait_for_a_write());
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(child.wait_for_a_write());
  const auto one_write = std::chrono::steady_clock::now() - start;
  std::this_thread::sleep_for(std::uniform_real_distribution<double>(0, 2)(rng) * one_write);
  child.kill_and_wait();
}

// Byte counts to stop a writer at: every early one, then a spread up to `size`.
std::vector<uint64_t> stop_points(uint64_t size) {
  std::vector<uint64_t> points = {0, 1, 8, 35, 36, 37, 64};
  for (uint64_t at = 100; at < size; at += size / 12 + 1) points.push_back(at);
  points.push_back(size - 1);
  return points;
}

// The state a checkpoint holds: which of writer_model(0) and (1) it is.
int which_checkpoint(const std::string& path) {
  const std::vector<float> weight = nn::read_state_dict(path).at("1.weight").to_vector<float>();
  for (int which : {0, 1}) {
    if (weight == writer_model(which)->state_dict().at("1.weight").to_vector<float>()) {
      return which;
    }
  }
  return -1;
}

class KillTest : public ::testing::Test {
 protected:
  ScratchDir dir_;
  std::mt19937 rng_{static_cast<uint32_t>(::testing::UnitTest::GetInstance()->random_seed())};
};

// Verifies that Module::save stopped at any byte of its file, or killed at
// a random instant, leaves the old checkpoint or the new one and nothing
// else (an unnamed temporary file dies with its writer).
TEST_F(KillTest, ModuleSave) {
  const std::string path = dir_.file("model.params");
  writer_model(0)->save(path);
  for (uint64_t limit : stop_points(fs::file_size(path))) {
    WriterChild child({"save", path, std::to_string(limit)});
    const int last = child.wait_for_the_stop();
    EXPECT_THAT(names_in(dir_.path()), ElementsAre("model.params")) << limit;
    EXPECT_EQ(which_checkpoint(path), last) << limit;
  }
  for (int attempt = 0; attempt < 12; ++attempt) {
    WriterChild child({"save", path});
    kill_at_random(child, rng_);
    const std::vector<std::string> names = names_in(dir_.path());
    // A name is left only by a kill between link and rename; the next
    // save removes it.
    EXPECT_TRUE(names.size() == 1 || (names.size() == 2 && is_temporary(names[0])))
        << ::testing::PrintToString(names);
    EXPECT_NE(which_checkpoint(path), -1) << attempt;
  }
  writer_model(1)->save(path);
  EXPECT_THAT(names_in(dir_.path()), ElementsAre("model.params"));
}

// Verifies the same where the temporary file is named from the start (a file
// system without O_TMPFILE): a killed writer leaves a recognizable name,
// which the next write in the folder removes.
TEST_F(KillTest, NamedTemporaryFiles) {
  const std::string path = dir_.file("model.params");
  writer_model(0)->save(path);
  for (uint64_t limit : stop_points(fs::file_size(path))) {
    WriterChild child({"named", path, std::to_string(limit)});
    const int last = child.wait_for_the_stop();
    const std::vector<std::string> names = names_in(dir_.path());
    ASSERT_EQ(names.size(), 2u) << limit;
    EXPECT_TRUE(is_temporary(names[0])) << names[0];
    EXPECT_EQ(which_checkpoint(path), last) << limit;
    writer_model(0)->save(path);  // Sweeps the stale one.
    EXPECT_THAT(names_in(dir_.path()), ElementsAre("model.params")) << limit;
  }
}

// The outputs of writer_model(0) and (1), exported and loaded in this
// process, to tell which one a killed export left.
class KillExportTest : public KillTest {
 protected:
  void SetUp() override {
    for (int which : {0, 1}) {
      auto model = writer_model(which);
      testing::prepare_export(*model);
      model->export_model(dir_.file("reference" + std::to_string(which)));
      outputs_[which] = load(dir_.file("reference" + std::to_string(which) + ".json"))
                            .run({input_})[0]
                            .to_vector<float>();
    }
    fs::create_directory(dir_.file("model"));
  }

  // Which model the export at `path` holds now; -1 if it does not load.
  int which_model(const std::string& path) {
    try {
      const std::vector<float> got = load(path + ".json").run({input_})[0].to_vector<float>();
      for (int which : {0, 1}) {
        if (got == outputs_[which]) return which;
      }
    } catch (const Error& e) {
      ADD_FAILURE() << e.what();
    }
    return -1;
  }

  // The model folder holds the graph file, one or two params files (two
  // after a kill between the renames, until the next export) and at most
  // one temporary file (a kill between link and rename).
  void expect_few_files(const std::string& context) {
    int params = 0, temporary = 0, graph = 0;
    for (const std::string& name : names_in(dir_.file("model"))) {
      if (name == "m.json") {
        ++graph;
      } else if (std::regex_match(name, std::regex(R"(m\.[0-9a-f]{8}\.params)"))) {
        ++params;
      } else if (is_temporary(name)) {
        ++temporary;
      } else {
        ADD_FAILURE() << context << ": unexpected file " << name;
      }
    }
    EXPECT_EQ(graph, 1) << context;
    EXPECT_TRUE(params >= 1 && params <= 2) << context << ": " << params << " params files";
    EXPECT_LE(temporary, 1) << context;
  }

  const Tensor input_ = testing::writer_model_input();
  std::vector<float> outputs_[2];
};

// Verifies Note [Exporting two files]: an export stopped at any byte of
// either file, or killed at a random instant, leaves a model that loads and
// gives the old outputs or the new ones; the next export leaves the graph
// file and its params file alone.
TEST_F(KillExportTest, ExportModel) {
  const std::string path = dir_.file("model/m");
  auto first = writer_model(0);
  testing::prepare_export(*first);
  first->export_model(path);
  ASSERT_GT(fs::file_size(path + ".json"), fs::file_size(testing::params_path_of(path + ".json")))
      << "the limits below must stop some exports in the graph file";
  for (uint64_t limit : stop_points(fs::file_size(path + ".json"))) {
    WriterChild child({"export", path, std::to_string(limit)});
    const int last = child.wait_for_the_stop();
    expect_few_files("stopped at byte " + std::to_string(limit));
    EXPECT_EQ(which_model(path), last) << limit;
  }
  for (int attempt = 0; attempt < 20; ++attempt) {
    WriterChild child({"export", path});
    kill_at_random(child, rng_);
    expect_few_files("kill " + std::to_string(attempt));
    EXPECT_NE(which_model(path), -1) << attempt;
  }
  first->export_model(path);
  EXPECT_EQ(which_model(path), 0);
  const std::vector<std::string> names = names_in(dir_.file("model"));
  ASSERT_EQ(names.size(), 2u) << ::testing::PrintToString(names);
  EXPECT_THAT(names[0], MatchesRegex(R"(m\.[0-9a-f]{8}\.params)"));
  EXPECT_EQ(names[1], "m.json");
}

}  // namespace
}  // namespace tandem
