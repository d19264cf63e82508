// fused_elementwise: a chain (or DAG) of elementwise ops run as one kernel,
// made by the elementwise fusion pass (trace/passes/elementwise_fusion.h).
// Each input element is read once and each output element written once; the
// intermediates live in small per-thread blocks instead of whole tensors.
//
// Note [Fused elementwise programs]: the "program" attribute is a text, one
// instruction per register, separated by ';', in order:
//
//   r0=exp(i0);r1=mul(r0,i1);r2=clip(r1,max=6,min=0)
//
// Instruction k defines rk from operands iN (the node's input N) and rM
// (M < k), followed by the op's float parameters as name=value (leaky_relu:
// alpha; clip: min and max; every parameter given, in any order). The last
// register is the output. Every input is read by some instruction. Numbers
// are written in the shortest form that reads back exactly (std::to_chars),
// so one graph gives one text: deterministic, comparable by CSE, and a plain
// string for the JSON format. Instructions compute exactly what the op of
// the same name computes (kernels/cpu/elementwise_math.h).
//
// Inputs are float32 or float64, all of one dtype (the output's); each has
// the output's shape or is a one-element scalar broadcast to every element.
// The output's shape is the broadcast of the inputs' shapes.
#include <algorithm>
#include <array>
#include <charconv>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/broadcast.h"
#include "kernels/cpu/dtype_visit.h"
#include "kernels/cpu/elementwise_math.h"
#include "kernels/cpu/parallel.h"
#include "kernels/ops/families.h"
#include "kernels/registry.h"

namespace tandem::kernels {
namespace {

enum class Code : uint8_t {
  kNeg,
  kAbs,
  kSign,
  kSquare,
  kRelu,
  kExp,
  kLog,
  kSqrt,
  kRsqrt,
  kTanh,
  kSigmoid,
  kErf,
  kGelu,
  kLeakyRelu,
  kClip,
  kAdd,
  kSub,
  kMul,
  kDiv,
  kPow,
  kMaximum,
  kMinimum,
};

struct InstrInfo {
  std::string_view name;
  Code code;
  int arity;
  std::array<std::string_view, 2> params;  // Empty names: unused.
  bool costly;                             // Calls libm per element.
};

constexpr InstrInfo kInstrs[] = {
    {"neg", Code::kNeg, 1, {}, false},
    {"abs", Code::kAbs, 1, {}, false},
    {"sign", Code::kSign, 1, {}, false},
    {"square", Code::kSquare, 1, {}, false},
    {"relu", Code::kRelu, 1, {}, false},
    {"exp", Code::kExp, 1, {}, true},
    {"log", Code::kLog, 1, {}, true},
    {"sqrt", Code::kSqrt, 1, {}, false},
    {"rsqrt", Code::kRsqrt, 1, {}, false},
    {"tanh", Code::kTanh, 1, {}, true},
    {"sigmoid", Code::kSigmoid, 1, {}, true},
    {"erf", Code::kErf, 1, {}, true},
    {"gelu", Code::kGelu, 1, {}, true},
    {"leaky_relu", Code::kLeakyRelu, 1, {"alpha"}, false},
    {"clip", Code::kClip, 1, {"min", "max"}, false},
    {"add", Code::kAdd, 2, {}, false},
    {"sub", Code::kSub, 2, {}, false},
    {"mul", Code::kMul, 2, {}, false},
    {"div", Code::kDiv, 2, {}, false},
    {"pow", Code::kPow, 2, {}, true},
    {"maximum", Code::kMaximum, 2, {}, false},
    {"minimum", Code::kMinimum, 2, {}, false},
};

struct Operand {
  bool is_input = false;
  int index = 0;
};

struct Instr {
  Code code;
  int arity;
  std::array<Operand, 2> operands;
  std::array<double, 2> params = {0, 0};
};

// A parsed program with its scratch layout: each register that is not the
// output gets a slot of one block, and slots are reused once a register's
// last reader has run.
struct Program {
  std::vector<Instr> instrs;
  std::vector<int> slot;  // Per register; -1 for the output.
  int num_slots = 0;
  bool costly = false;
};

std::vector<std::string_view> split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    size_t end = text.find(separator, start);
    parts.push_back(text.substr(start, end == std::string_view::npos ? end : end - start));
    if (end == std::string_view::npos) return parts;
    start = end + 1;
  }
}

