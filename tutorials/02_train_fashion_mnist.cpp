// Tutorial 2: train a CNN on Fashion-MNIST, eagerly.
//
// This is the README's main demo. Every op below is pushed to the engine and
// returns at once; the program waits only when it reads a number (the loss
// and accuracy it prints), so data loading, the forward and backward passes
// and the optimizer's updates overlap on the machine's cores.
//
//   build/release/tutorials/02_train_fashion_mnist                 # CNN, 3 epochs, ~91%, ~2 min
//   build/release/tutorials/02_train_fashion_mnist --model mlp     # MLP, 10 epochs, ~89%, ~25 s
//   build/release/tutorials/02_train_fashion_mnist --quick         # a smoke run (what CI does)
//   build/release/tutorials/02_train_fashion_mnist --hybridize     # the training step as a graph
//   build/release/tutorials/02_train_fashion_mnist --device cuda   # train on the GPU
//   mpirun -np 2 build/release/tutorials/02_train_fashion_mnist --distributed   # 2 processes
//   flags: --epochs N --batch-size B --lr X --seed S --export PATH --device cpu|cuda|cuda:N
//          --checkpoint PATH (the model after each epoch) --resume PATH (start from one)
//
// Steps:
//   1. Load the data set (Debian's dataset-fashion-mnist, installed by
//      tools/tandem.sh deps) and wrap it in DataLoaders (batches in pinned
//      memory when training on a GPU, so their copies there are direct).
//   2. Build the model from nn layers and move it to the device.
//   3. Train: each batch to the device, forward, loss, backward, optimizer
//      step; print progress.
//   4. Evaluate on the test set.
// With --distributed (under mpirun, or alone as a world of one), each
// process trains a replica on its own shard of every epoch
// (distributed::DistributedSampler) with batch-size / world-size rows per
// step, and distributed::DistributedDataParallel averages the gradients, so
// the replicas take the steps one process would take on the whole batch.
// Rank 0 alone prints, writes checkpoints and exports.
//
//   5. Export, from the CPU, the trained model (PATH.json and the params file
//      it names, PATH.<checksum>.params; PATH is fashion_mnist_<model> by
//      default) and a few test images as .npy files, for
//      tutorials/04_deploy.cpp and tools/tandem-run, which need none of this
//      code to run it.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "tandem/tandem.h"

#include "flags.h"
#include "progress.h"

using namespace tandem;
using Clock = std::chrono::steady_clock;

namespace {

struct Flags {
  std::string model = "cnn";
  int epochs = 0;  // 0: the model's default, 3 for the CNN and 10 for the MLP.
  int64_t batch_size = 128;
  double lr = 1e-3;
  uint64_t seed = 0;
  bool quick = false;
  bool hybridize = false;
  bool distributed = false;
  std::string export_path;  // Empty: fashion_mnist_<model>.
  std::string checkpoint;   // Written after each epoch when given.
  std::string resume;       // Read before training when given.
  Device device;            // --device cpu (the default), cuda or cuda:N.
};

Flags parse_command_line(int argc, char** argv) {
  Flags flags;
  parse_flags(
      argc, argv,
      {{"--model", [&](const std::string& v) { flags.model = v; }},
       {"--epochs", [&](const std::string& v) { flags.epochs = std::atoi(v.c_str()); }},
       {"--batch-size", [&](const std::string& v) { flags.batch_size = std::atoll(v.c_str()); }},
       {"--lr", [&](const std::string& v) { flags.lr = std::atof(v.c_str()); }},
       {"--seed",
        [&](const std::string& v) { flags.seed = std::strtoull(v.c_str(), nullptr, 10); }},
       {"--export", [&](const std::string& v) { flags.export_path = v; }},
       {"--checkpoint", [&](const std::string& v) { flags.checkpoint = v; }},
       {"--resume", [&](const std::string& v) { flags.resume = v; }},
       {"--device", [&](const std::string& v) { flags.device = Device::parse(v); }}},
      {{"--quick", [&] { flags.quick = true; }},
       {"--hybridize", [&] { flags.hybridize = true; }},
       {"--distributed", [&] { flags.distributed = true; }}},
      "--model cnn|mlp, --epochs, --batch-size, --lr, --seed, --quick, --hybridize, "
      "--distributed, --export PATH, --checkpoint PATH, --resume PATH, --device "
      "cpu|cuda|cuda:N");
  TANDEM_CHECK(flags.model == "cnn" || flags.model == "mlp", "--model must be cnn or mlp");
  if (flags.epochs == 0) flags.epochs = flags.model == "cnn" ? 3 : 10;
  if (flags.export_path.empty()) flags.export_path = "fashion_mnist_" + flags.model;
  TANDEM_CHECK(flags.epochs > 0 && flags.batch_size > 0 && flags.lr > 0,
               "--epochs, --batch-size and --lr must be positive");
  return flags;
}

// Two conv blocks and a classifier: ~0.4M parameters.
std::shared_ptr<nn::Module> make_cnn() {
  return std::make_shared<nn::Sequential>(
      nn::Conv2d(1, 32, 3, 1, 1), nn::BatchNorm2d(32), nn::ReLU(), nn::MaxPool2d(2),
      nn::Conv2d(32, 64, 3, 1, 1), nn::BatchNorm2d(64), nn::ReLU(), nn::MaxPool2d(2), nn::Flatten(),
      nn::Linear(64 * 7 * 7, 128), nn::ReLU(), nn::Dropout(0.25), nn::Linear(128, 10));
}

std::shared_ptr<nn::Module> make_mlp() {
  return std::make_shared<nn::Sequential>(nn::Flatten(), nn::Linear(28 * 28, 256), nn::ReLU(),
                                          nn::Linear(256, 128), nn::ReLU(), nn::Linear(128, 10));
}

// Images to float32 [B, 1, 28, 28], normalized with the training set's mean
// and standard deviation; labels to int64.
data::Batch prepare(data::Batch batch) {
  constexpr float kMean = 0.2860f, kStd = 0.3530f;
  Tensor images = data::to_float(batch[0], 1.0f / (255 * kStd), -kMean / kStd);
  return {images.reshape({-1, 1, 28, 28}), data::to_int64(batch[1])};
}

// Correct predictions in a batch, as a tensor (reading it would wait).
Tensor count_correct(const Tensor& logits, const Tensor& labels) {
  return sum(cast(eq(argmax(logits, 1), labels), DType::kInt64));
}

}  // namespace

