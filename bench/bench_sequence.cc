// Sequence models, Tandem vs libtorch: attention forward + backward at
// [batch 8, heads 8, seq 128 / 512, dim 64], one LSTM and one GRU layer
// (input and hidden 256, batch 32, seq 100) forward + backward, and
// tutorial 05's training step (its transformer language model on [32, 64]
// bytes: forward, loss, backward, gradient clipping, AdamW), in samples per
// second; Tandem eager and with the whole step hybridized. Each row is a
// child process of its own (Note [Side by side in separate processes]), so
// its peak RSS is its own too.
//
//   build/release/bench/bench_sequence      # ~3 min
//
// Tandem's attention is one blocked kernel (Note [Fused attention] in
// kernels/attention.h), its recurrent layers one op each (Note [Recurrence
// in one op] in eager/nn/recurrent.h); libtorch 2 has a fused attention
// kernel and both libtorches fused LSTM and GRU layers, which is what the
// rows compare against. The recurrent rows also time oneDNN's own LSTM and
// GRU primitives called directly (bench/onednn_rnn_peer.h).
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "bench/harness.h"
#include "bench/onednn_rnn_peer.h"
#include "bench/tutorial_models.h"
#include "tandem/tandem.h"

namespace {

using bench::SequenceShapes;
using tandem::Tensor;

// One child: a workload eager or hybridized, reporting ms and peak_rss_mib.
void sequence_child(const std::string& workload, int64_t seq, bool hybridized) {
  namespace nn = tandem::nn;
  using S = SequenceShapes;
  std::function<Tensor()> forward;  // The loss.
  std::vector<Tensor> leaves;       // What gets gradients.
  std::shared_ptr<nn::Recurrent> recurrent;
  std::shared_ptr<nn::Module> language_model;
  std::unique_ptr<tandem::optim::AdamW> adamw;
  Tensor q, k, v, x, targets;
  if (workload == "lm") {
    // Tutorial 05's step on one batch of random bytes: the work is the same
    // for any bytes.
    language_model = bench::make_tutorial_language_model();
    adamw = std::make_unique<tandem::optim::AdamW>(
        language_model->parameters(),
        tandem::optim::AdamWOptions{.lr = S::kLmLr, .weight_decay = S::kLmWeightDecay});
    const auto bytes = [] {
      return tandem::cast(tandem::mul(tandem::rand({S::kLmBatch, S::kLmContext}),
                                      static_cast<double>(S::kLmVocab) - 0.01),
                          tandem::DType::kInt64);
    };
    x = bytes();
    targets = bytes();
    leaves = language_model->parameters();
  } else if (workload == "attention") {
    const tandem::Dims shape = {S::kAttentionBatch, S::kHeads, seq, S::kHeadDim};
    q = tandem::randn(shape).requires_grad_();
    k = tandem::randn(shape).requires_grad_();
    v = tandem::randn(shape).requires_grad_();
    leaves = {q, k, v};
    forward = [&] { return tandem::sum(nn::scaled_dot_product_attention(q, k, v)); };
  } else {  // lstm or gru
    recurrent = std::make_shared<nn::Recurrent>(
        workload == "gru" ? nn::RecurrentKind::kGru : nn::RecurrentKind::kLstm,
        nn::RecurrentOptions{.input_size = S::kLstmSize, .hidden_size = S::kLstmSize});
    x = tandem::randn({S::kLstmBatch, S::kLstmLength, S::kLstmSize});
    leaves = recurrent->parameters();
    forward = [&] { return tandem::sum((*recurrent)(x)); };
  }
  const auto step = [&] {
    if (adamw) {
      constexpr int64_t kPositions = S::kLmBatch * S::kLmContext;
      Tensor logits = (*language_model)(x);
      Tensor loss = tandem::cross_entropy(tandem::reshape(logits, {kPositions, S::kLmVocab}),
                                          tandem::reshape(targets, {kPositions}));
      adamw->zero_grad();
      loss.backward();
      tandem::optim::clip_grad_norm_(leaves, 1.0);
      adamw->step();
      return std::vector<Tensor>{loss};
    }
    for (const Tensor& t : leaves) t.zero_grad_();
    Tensor loss = forward();
    loss.backward();
    return std::vector<Tensor>{loss};
  };
  tandem::HybridFunction traced =
      tandem::hybridize([&](const std::vector<Tensor>&) { return step(); });
  bench::sequence_figures([&] {
    Tensor loss = hybridized ? traced({})[0] : step()[0];
    leaves.front().grad().wait_to_read();
    loss.wait_to_read();
  });
}

struct Row {
  std::string label;
  std::string workload;
  std::string args;     // The peer's.
  int64_t samples = 0;  // Per step, for a samples/s column; 0: none.
};

}  // namespace

