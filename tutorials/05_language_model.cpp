// Tutorial 5: a character-level language model, trained on real text.
//
// The text is the fortune cookie collection of Debian's `fortunes` package
// (/usr/share/games/fortunes, ~2.5 MB of quotations, jokes and verse;
// installed by tools/tandem.sh deps). The model reads bytes and learns to
// predict the next one: a small causal transformer (or, with --model lstm,
// a two-layer LSTM). It reports the validation loss and perplexity per
// epoch, writes text with greedy and temperature sampling, and exports
// itself for tutorials/05_generate.cpp, which writes text from the saved
// files alone.
//
//   build/release/tutorials/05_language_model                 # transformer, ~2 min on 2 cores
//   build/release/tutorials/05_language_model --model lstm
//   build/release/tutorials/05_language_model --hybridize     # the training step as a graph
//   build/release/tutorials/05_language_model --quick         # a smoke run (what CI does)
//   flags: --epochs N --steps S (per epoch) --batch-size B --context T --lr X --seed S
//          --export PATH
//
// Steps:
//   1. Read the text, split it 90/10 into training and validation bytes.
//   2. Build the model: embedding, positions, causal self-attention layers,
//      a linear layer to 256 logits per position.
//   3. Train on random windows of T + 1 bytes (the input, and the same
//      shifted by one as the target), AdamW with warm-up and cosine decay,
//      gradients clipped to norm 1; validate after each epoch.
//   4. Write text from a prompt, greedily and sampled.
//   5. Export (PATH.json and its params file), with the batch and the
//      sequence length free: the transformer's any length up to --context,
//      the length of its positional table; the LSTM's any length (its
//      recurrence is one op per layer, whatever the length).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tandem/tandem.h"

#include "flags.h"
#include "progress.h"

using namespace tandem;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int64_t kVocabulary = 256;  // Bytes.
constexpr const char* kCorpus = "/usr/share/games/fortunes";

struct Flags {
  std::string model = "transformer";
  int epochs = 3;
  int64_t steps = 300;  // Per epoch.
  int64_t batch_size = 32;
  int64_t context = 64;
  double lr = 3e-3;
  uint64_t seed = 0;
  bool quick = false;
  bool hybridize = false;
  std::string export_path;  // Empty: char_lm_<model>.
};

Flags parse_command_line(int argc, char** argv) {
  Flags flags;
  parse_flags(
      argc, argv,
      {{"--model", [&](const std::string& v) { flags.model = v; }},
       {"--epochs", [&](const std::string& v) { flags.epochs = std::atoi(v.c_str()); }},
       {"--steps", [&](const std::string& v) { flags.steps = std::atoll(v.c_str()); }},
       {"--batch-size", [&](const std::string& v) { flags.batch_size = std::atoll(v.c_str()); }},
       {"--context", [&](const std::string& v) { flags.context = std::atoll(v.c_str()); }},
       {"--lr", [&](const std::string& v) { flags.lr = std::atof(v.c_str()); }},
       {"--seed",
        [&](const std::string& v) { flags.seed = std::strtoull(v.c_str(), nullptr, 10); }},
       {"--export", [&](const std::string& v) { flags.export_path = v; }}},
      {{"--quick", [&] { flags.quick = true; }}, {"--hybridize", [&] { flags.hybridize = true; }}},
      "--model transformer|lstm, --epochs, --steps, --batch-size, --context, --lr, --seed, "
      "--quick, --hybridize, --export PATH");
  TANDEM_CHECK(flags.model == "transformer" || flags.model == "lstm",
               "--model must be transformer or lstm");
  if (flags.quick) flags.epochs = 1, flags.steps = 20, flags.context = 32;
  if (flags.export_path.empty()) flags.export_path = "char_lm_" + flags.model;
  TANDEM_CHECK(flags.epochs > 0 && flags.steps > 0 && flags.batch_size > 0 && flags.context > 1 &&
                   flags.lr > 0,
               "--epochs, --steps, --batch-size, --context and --lr must be positive");
  return flags;
}