// "i3" or "r12" into its number; -1 if `text` is not `prefix` then digits.
int parse_index(std::string_view text, char prefix) {
  if (text.size() < 2 || text[0] != prefix) return -1;
  int value = -1;
  auto [end, error] = std::from_chars(text.data() + 1, text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return -1;
  return value;
}

Program parse_program(std::string_view text, int num_inputs) {
  TANDEM_CHECK(!text.empty(), "the program is empty; expected e.g. \"r0=exp(i0);r1=mul(r0,i1)\"");
  Program program;
  std::vector<bool> input_read(static_cast<size_t>(num_inputs), false);
  std::vector<int> last_reader;
  std::vector<std::string_view> statements = split(text, ';');
  for (size_t k = 0; k < statements.size(); ++k) {
    std::string_view s = statements[k];
    auto fail_unless = [&](bool ok, auto... why) {
      TANDEM_CHECK(ok, "program instruction ", k, " '", s, "': ", why...);
    };
    size_t eq = s.find('='), open = s.find('('), close = s.size() - 1;
    fail_unless(eq != std::string_view::npos && open != std::string_view::npos && eq < open &&
                    !s.empty() && s[close] == ')',
                "expected r", k, "=op(operands, param=value)");
    fail_unless(parse_index(s.substr(0, eq), 'r') == static_cast<int>(k), "defines '",
                s.substr(0, eq), "', expected r", k, " (registers are numbered in order)");
    std::string_view name = s.substr(eq + 1, open - eq - 1);
    const InstrInfo* info = nullptr;
    for (const InstrInfo& candidate : kInstrs) {
      if (candidate.name == name) info = &candidate;
    }
    if (info == nullptr) {
      std::string known;
      for (const InstrInfo& candidate : kInstrs) {
        known += str_cat(known.empty() ? "" : ", ", candidate.name);
      }
      fail_unless(false, "unknown op '", name, "'; expected one of: ", known);
    }
    Instr instr{.code = info->code, .arity = info->arity, .operands = {}};
    program.costly = program.costly || info->costly;
    std::vector<std::string_view> args = split(s.substr(open + 1, close - open - 1), ',');
    int num_params = info->params[0].empty() ? 0 : (info->params[1].empty() ? 1 : 2);
    fail_unless(static_cast<int>(args.size()) == info->arity + num_params, name, " takes ",
                info->arity, " operand(s) and ", num_params, " parameter(s), got ", args.size(),
                " argument(s)");
    for (int a = 0; a < info->arity; ++a) {
      std::string_view arg = args[static_cast<size_t>(a)];
      Operand& operand = instr.operands[static_cast<size_t>(a)];
      operand.is_input = !arg.empty() && arg[0] == 'i';
      operand.index = parse_index(arg, operand.is_input ? 'i' : 'r');
      if (operand.is_input) {
        fail_unless(operand.index >= 0 && operand.index < num_inputs, "operand '", arg,
                    "' is not an input (the node has ", num_inputs, ")");
        input_read[static_cast<size_t>(operand.index)] = true;
      } else {
        fail_unless(operand.index >= 0 && operand.index < static_cast<int>(k), "operand '", arg,
                    "' is not an input iN or an earlier register rM (M < ", k, ")");
        last_reader[static_cast<size_t>(operand.index)] = static_cast<int>(k);
      }
    }
    std::array<bool, 2> given = {false, false};
    for (size_t a = static_cast<size_t>(info->arity); a < args.size(); ++a) {
      std::string_view arg = args[a];
      size_t assign = arg.find('=');
      fail_unless(assign != std::string_view::npos, "argument '", arg,
                  "' is not a parameter name=value");
      std::string_view param = arg.substr(0, assign), value = arg.substr(assign + 1);
      int p = param == info->params[0] ? 0 : (param == info->params[1] ? 1 : -1);
      fail_unless(p >= 0 && !param.empty(), name, " has no parameter '", param, "'");
      fail_unless(!given[static_cast<size_t>(p)], "parameter '", param, "' given twice");
      given[static_cast<size_t>(p)] = true;
      double& number = instr.params[static_cast<size_t>(p)];
      auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), number);
      fail_unless(error == std::errc() && end == value.data() + value.size() && !value.empty(),
                  "parameter '", param, "' is not a number: '", value, "'");
    }
    if (info->code == Code::kClip) {
      fail_unless(instr.params[0] <= instr.params[1],
                  "clip min must not exceed max, got min=", instr.params[0],
                  " and max=", instr.params[1]);
    }
    program.instrs.push_back(instr);
    last_reader.push_back(-1);
  }
  for (int i = 0; i < num_inputs; ++i) {
    TANDEM_CHECK(input_read[static_cast<size_t>(i)], "the program never reads input i", i, " (of ",
                 num_inputs, ")");
  }

  // Slots: take a free one for each register, then free those of registers
  // read for the last time here. Taking before freeing keeps a register's
  // slot apart from its operands', so the block loops need not alias.
  const int n = static_cast<int>(program.instrs.size());
  program.slot.assign(static_cast<size_t>(n), -1);
  std::vector<int> free_slots;
  for (int k = 0; k + 1 < n; ++k) {
    if (free_slots.empty()) {
      program.slot[static_cast<size_t>(k)] = program.num_slots++;
    } else {
      program.slot[static_cast<size_t>(k)] = free_slots.back();
      free_slots.pop_back();
    }
    for (int m = 0; m <= k; ++m) {
      int last = last_reader[static_cast<size_t>(m)];
      // Freed after its last reader, or at once if nothing reads it.
      if (last == k || (m == k && last == -1))
        free_slots.push_back(program.slot[static_cast<size_t>(m)]);
    }
  }
  return program;
}

