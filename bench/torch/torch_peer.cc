// The libtorch side of the side-by-side benchmarks: the same workloads as
// bench_ops, bench_gemm and bench_train, written with libtorch's C++ API and
// timed by the same helpers (bench/harness.h). Those programs run it as a
// child and read the "key value" lines it prints (Note [Side by side in
// separate processes]); it is built only when CMake finds libtorch, and it is
// the only thing in this repository that links it.
//
//   torch_peer ops                            # per-op overhead, ns per op
//   torch_peer gemm                           # torch::mm GFLOP/s per size
//   torch_peer train --model mlp|cnn --steps N
//   torch_peer deploy --model FILE.pt         # torch::jit::load + first and steady calls
//   torch_peer standard-train --model mlp|lenet --batch B --data DIR
//   torch_peer standard-infer --model mlp|lenet   # eager latency at batch 1 and 64
//   torch_peer sequence --workload attention|lstm|gru|lm [--seq N]   # forward + backward
//
// Threads: Note [libtorch configurations]. The caller sets OMP_NUM_THREADS
// and the BLAS; this program fixes ATen's pools before any op runs.
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include <torch/script.h>
#include <torch/torch.h>

#include "bench/harness.h"

namespace {

// The libblas.so.3 this process loaded (the caller picks it through
// LD_LIBRARY_PATH): printed as a note, so a table can be checked against it.
void print_blas_note() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find("libblas") != std::string::npos || line.find("openblas") != std::string::npos) {
      std::printf("note: BLAS %s\n", line.substr(line.find('/')).c_str());
      return;
    }
  }
}

// ---------------------------------------------------------------------------
// (1) Per-op overhead.
// ---------------------------------------------------------------------------

torch::Tensor apply(bench::TinyOp op, const torch::Tensor& x) {
  switch (op) {
    case bench::TinyOp::kAddScalar:
      return torch::add(x, 1);
    case bench::TinyOp::kMul:
      return torch::mul(x, x);
    case bench::TinyOp::kRelu:
      return torch::relu(x);
    case bench::TinyOp::kSum:
      return torch::sum(x);
    case bench::TinyOp::kMatmul:
      return torch::matmul(x, x);
  }
  return {};
}

void run_ops() {
  torch::NoGradGuard no_grad;
  for (const bench::TinyOpCase& c : bench::tiny_op_cases()) {
    torch::Tensor x = torch::full(c.shape, 0.5f);
    bench::emit(c.key, bench::tiny_op_ns([&] {
                  torch::Tensor y;
                  for (int i = 0; i < bench::kTinyOpsPerLoop; ++i) y = apply(c.op, x);
                  // Eager libtorch has finished by now; reading y keeps the loop honest.
                  if (y.data_ptr<float>()[0] < 0) std::abort();
                }));
  }
}

// ---------------------------------------------------------------------------
// (2) sgemm.
// ---------------------------------------------------------------------------

void run_gemm() {
  torch::NoGradGuard no_grad;
  for (int n : bench::kGemmSizes) {
    torch::Tensor a = torch::randn({n, n}), b = torch::randn({n, n});
    bench::emit("gflops_" + std::to_string(n), bench::gemm_gflops(n, [&] { torch::mm(a, b); }));
  }
}

// ---------------------------------------------------------------------------
// (3) Training: tutorials/02_train_fashion_mnist.cpp's models in libtorch.
// ---------------------------------------------------------------------------

namespace nn = torch::nn;

nn::Sequential make_cnn() {
  return nn::Sequential(
      nn::Conv2d(nn::Conv2dOptions(1, 32, 3).stride(1).padding(1)), nn::BatchNorm2d(32), nn::ReLU(),
      nn::MaxPool2d(2), nn::Conv2d(nn::Conv2dOptions(32, 64, 3).stride(1).padding(1)),
      nn::BatchNorm2d(64), nn::ReLU(), nn::MaxPool2d(2), nn::Flatten(), nn::Linear(64 * 7 * 7, 128),
      nn::ReLU(), nn::Dropout(0.25), nn::Linear(128, 10));
}

nn::Sequential make_mlp() {
  return nn::Sequential(nn::Flatten(), nn::Linear(28 * 28, 256), nn::ReLU(), nn::Linear(256, 128),
                        nn::ReLU(), nn::Linear(128, 10));
}

