// The process that the kill tests (tests/serialization/kill_test.cc) kill:
// it writes one file or model over and over, alternating writer_model(1)
// and writer_model(0), and prints a line after each complete write.
//
//   writer_child save PATH [LIMIT]     nn::Module::save(PATH)
//   writer_child export PATH [LIMIT]   nn::Module::export_model(PATH)
//   writer_child named PATH [LIMIT]    an AtomicFile with a named temporary
//                                      file, holding the params of save
//
// With LIMIT, the process may write files of at most LIMIT bytes: the kernel
// kills it (SIGXFSZ) at the write that would pass that byte of its first
// file, a deterministic kill at a chosen byte. Without, it runs until killed.
#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "serialization/file_io.h"
#include "serialization/params.h"
#include "tandem/tandem.h"
#include "tests/serialization/writer_child/models.h"

namespace {

using namespace tandem;

void write_named(const std::string& path, nn::Module& model) {
  std::vector<serialization::NamedTensor> tensors;
  for (const auto& [name, tensor] : model.state_dict()) tensors.push_back({name, tensor});
  const serialization::ParamsImage image(tensors, path);
  serialization::AtomicFile out(path, {.like = "", .named_temporary = true});
  image.write_to(out);
  out.commit();
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc < 3 || argc > 4) {
    std::fprintf(stderr, "usage: writer_child save|export|named PATH [LIMIT]\n");
    return 2;
  }
  const std::string mode = argv[1], path = argv[2];
  std::shared_ptr<nn::Module> models[2] = {testing::writer_model(0), testing::writer_model(1)};
  if (mode == "export") {
    for (auto& model : models) testing::prepare_export(*model);
  }
  if (argc == 4) {
    const rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    const rlim_t limit = std::strtoull(argv[3], nullptr, 10);
    const rlimit file_size = {limit, limit};
    setrlimit(RLIMIT_FSIZE, &file_size);
  }
  for (long count = 1;; ++count) {
    nn::Module& model = *models[count % 2];
    if (mode == "save") {
      model.save(path);
    } else if (mode == "export") {
      model.export_model(path);
    } else if (mode == "named") {
      write_named(path, model);
    } else {
      std::fprintf(stderr, "writer_child: unknown mode '%s'\n", mode.c_str());
      return 2;
    }
    std::printf("%ld\n", count);
    std::fflush(stdout);
  }
} catch (const std::exception& e) {
  std::fprintf(stderr, "writer_child: %s\n", e.what());
  return 1;
}