int main(int argc, char** argv) {
  if (bench::has_flag(argc, argv, "--onednn-child")) {
    bench::onednn_recurrent_child(bench::flag(argc, argv, "--onednn-child", "lstm") == "gru");
    return 0;
  }
  if (bench::has_flag(argc, argv, "--child")) {
    sequence_child(bench::flag(argc, argv, "--child", "attention"),
                   std::stoll(bench::flag(argc, argv, "--seq", "128")),
                   bench::has_flag(argc, argv, "--hybridize"));
    return 0;
  }
  using S = SequenceShapes;
  const std::vector<Row> rows = {
      {"attention, seq 128", "attention", "--workload attention --seq 128"},
      {"attention, seq 512", "attention", "--workload attention --seq 512"},
      {"LSTM, seq 100, hidden 256", "lstm", "--workload lstm"},
      {"GRU, seq 100, hidden 256", "gru", "--workload gru"},
      {"tutorial 05 training step", "lm", "--workload lm", S::kLmBatch},
  };
  const std::vector<bench::TorchConfig> configs = bench::torch_configs();
  std::printf("Sequence models, forward + backward: median ms of %d runs, peak RSS MiB\n",
              S::kRuns);
  // The "/ eager" column: this row's time over Tandem eager's (above 1:
  // Tandem eager is faster).
  std::printf("  %-28s %-22s %10s %10s %12s %10s\n", "workload", "who", "ms", "peak MiB",
              "ms / eager", "samples/s");
  for (const Row& row : rows) {
    const std::string seq = row.args.substr(row.args.rfind(' ') + 1);
    const std::string child = bench::program_beside("bench_sequence") + " --child " + row.workload +
                              (row.workload == "attention" ? " --seq " + seq : "");
    std::vector<std::pair<std::string, std::optional<bench::Results>>> results;
    results.emplace_back("Tandem eager", bench::run_child(child));
    results.emplace_back("Tandem hybridized", bench::run_child(child + " --hybridize"));
    if (row.workload == "lstm" || row.workload == "gru") {
      results.emplace_back("oneDNN 2 primitive",
                           bench::run_child(bench::program_beside("bench_sequence") +
                                            " --onednn-child " + row.workload));
    }
    for (const bench::TorchConfig& config : configs) {
      results.emplace_back("libtorch " + config.label,
                           bench::run_torch_peer(config, "sequence " + row.args));
    }
    const double ours = results.front().second ? bench::get(*results.front().second, "ms") : 0;
    for (const auto& [who, r] : results) {
      if (!r) {
        std::printf("  %-28s %-22s %10s\n", row.label.c_str(), who.c_str(), "failed");
        continue;
      }
      const double ms = bench::get(*r, "ms");
      std::printf("  %-28s %-22s %10.2f %10.1f %11.2fx", row.label.c_str(), who.c_str(), ms,
                  bench::get(*r, "peak_rss_mib"), ms / ours);
      if (row.samples > 0) std::printf(" %10.0f", static_cast<double>(row.samples) * 1e3 / ms);
      std::printf("\n");
    }
  }
  if (configs.empty()) bench::print_no_peer_note();
  return 0;
}