void run_train(const std::string& model_name, int steps) {
  double start_rss = bench::proc_status_mib("VmRSS");
  torch::manual_seed(0);
  nn::Sequential model = model_name == "cnn" ? make_cnn() : make_mlp();
  model->train();
  torch::optim::Adam optimizer(model->parameters(),
                               torch::optim::AdamOptions(bench::kLearningRate));
  std::vector<torch::Tensor> images, labels;
  for (bench::SyntheticBatch& batch : bench::synthetic_batches()) {
    images.push_back(torch::from_blob(batch.images.data(),
                                      {bench::kBatchSize, 1, bench::kImageSide, bench::kImageSide})
                         .clone());
    labels.push_back(
        torch::from_blob(batch.labels.data(), {bench::kBatchSize}, torch::kInt64).clone());
  }
  torch::Tensor loss;
  bench::run_training(
      steps, start_rss,
      [&](int i) {
        loss = torch::nn::functional::cross_entropy(model->forward(images[i]), labels[i]);
        optimizer.zero_grad();
        loss.backward();
        optimizer.step();
      },
      [&] { return loss.item<double>(); }, [] {});  // Eager libtorch has nothing pending.
}

// ---------------------------------------------------------------------------
// (4) The standard workloads (Note [Standard workloads] in bench/harness.h).
// ---------------------------------------------------------------------------

nn::Sequential make_lenet() {
  return nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 6, 5).padding(2)), nn::ReLU(),
                        nn::MaxPool2d(2), nn::Conv2d(nn::Conv2dOptions(6, 16, 5)), nn::ReLU(),
                        nn::MaxPool2d(2), nn::Flatten(), nn::Linear(400, 120), nn::ReLU(),
                        nn::Linear(120, 84), nn::ReLU(), nn::Linear(84, 10));
}

nn::Sequential make_standard(const std::string& name) {
  return name == "lenet" ? make_lenet() : make_mlp();
}

// One training run: bench::run_standard_epochs of SGD steps.
void run_standard_train(const std::string& model_name, int64_t batch, const std::string& dir) {
  std::optional<bench::StandardData> data = bench::read_standard_data(dir);
  if (!data) {
    std::fprintf(stderr, "torch_peer: no standard data in %s\n", dir.c_str());
    std::exit(1);
  }
  torch::manual_seed(0);
  nn::Sequential model = make_standard(model_name);
  model->train();
  torch::optim::SGD optimizer(
      model->parameters(),
      torch::optim::SGDOptions(bench::kStandardLr).momentum(bench::kStandardMomentum));
  const int64_t n = bench::kStandardSamples;
  torch::Tensor images = torch::from_blob(data->images.data(), {n, 28, 28}, torch::kUInt8).clone();
  torch::Tensor labels =
      torch::from_blob(data->labels.data(), {n}, torch::kUInt8).to(torch::kInt64);
  std::vector<torch::Tensor> indices;
  for (std::vector<int64_t>& b : bench::standard_batches(batch)) {
    indices.push_back(torch::from_blob(b.data(), {batch}, torch::kInt64).clone());
  }
  torch::Tensor loss;
  bench::run_standard_epochs(
      batch,
      [&](int64_t i) {
        torch::Tensor x = images.index_select(0, indices[i])
                              .to(torch::kFloat32)
                              .mul_(1.0 / 255)
                              .view({batch, 1, 28, 28});
        torch::Tensor y = labels.index_select(0, indices[i]);
        optimizer.zero_grad();
        loss = torch::nn::functional::cross_entropy(model->forward(x), y);
        loss.backward();
        optimizer.step();
      },
      [&] { return loss.item<double>(); });
}

// Eager inference latency of a standard model in eval mode, without
// gradients, at batch 1 and 64 (b1_us, b64_us), and of the one small
// product the issue names, mm of [1, 64] by [64, 64] (mm_1x64_us).
void run_standard_infer(const std::string& model_name) {
  torch::InferenceMode inference;
  torch::manual_seed(0);
  nn::Sequential model = make_standard(model_name);
  model->eval();
  for (int64_t batch : {1, 64}) {
    torch::Tensor x = torch::rand({batch, 1, 28, 28});
    bench::emit("b" + std::to_string(batch) + "_us",
                bench::latency_us(batch == 1 ? 20000 : 2000, [&] {
                  torch::Tensor y = model->forward(x);
                  if (y.data_ptr<float>()[0] == 12345.f) std::abort();  // Keep the result.
                }));
  }
  torch::Tensor a = torch::rand({1, 64}), b = torch::rand({64, 64});
  bench::emit("mm_1x64_us", bench::latency_us(100000, [&] {
                torch::Tensor y = torch::mm(a, b);
                if (y.data_ptr<float>()[0] == 12345.f) std::abort();
              }));
}