int main(int argc, char** argv) try {
  Flags flags = parse_command_line(argc, argv);
  manual_seed(flags.seed);
  int rank = 0, world = 1;
  if (flags.distributed) {
    distributed::init();
    rank = distributed::rank();
    world = distributed::world_size();
    TANDEM_CHECK(flags.batch_size % world == 0, "--batch-size ", flags.batch_size,
                 " must divide among the ", world, " processes");
  }
  // Only rank 0 talks; the others train quietly.
  auto say = [rank](auto... args) {
    if (rank == 0) std::printf(args...);
  };

  // 1. The data: 60000 training and 10000 test images of 10 kinds of clothing.
  data::FashionMnist train = data::load_fashion_mnist("train");
  data::FashionMnist test = data::load_fashion_mnist("test");
  if (flags.quick) {  // A smoke run: a slice of each set, one epoch.
    train = {train.images.slice(0, 2048), train.labels.slice(0, 2048)};
    test = {test.images.slice(0, 1024), test.labels.slice(0, 1024)};
    flags.epochs = 1;
  }
  data::DataLoaderOptions train_options;
  train_options.batch_size = flags.batch_size / world;
  if (flags.distributed) {
    train_options.sampler = distributed::DistributedSampler({.seed = flags.seed});
  } else {
    train_options.shuffle = true;
    train_options.seed = flags.seed;
  }
  train_options.transform = prepare;
  train_options.pin_memory = flags.device.is_cuda();
  data::DataLoader train_loader({train.images, train.labels}, train_options);
  data::DataLoaderOptions test_options;
  test_options.batch_size = 1000;
  test_options.transform = prepare;
  test_options.pin_memory = flags.device.is_cuda();
  data::DataLoader test_loader({test.images, test.labels}, test_options);
  say("Fashion-MNIST: %lld training and %lld test images; model %s on %s; %d epoch(s)",
      static_cast<long long>(train_loader.num_rows()),
      static_cast<long long>(test_loader.num_rows()), flags.model.c_str(),
      flags.device.to_string().c_str(), flags.epochs);
  if (flags.distributed) {
    say("; %d process(es), %lld rows each per step", world,
        static_cast<long long>(train_options.batch_size));
  }
  say("\n");

  // 2. The model, moved to the device (a clear error if it does not exist),
  // and then the optimizer, so that its state is made there too.
  std::shared_ptr<nn::Module> model = flags.model == "cnn" ? make_cnn() : make_mlp();
  if (!flags.resume.empty()) {
    model->load(flags.resume);  // A checkpoint of any world size: it is the model's state.
    say("resumed from %s\n", flags.resume.c_str());
  }
  model->to(flags.device);
  // Rank 0's weights on every rank, and every backward's gradients averaged.
  std::unique_ptr<distributed::DistributedDataParallel> ddp;
  if (flags.distributed) {
    ddp = std::make_unique<distributed::DistributedDataParallel>(model);
    manual_seed(flags.seed + static_cast<uint64_t>(rank));  // Each rank its own dropout masks.
  }
  // A batch on the device: copies pushed like any op (from pinned memory on a GPU).
  auto to_device = [&](const data::Batch& batch) {
    return std::vector<Tensor>{batch[0].to(flags.device), batch[1].to(flags.device)};
  };
  optim::Adam optimizer(model->parameters(), {.lr = flags.lr});
  optim::CosineAnnealingLR schedule(optimizer, flags.epochs);

  // 3. Train. One step: forward, loss, backward, update. It returns the loss
  // and the batch's correct predictions as tensors (reading them would wait).
  // With --hybridize the same step is traced once into a graph and replayed
  // (eager/hybridize.h): same results, less work per step.
  HybridFunction::Fn train_step = [&](const std::vector<Tensor>& batch) {
    Tensor logits = ddp ? (*ddp)(batch[0]) : model->forward(batch[0]);
    Tensor loss = cross_entropy(logits, batch[1]);
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
    return std::vector<Tensor>{loss, count_correct(logits.detach(), batch[1])};
  };
  if (flags.hybridize) {
    auto traced =
        std::make_shared<HybridFunction>(train_step, HybridizeOptions{.name = "train_step"});
    train_step = [traced](const std::vector<Tensor>& batch) { return (*traced)(batch); };
  }

  // Reading the loss forces a wait, so progress is read every kReportEvery
  // steps; in between, the loop only pushes work.
  constexpr int kReportEvery = 20;
  for (int epoch = 1; epoch <= flags.epochs; ++epoch) {
    model->train();
    Progress progress(train_loader.size());
    auto start = Clock::now();
    int64_t step = 0, seen = 0, correct = 0, window_seen = 0;
    Tensor window_correct, loss;
    for (const data::Batch& batch : train_loader) {
      std::vector<Tensor> result = train_step(to_device(batch));
      loss = result[0];
      Tensor batch_correct = result[1];
      window_correct =
          window_correct.defined() ? add(window_correct, batch_correct) : batch_correct;
      window_seen += batch[0].shape()[0];
      ++step;
      if (step % kReportEvery == 0 || step == train_loader.size()) {
        correct += window_correct.item<int64_t>();
        seen += window_seen;
        window_correct = Tensor();
        window_seen = 0;
        double seconds = std::chrono::duration<double>(Clock::now() - start).count();
        char figures[96];
        std::snprintf(figures, sizeof figures, "loss %.4f  acc %5.1f%%  %6.0f samples/s",
                      loss.item<float>(), 100.0 * static_cast<double>(correct) / seen,
                      seen / seconds);
        if (rank == 0) progress.show(epoch, step, figures);
      }
    }
    if (rank == 0) progress.end_epoch();
    schedule.step();
    if (!flags.checkpoint.empty() && rank == 0) {
      model->save(flags.checkpoint);  // Atomic: a failed write keeps the last one.
      say("checkpoint: %s\n", flags.checkpoint.c_str());
    }
  }

  // 4. Evaluate: eval mode (BatchNorm's running statistics, no dropout), no graph.
  model->eval();
  NoGradGuard no_grad;
  int64_t correct = 0;
  for (const data::Batch& batch : test_loader) {
    std::vector<Tensor> xy = to_device(batch);
    correct += count_correct(model->forward(xy[0]), xy[1]).item<int64_t>();
  }
  double accuracy = static_cast<double>(correct) / test_loader.num_rows();
  say("test accuracy: %.2f%% (%lld / %lld)\n", 100 * accuracy, static_cast<long long>(correct),
      static_cast<long long>(test_loader.num_rows()));
  if (rank != 0) {
    engine::current().wait_all();
    distributed::finalize();
    return 0;
  }

  // 5. Export: back on the CPU (a loaded model runs there), hybridize the
  // model, call it once (the export traces it at that shape; the batch
  // dimension stays free), and write the graph and weights. The first 100
  // test images go beside them as NumPy files.
  data::Batch samples = prepare({test.images.slice(0, 100), test.labels.slice(0, 100)});
  model->to(Device::cpu());
  model->hybridize();
  (*model)(samples[0]);
  model->export_model(flags.export_path);
  serialization::write_npy(flags.export_path + "_images.npy", samples[0]);
  serialization::write_npy(flags.export_path + "_labels.npy", samples[1]);
  std::printf(
      "exported %s.json (with the params file it names) and 100 test images "
      "(%s_images.npy, _labels.npy)\n",
      flags.export_path.c_str(), flags.export_path.c_str());
  engine::current().wait_all();  // Finish the last updates before the process exits.
  if (flags.distributed) distributed::finalize();
  return 0;
} catch (const tandem::Error& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