// Every text file of the corpus (not the .dat indexes or the .u8 links),
// in name order, as one string of bytes.
std::string read_corpus() {
  namespace fs = std::filesystem;
  TANDEM_CHECK(fs::is_directory(kCorpus), kCorpus,
               " is missing: install Debian's fortunes package (bash tools/tandem.sh deps)");
  std::vector<fs::path> files;
  for (const fs::directory_entry& entry : fs::directory_iterator(kCorpus)) {
    if (entry.is_regular_file() && !entry.is_symlink() && entry.path().extension() != ".dat") {
      files.push_back(entry.path());
    }
  }
  std::sort(files.begin(), files.end());
  std::string text;
  for (const fs::path& file : files) {
    std::ifstream in(file, std::ios::binary);
    text.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  TANDEM_CHECK(text.size() > 100000, kCorpus, " holds only ", text.size(), " bytes of text");
  return text;
}

// Windows of `length` bytes starting at `starts`, as int64 [starts, length].
Tensor windows(const std::string& text, const std::vector<size_t>& starts, int64_t length) {
  std::vector<int64_t> tokens;
  tokens.reserve(starts.size() * static_cast<size_t>(length));
  for (size_t start : starts) {
    for (int64_t i = 0; i < length; ++i) {
      tokens.push_back(static_cast<unsigned char>(text[start + static_cast<size_t>(i)]));
    }
  }
  return Tensor::from_vector(tokens, {static_cast<int64_t>(starts.size()), length});
}

// The model: bytes in, 256 logits per position out. A position sees only
// the bytes before it (a causal mask in the transformer; an LSTM reads
// forwards), which is what lets tutorial 05_generate pad a short prompt for
// a model whose length is fixed.
std::shared_ptr<nn::Sequential> make_model(const Flags& flags) {
  const int64_t d = flags.quick ? 32 : 128;
  if (flags.model == "lstm") {
    return std::make_shared<nn::Sequential>(
        nn::Embedding(kVocabulary, d),
        nn::LSTM({.input_size = d, .hidden_size = d, .num_layers = 2, .dropout = 0.1}),
        nn::Linear(d, kVocabulary));
  }
  nn::TransformerLayerOptions layer{.d_model = d,
                                    .nhead = 4,
                                    .dim_feedforward = 4 * d,
                                    .dropout = 0.1,
                                    .activation = nn::TransformerActivation::kGELU,
                                    .norm_first = true,
                                    .causal = true};
  return std::make_shared<nn::Sequential>(
      nn::Embedding(kVocabulary, d),
      nn::PositionalEncoding({.d_model = d, .max_len = flags.context, .dropout = 0.1}),
      nn::TransformerEncoder(layer, /*num_layers=*/2, /*final_norm=*/true),
      nn::Linear(d, kVocabulary));
}

// Cross entropy of every position's logits [B, T, V] against the next bytes.
Tensor next_byte_loss(const Tensor& logits, const Tensor& targets) {
  const int64_t positions = logits.shape()[0] * logits.shape()[1];
  return cross_entropy(reshape(logits, {positions, kVocabulary}), reshape(targets, {positions}));
}

// `count` bytes after `prompt`, each from the model's logits for the last
// position of the last `context` bytes: the most likely byte when
// temperature is 0, otherwise sampled from softmax(logits / temperature).
std::string generate(nn::Module& model, const std::string& prompt, int count, int64_t context,
                     double temperature, std::mt19937_64& rng) {
  NoGradGuard no_grad;
  std::string text = prompt;
  for (int i = 0; i < count; ++i) {
    const size_t length = std::min<size_t>(text.size(), static_cast<size_t>(context));
    Tensor input = windows(text, {text.size() - length}, static_cast<int64_t>(length));
    Tensor last = slice(model.forward(input), 1, static_cast<int64_t>(length) - 1,
                        static_cast<int64_t>(length));
    std::vector<float> logits = last.to_vector<float>();
    size_t next = std::max_element(logits.begin(), logits.end()) - logits.begin();
    if (temperature > 0) {
      std::vector<double> weights;
      for (float l : logits) weights.push_back(std::exp((l - logits[next]) / temperature));
      next = std::discrete_distribution<size_t>(weights.begin(), weights.end())(rng);
    }
    text.push_back(static_cast<char>(next));
  }
  return text;
}

}  // namespace

