// Tutorial 5, part 2: write text with the language model tutorial 05 saved,
// in a program that has none of its code.
//
//   build/release/tutorials/05_language_model         # trains, then exports char_lm_transformer.*
//   build/release/tutorials/05_generate               # loads it and writes text
//   build/release/tutorials/05_generate char_lm_lstm "Once upon a time"
//
// Like tutorial 04 it links only core, kernels, trace and serialization
// (tutorials/CMakeLists.txt). The saved graph takes int64 bytes [batch, seq]
// and gives 256 logits per position. The tutorial's export leaves seq free
// (its signature says [batch, seq]): the model reads the text's last bytes
// as they are. A model exported at a fixed length takes exactly that many:
// a position sees only the bytes before it, so a shorter text is padded on
// the right and the logits of its last byte are read. Either way a longer
// text is cut to its last `context` bytes (the traced length).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "serialization/model.h"

using namespace tandem;

namespace {

// The next byte after `text`: the most likely one when temperature is 0,
// otherwise sampled from softmax(logits / temperature).
char next_byte(const LoadedModel& model, const std::string& text, int64_t context, bool free_length,
               double temperature, std::mt19937_64& rng) {
  const size_t length = std::min<size_t>(text.size(), static_cast<size_t>(context));
  const int64_t columns = free_length ? static_cast<int64_t>(length) : context;
  std::vector<int64_t> bytes(static_cast<size_t>(columns), 0);  // Right padding, if any.
  for (size_t i = 0; i < length; ++i) {
    bytes[i] = static_cast<unsigned char>(text[text.size() - length + i]);
  }
  std::vector<float> logits =
      model.run({Tensor::from_vector(bytes, {1, columns})})[0].to_vector<float>();
  const auto row = logits.begin() + static_cast<std::ptrdiff_t>((length - 1) * 256);
  const size_t best = static_cast<size_t>(std::max_element(row, row + 256) - row);
  if (temperature == 0) return static_cast<char>(best);
  std::vector<double> weights;
  for (int i = 0; i < 256; ++i) weights.push_back(std::exp((row[i] - row[best]) / temperature));
  return static_cast<char>(std::discrete_distribution<int>(weights.begin(), weights.end())(rng));
}

}  // namespace

int main(int argc, char** argv) try {
  std::string path = "char_lm_transformer", prompt = "The ";
  int count = 300;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--quick") {
      count = 40;  // CI's smoke run.
    } else {
      positional.push_back(arg);
    }
  }
  if (positional.size() > 0) path = positional[0];
  if (positional.size() > 1) prompt = positional[1];
  TANDEM_CHECK(!prompt.empty(), "the prompt must not be empty");

  LoadedModel model = load(path + ".json");
  const LoadedModel::TensorSpec& input = model.inputs().at(0);
  TANDEM_CHECK(input.dtype == DType::kInt64 && input.shape.rank() == 2, path,
               ".json does not take int64 [batch, context] bytes; got ", dtype_name(input.dtype),
               input.shape.to_string());
  const int64_t context = input.shape[1];
  const bool free_length = !input.free_dims[1].empty();
  std::printf("loaded %s.json: input %s, %s %lld bytes\n", path.c_str(), input.shape_text().c_str(),
              free_length ? "up to" : "exactly", static_cast<long long>(context));

  std::mt19937_64 rng(0);
  for (double temperature : {0.0, 0.8}) {
    std::string text = prompt;
    for (int i = 0; i < count; ++i)
      text.push_back(next_byte(model, text, context, free_length, temperature, rng));
    std::printf("%s: %s\n", temperature == 0 ? "greedy" : "sampled (temperature 0.8)",
                text.c_str());
  }
  return 0;
} catch (const tandem::Error& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