// Engine workers run the same few programs over and over: keep the last one
// parsed on each thread rather than parse per call.
std::shared_ptr<const Program> cached_program(const std::string& text, int num_inputs) {
  thread_local std::string cached_text;
  thread_local int cached_inputs = -1;
  thread_local std::shared_ptr<const Program> cached;
  if (cached == nullptr || cached_inputs != num_inputs || cached_text != text) {
    cached = std::make_shared<const Program>(parse_program(text, num_inputs));
    cached_text = text;
    cached_inputs = num_inputs;
  }
  return cached;
}

std::vector<TensorMeta> infer_fused(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  DType dtype = in[0].dtype;
  TANDEM_CHECK(dtype == DType::kFloat32 || dtype == DType::kFloat64,
               "inputs must be float32 or float64, got ", dtype_name(dtype));
  Shape shape = in[0].shape;
  for (size_t i = 1; i < in.size(); ++i) {
    TANDEM_CHECK(in[i].dtype == dtype, "input ", i, " is ", dtype_name(in[i].dtype),
                 ", input 0 is ", dtype_name(dtype), "; all inputs must have one dtype");
    shape = broadcast_shapes(shape, in[i].shape);
  }
  for (size_t i = 0; i < in.size(); ++i) {
    TANDEM_CHECK(in[i].shape == shape || in[i].shape.numel() == 1, "input ", i, " has shape ",
                 in[i].shape.to_string(), "; expected the output's shape ", shape.to_string(),
                 " or a one-element scalar");
  }
  parse_program(attrs.get_string("program"), static_cast<int>(in.size()));
  return {{shape, dtype}};
}

// Elements per block: a few registers' blocks stay in L1.
constexpr int64_t kBlock = 256;

// The block loops. Registers' slots, inputs and the output never overlap
// (see parse_program; the output is a fresh buffer).
template <class T, class F>
void map1(const T* __restrict a, T* __restrict out, int64_t n, F f) {
  for (int64_t j = 0; j < n; ++j) out[j] = f(a[j]);
}
template <class T, class F>
void map2(const T* __restrict a, const T* __restrict b, T* __restrict out, int64_t n, F f) {
  for (int64_t j = 0; j < n; ++j) out[j] = f(a[j], b[j]);
}

