#include "kernels/fused_program.h"

#include <array>
#include <charconv>
#include <string>
#include <utility>
#include <vector>

#include "absl/types/span.h"

#include "core/error.h"
#include "kernels/elementwise_ops.h"

namespace tandem::kernels {
namespace {

// The ops a program may use: those of kernels/elementwise_ops.h that compute
// in floating point.
constexpr auto kOps = elementwise::ElementwiseOps::infos();

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

}  // namespace

namespace {

// One parse: instructions in order, then the register slots.
class ProgramParser {
 public:
  explicit ProgramParser(int num_inputs)
      : num_inputs_(num_inputs), input_read_(static_cast<size_t>(num_inputs), false) {}

  FusedProgram parse(std::string_view text) {
    TANDEM_CHECK(!text.empty(), "the program is empty; expected e.g. \"r0=exp(i0);r1=mul(r0,i1)\"");
    std::vector<std::string_view> statements = split(text, ';');
    for (size_t k = 0; k < statements.size(); ++k) parse_instruction(k, statements[k]);
    for (int i = 0; i < num_inputs_; ++i) {
      TANDEM_CHECK(input_read_[static_cast<size_t>(i)], "the program never reads input i", i,
                   " (of ", num_inputs_, ")");
    }
    assign_slots();
    return std::move(program_);
  }

 private:
  // Throws an Error naming the instruction being parsed.
  template <class... Why>
  [[noreturn]] void fail(const Why&... why) const {
    detail::throw_check_failure(
        str_cat("program instruction ", index_, " '", text_, "': ", why...));
  }
  template <class... Why>
  void fail_unless(bool ok, const Why&... why) const {
    if (!ok) [[unlikely]]
      fail(why...);
  }

  // "rK=op(operands, param=value)".
  void parse_instruction(size_t k, std::string_view s) {
    index_ = k;
    text_ = s;
    size_t eq = s.find('='), open = s.find('('), close = s.size() - 1;
    fail_unless(eq != std::string_view::npos && open != std::string_view::npos && eq < open &&
                    !s.empty() && s[close] == ')',
                "expected r", k, "=op(operands, param=value)");
    fail_unless(parse_index(s.substr(0, eq), 'r') == static_cast<int>(k), "defines '",
                s.substr(0, eq), "', expected r", k, " (registers are numbered in order)");
    std::string_view name = s.substr(eq + 1, open - eq - 1);
    const ElementwiseInfo& info = fusable_op(name);
    FusedInstr instr{.code = info.code, .arity = info.arity, .operands = {}};
    program_.costly = program_.costly || info.costly;
    std::vector<std::string_view> args = split(s.substr(open + 1, close - open - 1), ',');
    fail_unless(static_cast<int>(args.size()) == info.arity + info.num_params, name, " takes ",
                info.arity, " operand(s) and ", info.num_params, " parameter(s), got ", args.size(),
                " argument(s)");
    for (int a = 0; a < info.arity; ++a) {
      instr.operands[static_cast<size_t>(a)] = parse_operand(args[static_cast<size_t>(a)]);
    }
    parse_params(info, absl::MakeConstSpan(args).subspan(static_cast<size_t>(info.arity)), instr);
    program_.instrs.push_back(instr);
    last_reader_.push_back(-1);
  }

  const ElementwiseInfo& fusable_op(std::string_view name) const {
    for (const ElementwiseInfo& candidate : kOps) {
      if (candidate.name == name && candidate.fusable) return candidate;
    }
    std::string known;
    for (const ElementwiseInfo& candidate : kOps) {
      if (candidate.fusable) known += str_cat(known.empty() ? "" : ", ", candidate.name);
    }
    fail("unknown op '", name, "'; expected one of: ", known);
  }

  // An input iN or an earlier register rM.
  FusedOperand parse_operand(std::string_view arg) {
    const int k = static_cast<int>(index_);
    FusedOperand operand;
    operand.is_input = !arg.empty() && arg[0] == 'i';
    operand.index = parse_index(arg, operand.is_input ? 'i' : 'r');
    if (operand.is_input) {
      fail_unless(operand.index >= 0 && operand.index < num_inputs_, "operand '", arg,
                  "' is not an input (the node has ", num_inputs_, ")");
      input_read_[static_cast<size_t>(operand.index)] = true;
    } else {
      fail_unless(operand.index >= 0 && operand.index < k, "operand '", arg,
                  "' is not an input iN or an earlier register rM (M < ", k, ")");
      last_reader_[static_cast<size_t>(operand.index)] = k;
    }
    return operand;
  }