// ---------------------------------------------------------------------------
// (5) Deployment: a TorchScript file loaded and run, as bench_deploy does with
// an exported Tandem model (bench/harness.h, deploy_figures).
// ---------------------------------------------------------------------------

void run_deploy(const std::string& path) {
  torch::InferenceMode inference;
  torch::jit::script::Module model;
  const torch::Tensor images = torch::randn({64, 1, 28, 28});
  bench::deploy_figures([&] { model = torch::jit::load(path); },
                        [&](int64_t batch) {
                          torch::Tensor y = model.forward({images.slice(0, 0, batch)}).toTensor();
                          if (y.data_ptr<float>()[0] == 12345.f) std::abort();  // Keep the result.
                        });
}

// ---------------------------------------------------------------------------
// (6) Sequence models: bench_sequence's workloads (bench/harness.h,
// SequenceShapes). Attention uses torch's fused scaled_dot_product_attention
// where the library has it (PyTorch 2), the same math written out otherwise.
// ---------------------------------------------------------------------------

// Tutorial 05's language model (bench/tutorial_models.h). libtorch's C++
// TransformerEncoderLayer has no norm_first, so the pre-norm layer is
// written out from the parts torch.nn's norm_first layer composes
// (MultiheadAttention with attention dropout, LayerNorm, Linear, GELU,
// dropout on each residual branch). torch's C++ attention takes [seq,
// batch, d_model].
struct PreNormLayerImpl : torch::nn::Module {
  PreNormLayerImpl(int64_t d, int64_t heads, double p)
      : attention(register_module("attention",
                                  torch::nn::MultiheadAttention(
                                      torch::nn::MultiheadAttentionOptions(d, heads).dropout(p)))),
        norm1(register_module("norm1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})))),
        norm2(register_module("norm2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})))),
        linear1(register_module("linear1", torch::nn::Linear(d, 4 * d))),
        linear2(register_module("linear2", torch::nn::Linear(4 * d, d))),
        p(p) {}

  torch::Tensor forward(torch::Tensor x, const torch::Tensor& causal) {
    torch::Tensor h = norm1(x);
    x = x +
        torch::dropout(std::get<0>(attention->forward(h, h, h, {}, /*need_weights=*/false, causal)),
                       p, is_training());
    h = torch::dropout(torch::gelu(linear1(norm2(x))), p, is_training());
    return x + torch::dropout(linear2(h), p, is_training());
  }

  torch::nn::MultiheadAttention attention;
  torch::nn::LayerNorm norm1, norm2;
  torch::nn::Linear linear1, linear2;
  double p;
};
TORCH_MODULE(PreNormLayer);

struct LanguageModelImpl : torch::nn::Module {
  using S = bench::SequenceShapes;
  LanguageModelImpl()
      : embed(register_module("embed", torch::nn::Embedding(S::kLmVocab, S::kLmModel))),
        layer1(register_module("layer1", PreNormLayer(S::kLmModel, S::kLmHeads, S::kLmDropout))),
        layer2(register_module("layer2", PreNormLayer(S::kLmModel, S::kLmHeads, S::kLmDropout))),
        norm(register_module("norm",
                             torch::nn::LayerNorm(torch::nn::LayerNormOptions({S::kLmModel})))),
        head(register_module("head", torch::nn::Linear(S::kLmModel, S::kLmVocab))) {
    // The sinusoidal table: sin at even features, cos at odd.
    torch::Tensor position = torch::arange(S::kLmContext).unsqueeze(1).to(torch::kFloat);
    torch::Tensor rate = torch::exp(torch::arange(0, S::kLmModel, 2).to(torch::kFloat) *
                                    (-std::log(10000.0) / S::kLmModel));
    torch::Tensor table = torch::zeros({S::kLmContext, S::kLmModel});
    table.index_put_(
        {torch::indexing::Slice(), torch::indexing::Slice(0, torch::indexing::None, 2)},
        torch::sin(position * rate));
    table.index_put_(
        {torch::indexing::Slice(), torch::indexing::Slice(1, torch::indexing::None, 2)},
        torch::cos(position * rate));
    positions = register_buffer("positions", table);
  }

  torch::Tensor forward(const torch::Tensor& tokens) {  // [batch, seq]
    const int64_t seq = tokens.size(1);
    torch::Tensor x =
        torch::dropout(embed(tokens) + positions.slice(0, 0, seq), S::kLmDropout, is_training());
    torch::Tensor causal =
        torch::triu(torch::full({seq, seq}, -std::numeric_limits<float>::infinity()), 1);
    x = layer2(layer1(x.transpose(0, 1), causal), causal);
    return head(norm(x).transpose(0, 1));
  }

  torch::nn::Embedding embed;
  PreNormLayer layer1, layer2;
  torch::nn::LayerNorm norm;
  torch::nn::Linear head;
  torch::Tensor positions;
};
TORCH_MODULE(LanguageModel);

void run_language_model_step() {
  using S = bench::SequenceShapes;
  LanguageModel model;
  torch::optim::AdamW optimizer(
      model->parameters(), torch::optim::AdamWOptions(S::kLmLr).weight_decay(S::kLmWeightDecay));
  torch::Tensor x = torch::randint(S::kLmVocab, {S::kLmBatch, S::kLmContext});
  torch::Tensor targets = torch::randint(S::kLmVocab, {S::kLmBatch * S::kLmContext});
  bench::sequence_figures([&] {
    torch::Tensor loss =
        torch::cross_entropy_loss(model->forward(x).reshape({-1, S::kLmVocab}), targets);
    optimizer.zero_grad();
    loss.backward();
    torch::nn::utils::clip_grad_norm_(model->parameters(), 1.0);
    optimizer.step();
    if (loss.item<float>() == 12345.f) std::abort();  // Keep the result.
  });
}

void run_sequence(const std::string& workload, int64_t seq) {
  using S = bench::SequenceShapes;
  if (workload == "lm") {
    run_language_model_step();
    return;
  }
  if (workload == "attention") {
    const std::vector<int64_t> shape = {S::kAttentionBatch, S::kHeads, seq, S::kHeadDim};
    torch::Tensor q = torch::randn(shape).requires_grad_();
    torch::Tensor k = torch::randn(shape).requires_grad_();
    torch::Tensor v = torch::randn(shape).requires_grad_();
    bench::sequence_figures([&] {
#if TORCH_VERSION_MAJOR >= 2
      torch::Tensor y = at::scaled_dot_product_attention(q, k, v);
#else
      torch::Tensor y = torch::matmul(
          torch::softmax(torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(double(S::kHeadDim)),
                         -1),
          v);
#endif
      y.sum().backward();
      if (q.grad().data_ptr<float>()[0] == 12345.f) std::abort();  // Keep the result.
    });
    return;
  }
  torch::Tensor x = torch::randn({S::kLstmBatch, S::kLstmLength, S::kLstmSize});
  const auto time = [&](auto& layer) {
    bench::sequence_figures([&] {
      layer->zero_grad();
      std::get<0>(layer->forward(x)).sum().backward();
      if (layer->parameters()[0].grad().template data_ptr<float>()[0] == 12345.f) std::abort();
    });
  };
  if (workload == "gru") {
    torch::nn::GRU gru(torch::nn::GRUOptions(S::kLstmSize, S::kLstmSize).batch_first(true));
    time(gru);
    return;
  }
  torch::nn::LSTM lstm(torch::nn::LSTMOptions(S::kLstmSize, S::kLstmSize).batch_first(true));
  time(lstm);
}

}  // namespace

int main(int argc, char** argv) {
  // Before any op: intra-op work on 2 OpenMP threads, and an inter-op pool of
  // one (it only serves torch::jit forks, which nothing here uses).
  at::set_num_interop_threads(1);
  at::set_num_threads(2);
  print_blas_note();
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "ops") {
    run_ops();
  } else if (mode == "sequence") {
    run_sequence(bench::flag(argc, argv, "--workload", "attention"),
                 std::stoll(bench::flag(argc, argv, "--seq", "128")));
  } else if (mode == "gemm") {
    run_gemm();
  } else if (mode == "deploy") {
    run_deploy(bench::flag(argc, argv, "--model", ""));
  } else if (mode == "train") {
    std::string model = bench::flag(argc, argv, "--model", "mlp");
    run_train(model, std::stoi(bench::flag(argc, argv, "--steps", "200")));
  } else if (mode == "standard-train") {
    run_standard_train(bench::flag(argc, argv, "--model", "mlp"),
                       std::stoll(bench::flag(argc, argv, "--batch", "64")),
                       bench::flag(argc, argv, "--data", ""));
  } else if (mode == "standard-infer") {
    run_standard_infer(bench::flag(argc, argv, "--model", "mlp"));
  } else {
    std::fprintf(
        stderr,
        "usage: torch_peer ops | gemm | train --model mlp|cnn --steps N | deploy --model "
        "FILE.pt | standard-train --model mlp|lenet --batch B --data DIR | "
        "standard-infer --model mlp|lenet | sequence --workload attention|lstm|gru|lm [--seq "
        "N]\n");
    return 2;
  }
  return 0;
}