template <class T>
void run_instr(const Instr& instr, const T* a, const T* b, T* out, int64_t n) {
  const double p0 = instr.params[0], p1 = instr.params[1];
  switch (instr.code) {
    // clang-format off
    case Code::kNeg: return map1(a, out, n, [](T x) { return math::neg(x); });
    case Code::kAbs: return map1(a, out, n, [](T x) { return math::abs(x); });
    case Code::kSign: return map1(a, out, n, [](T x) { return math::sign(x); });
    case Code::kSquare: return map1(a, out, n, [](T x) { return math::square(x); });
    case Code::kRelu: return map1(a, out, n, [](T x) { return math::relu(x); });
    case Code::kExp: return map1(a, out, n, [](T x) { return math::exp(x); });
    case Code::kLog: return map1(a, out, n, [](T x) { return math::log(x); });
    case Code::kSqrt: return map1(a, out, n, [](T x) { return math::sqrt(x); });
    case Code::kRsqrt: return map1(a, out, n, [](T x) { return math::rsqrt(x); });
    case Code::kTanh: return map1(a, out, n, [](T x) { return math::tanh(x); });
    case Code::kSigmoid: return map1(a, out, n, [](T x) { return math::sigmoid(x); });
    case Code::kErf: return map1(a, out, n, [](T x) { return math::erf(x); });
    case Code::kGelu: return map1(a, out, n, [](T x) { return math::gelu(x); });
    case Code::kLeakyRelu: return map1(a, out, n, [p0](T x) { return math::leaky_relu(x, p0); });
    case Code::kClip: return map1(a, out, n, [p0, p1](T x) { return math::clip(x, p0, p1); });
    case Code::kAdd: return map2(a, b, out, n, [](T x, T y) { return math::add(x, y); });
    case Code::kSub: return map2(a, b, out, n, [](T x, T y) { return math::sub(x, y); });
    case Code::kMul: return map2(a, b, out, n, [](T x, T y) { return math::mul(x, y); });
    case Code::kDiv: return map2(a, b, out, n, [](T x, T y) { return math::div(x, y); });
    case Code::kPow: return map2(a, b, out, n, [](T x, T y) { return math::pow(x, y); });
    case Code::kMaximum: return map2(a, b, out, n, [](T x, T y) { return math::maximum(x, y); });
    case Code::kMinimum: return map2(a, b, out, n, [](T x, T y) { return math::minimum(x, y); });
      // clang-format on
  }
}

template <class T>
void run_program(const Program& program, const KernelContext& c) {
  const int64_t n = c.outputs[0].numel();
  const size_t num_inputs = c.inputs.size();
  std::vector<const T*> inputs(num_inputs);
  std::vector<bool> scalar(num_inputs);
  for (size_t i = 0; i < num_inputs; ++i) {
    inputs[i] = c.inputs[i].data<T>();
    scalar[i] = c.inputs[i].numel() == 1 && n != 1;
  }
  T* out = c.outputs[0].data<T>();
  // More instructions per element: more work per element, so fewer elements
  // pay for waking another core.
  const int64_t instrs = static_cast<int64_t>(program.instrs.size());
  const int64_t grain =
      program.costly ? kCostlyGrain : std::max(kCostlyGrain, kCheapGrain / instrs);
  parallel_for(n, grain, [&](int64_t begin, int64_t end) {
    // Register slots, then one block per scalar input filled with its value
    // (so every operand is a contiguous block and the loops vectorize).
    std::vector<T> scratch(static_cast<size_t>((program.num_slots + num_inputs) * kBlock));
    T* slots = scratch.data();
    T* broadcasts = slots + program.num_slots * kBlock;
    for (size_t i = 0; i < num_inputs; ++i) {
      if (scalar[i]) std::fill_n(broadcasts + i * kBlock, kBlock, inputs[i][0]);
    }
    for (int64_t start = begin; start < end; start += kBlock) {
      const int64_t len = std::min(kBlock, end - start);
      auto operand = [&](const Operand& o) -> const T* {
        if (!o.is_input) return slots + program.slot[static_cast<size_t>(o.index)] * kBlock;
        size_t i = static_cast<size_t>(o.index);
        return scalar[i] ? broadcasts + i * kBlock : inputs[i] + start;
      };
      for (size_t k = 0; k < program.instrs.size(); ++k) {
        const Instr& instr = program.instrs[k];
        T* dst = program.slot[k] < 0 ? out + start : slots + program.slot[k] * kBlock;
        const T* b = instr.arity == 2 ? operand(instr.operands[1]) : nullptr;
        run_instr<T>(instr, operand(instr.operands[0]), b, dst, len);
      }
    }
  });
}

void fused_kernel(const KernelContext& c) {
  std::shared_ptr<const Program> program =
      cached_program(c.attrs.get_string("program"), static_cast<int>(c.inputs.size()));
  visit_floating(c.outputs[0].dtype(), [&]<class T>() { run_program<T>(*program, c); });
}

}  // namespace

void register_fused_elementwise_ops(Registry& registry) {
  registry.add(
      {.name = "fused_elementwise",
       .num_inputs = kVariadic,
       .attrs = {{.name = "program", .default_value = std::string(), .required = true}},
       .infer = infer_fused,
       .cpu = fused_kernel,
       // Made by a pass after tracing, when gradients are already in the graph.
       .differentiable = false,
       .doc = "elementwise ops run as one kernel (see Note [Fused elementwise programs])"});
}

}  // namespace tandem::kernels