  // "name=value" arguments, each of the op's parameters at most once.
  void parse_params(const ElementwiseInfo& info, absl::Span<const std::string_view> args,
                    FusedInstr& instr) const {
    std::array<bool, 2> given = {false, false};
    for (std::string_view arg : args) {
      size_t assign = arg.find('=');
      fail_unless(assign != std::string_view::npos, "argument '", arg,
                  "' is not a parameter name=value");
      std::string_view param = arg.substr(0, assign), value = arg.substr(assign + 1);
      int p = -1;
      for (int q = 0; q < info.num_params; ++q) {
        if (param == info.params[static_cast<size_t>(q)].name) p = q;
      }
      fail_unless(p >= 0, info.name, " has no parameter '", param, "'");
      fail_unless(!given[static_cast<size_t>(p)], "parameter '", param, "' given twice");
      given[static_cast<size_t>(p)] = true;
      double& number = instr.params[static_cast<size_t>(p)];
      auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), number);
      fail_unless(error == std::errc() && end == value.data() + value.size() && !value.empty(),
                  "parameter '", param, "' is not a number: '", value, "'");
    }
    if (info.ordered_params) {
      fail_unless(instr.params[0] <= instr.params[1], info.name, " ", info.params[0].name,
                  " must not exceed ", info.params[1].name, ", got ", info.params[0].name, "=",
                  instr.params[0], " and ", info.params[1].name, "=", instr.params[1]);
    }
  }

  // Slots: take a free one for each register, then free those of registers
  // read for the last time here. Taking before freeing keeps a register's
  // slot apart from its operands', so the block loops need not alias. Each
  // register is listed once, under the instruction after which its slot is
  // free (its last reader, or itself if nothing reads it), lowest register
  // first: the work is linear in the program's length, which a hostile
  // graph file chooses.
  void assign_slots() {
    const int n = static_cast<int>(program_.instrs.size());
    std::vector<int> first_freed(static_cast<size_t>(n), -1);
    std::vector<int> next_freed(static_cast<size_t>(n), -1);
    for (int m = n - 1; m >= 0; --m) {
      const int last = last_reader_[static_cast<size_t>(m)];
      int& head = first_freed[static_cast<size_t>(last == -1 ? m : last)];
      next_freed[static_cast<size_t>(m)] = head;
      head = m;
    }
    program_.slot.assign(static_cast<size_t>(n), -1);
    std::vector<int> free_slots;
    for (int k = 0; k + 1 < n; ++k) {
      if (free_slots.empty()) {
        program_.slot[static_cast<size_t>(k)] = program_.num_slots++;
      } else {
        program_.slot[static_cast<size_t>(k)] = free_slots.back();
        free_slots.pop_back();
      }
      for (int m = first_freed[static_cast<size_t>(k)]; m != -1;
           m = next_freed[static_cast<size_t>(m)]) {
        free_slots.push_back(program_.slot[static_cast<size_t>(m)]);
      }
    }
  }

  const int num_inputs_;
  std::vector<bool> input_read_;
  std::vector<int> last_reader_;  // Per register: the last instruction reading it, or -1.
  FusedProgram program_;
  size_t index_ = 0;       // The instruction being parsed,
  std::string_view text_;  // and its text.
};

}  // namespace

FusedProgram parse_fused_program(std::string_view text, int num_inputs) {
  return ProgramParser(num_inputs).parse(text);
}

std::shared_ptr<const FusedProgram> cached_fused_program(const std::string& text, int num_inputs) {
  thread_local std::string cached_text;
  thread_local int cached_inputs = -1;
  thread_local std::shared_ptr<const FusedProgram> cached;
  if (cached == nullptr || cached_inputs != num_inputs || cached_text != text) {
    cached = std::make_shared<const FusedProgram>(parse_fused_program(text, num_inputs));
    cached_text = text;
    cached_inputs = num_inputs;
  }
  return cached;
}

}  // namespace tandem::kernels