int main(int argc, char** argv) try {
  Flags flags = parse_command_line(argc, argv);
  manual_seed(flags.seed);
  std::mt19937_64 rng(flags.seed);

  // 1. The text, split into training and validation bytes.
  const std::string corpus = read_corpus();
  const size_t split = corpus.size() * 9 / 10;
  const std::string train_text = corpus.substr(0, split), valid_text = corpus.substr(split);
  const int64_t window = flags.context + 1;  // Input and the next byte of its last position.
  // The validation set: fixed windows spread evenly over the held-out text.
  std::vector<size_t> valid_starts;
  const size_t valid_windows = flags.quick ? 16 : 256;
  for (size_t i = 0; i < valid_windows; ++i) {
    valid_starts.push_back(i * (valid_text.size() - static_cast<size_t>(window)) / valid_windows);
  }
  Tensor valid = windows(valid_text, valid_starts, window);
  std::printf("%s: %zu bytes of text (%zu training, %zu validation); model %s, context %lld\n",
              kCorpus, corpus.size(), train_text.size(), valid_text.size(), flags.model.c_str(),
              static_cast<long long>(flags.context));

  // 2. The model and its optimizer: AdamW, warm-up then cosine, per step.
  std::shared_ptr<nn::Sequential> model = make_model(flags);
  std::printf("%lld parameters\n", static_cast<long long>(model->num_parameters()));
  optim::AdamW optimizer(model->parameters(), {.lr = flags.lr, .weight_decay = 0.01});
  const int64_t total_steps = flags.epochs * flags.steps;
  optim::WarmupCosineLR schedule(optimizer, std::min<int64_t>(100, total_steps / 10), total_steps,
                                 flags.lr / 20);

  // 3. Train. One step: forward, loss, backward, clip, update; it returns
  // the loss as a tensor (reading it would wait). With --hybridize the step
  // is traced once and replayed.
  HybridFunction::Fn train_step = [&](const std::vector<Tensor>& batch) {
    Tensor loss = next_byte_loss(model->forward(batch[0]), batch[1]);
    optimizer.zero_grad();
    loss.backward();
    optim::clip_grad_norm_(model->parameters(), 1.0);
    optimizer.step();
    return std::vector<Tensor>{loss};
  };
  if (flags.hybridize) {
    auto traced =
        std::make_shared<HybridFunction>(train_step, HybridizeOptions{.name = "train_step"});
    train_step = [traced](const std::vector<Tensor>& batch) { return (*traced)(batch); };
  }
  const auto validation_loss = [&] {
    model->eval();
    NoGradGuard no_grad;
    Tensor inputs = slice(valid, 1, 0, flags.context), targets = slice(valid, 1, 1, window);
    const double loss = next_byte_loss(model->forward(inputs), targets).item<float>();
    model->train();
    return loss;
  };
  std::uniform_int_distribution<size_t> start_of(0,
                                                 train_text.size() - static_cast<size_t>(window));
  constexpr int kReportEvery = 20;
  for (int epoch = 1; epoch <= flags.epochs; ++epoch) {
    Progress progress(flags.steps);
    const auto start = Clock::now();
    Tensor loss;
    for (int64_t step = 1; step <= flags.steps; ++step) {
      std::vector<size_t> starts(static_cast<size_t>(flags.batch_size));
      for (size_t& s : starts) s = start_of(rng);
      Tensor batch = windows(train_text, starts, window);
      loss = train_step({slice(batch, 1, 0, flags.context), slice(batch, 1, 1, window)})[0];
      schedule.step();
      if (step % kReportEvery == 0 || step == flags.steps) {
        const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
        char figures[96];
        std::snprintf(figures, sizeof figures, "loss %.3f  %6.0f bytes/s", loss.item<float>(),
                      static_cast<double>(step * flags.batch_size * flags.context) / seconds);
        progress.show(epoch, step, figures);
      }
    }
    progress.end_epoch();
    const double valid_loss = validation_loss();
    std::printf("epoch %d: validation loss %.3f nats per byte, perplexity %.2f\n", epoch,
                valid_loss, std::exp(valid_loss));
  }

  // 4. Text, from the eager model in eval mode (no dropout).
  model->eval();
  const int count = flags.quick ? 40 : 300;
  const std::string prompt = "The ";
  std::printf("greedy: %s\n", generate(*model, prompt, count, flags.context, 0, rng).c_str());
  std::printf("sampled (temperature 0.8): %s\n",
              generate(*model, prompt, count, flags.context, 0.8, rng).c_str());

  // 5. Export: hybridize the model and call it once at [1, context]. The
  // export traces it at a few other sizes and writes every size in the graph
  // as an expression of the free dimensions (README, "Free dimensions").
  {
    NoGradGuard no_grad;
    model->hybridize();
    (*model)(zeros({1, flags.context}, DType::kInt64));
    model->export_model(flags.export_path,
                        {.dynamic_dims = {{"input0", {{0, "batch"}, {1, "seq"}}}}});
  }
  std::printf("exported %s.json (with the params file it names)\n", flags.export_path.c_str());
  engine::current().wait_all();
  return 0;
} catch (const tandem::Error& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
