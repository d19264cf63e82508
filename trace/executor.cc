#include "trace/executor.h"

#include <algorithm>
#include <exception>
#include <mutex>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"

#include "core/cuda/runtime.h"
#include "core/engine/engine.h"
#include "core/error.h"
#include "kernels/communicator.h"
#include "kernels/dispatch.h"
#include "kernels/known_ops.h"

namespace tandem::trace {
namespace {

// Where a step's tensor comes from on each call: an index into the frame's
// external tensors (the call's inputs, then its fresh outputs).
struct Patch {
  int position;  // Into the step's inputs, then (after them) its outputs.
  int external;
};

}  // namespace

struct Executor::Program {
  // One node, ready to push.
  struct Step {
    const kernels::OpDef* op;
    kernels::KernelFn kernel;
    kernels::Attrs attrs;
    std::source_location where;
    std::string scope;  // The node's module path, for errors.
    // Planned buffers and constants; undefined where a patch fills in.
    absl::InlinedVector<Tensor, 4> inputs;
    absl::InlinedVector<Tensor, 2> outputs;
    absl::InlinedVector<Patch, 2> patches;
    absl::InlinedVector<engine::Var*, 4> reads, writes;  // Of the planned tensors.
    int seed_slot = -1;  // Random ops: index of the call's attrs in Frame::seeded_attrs.
  };

  Graph graph;
  ExecutorOptions options;
  MemoryPlan plan;
  std::vector<Tensor> buffers;  // Keep the planned storages alive.
  std::vector<Step> steps;
  // Consecutive steps pushed as one engine op (Note [Segments]).
  struct Segment {
    int begin, end;                                      // Steps [begin, end).
    absl::InlinedVector<engine::Var*, 8> reads, writes;  // Of the planned tensors.
    absl::InlinedVector<Patch, 4> patches;               // Of all its steps; position unused.
    absl::InlinedVector<bool, 4> patch_is_read;
  };
  std::vector<Segment> segments;
  // For a call on the caller: every planned var some step writes, and every
  // other one some step reads, each once.
  absl::InlinedVector<engine::Var*, 16> reads, writes;
  bool runs_on_caller = false;  // Note [Small calls run on the caller].
  int num_random_steps = 0;
  // Per graph input: its index among the caller's inputs, or -1 (constant).
  std::vector<int> input_position;
  int num_call_inputs = 0;
  // Per graph output: where a call takes it from.
  struct OutputSource {
    enum Kind {
      kExternal,   // A slot of the frame's externals: a fresh tensor per call.
      kGraphInput  // A graph input itself: the caller's tensor, or a constant.
    } kind;
    int index;  // The external slot, or the graph input.
  };
  std::vector<OutputSource> output_source;
  int num_fresh_outputs = 0;
  // The CUDA graph of Note [One launch per call]; null unless used.
  struct Captured;
  std::unique_ptr<Captured> captured;
};

// Note [One launch per call]. Calls reach it in push order, on the device's
// one worker; the lock is for clarity, not contention.
struct Executor::Program::Captured {
  enum class State { kFirstCall, kCapture, kCaptured, kNodeByNode };
  std::mutex mu;
  State state = State::kFirstCall;
  std::vector<Tensor> staged;                     // Per external slot.
  std::vector<std::shared_ptr<Storage>> scratch;  // Taken by kernels while captured.
  void* graph = nullptr;                          // Never destroyed (see runtime.h).
};

namespace {

// Note [Small calls run on the caller]: at most this many elements, inputs
// and outputs of every node together (a batch-1 MLP of 784-256-128-10 is
// about 240K).
constexpr int64_t kInlineCallElements = int64_t{1} << 20;

// Whether every node of `g` runs on one core and they touch at most
// kInlineCallElements elements in all.
bool small_enough_for_the_caller(const Graph& g) {
  int64_t elements = 0;
  absl::InlinedVector<const Shape*, 4> inputs, outputs;
  for (const Node& node : g.nodes) {
    inputs.clear();
    outputs.clear();
    for (ValueId id : node.inputs) inputs.push_back(&g.value(id).shape);
    for (ValueId id : node.outputs) outputs.push_back(&g.value(id).shape);
    if (kernels::uses_all_cores(*node.op, kernels::CallShapes{inputs, outputs})) return false;
    for (const Shape* shape : inputs) elements += shape->numel();
    for (const Shape* shape : outputs) elements += shape->numel();
    if (elements > kInlineCallElements) return false;
  }
  return true;
}

// What one call owns: the caller's inputs and the fresh outputs. Held by each
// pushed op, so it lives until the call's last op has run.
struct Frame {
  std::shared_ptr<const Executor::Program> program;
  std::vector<Tensor> externals;
  std::vector<kernels::Attrs> seeded_attrs;  // Random steps' attrs with this call's seed.
};

Tensor view_of(const Tensor& buffer, const Value& value) {
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = value.shape;
  impl->dtype = value.dtype;
  impl->storage = buffer.storage();
  return Tensor(std::move(impl));
}

// Runs one step of one call on an engine worker: the step's fixed tensors
// with this call's inputs and outputs patched in.
void run_step_unchecked(const Executor::Program::Step& step, const Frame& frame,
                        const engine::RunContext& run);

// A failure names the node's op and traced line, not its segment's first.
void run_step(const Executor::Program::Step& step, const Frame& frame,
              const engine::RunContext& run) {
  try {
    run_step_unchecked(step, frame, run);
  } catch (const Error& e) {
    throw Error(e.message(), step.op->name, step.where, step.scope);
  } catch (const std::exception& e) {
    throw Error(e.what(), step.op->name, step.where, step.scope);
  }
}

void run_step_unchecked(const Executor::Program::Step& step, const Frame& frame,
                        const engine::RunContext& run) {
  const kernels::Attrs& attrs = step.seed_slot >= 0 && !frame.seeded_attrs.empty()
                                    ? frame.seeded_attrs[static_cast<size_t>(step.seed_slot)]
                                    : step.attrs;
  if (step.patches.empty()) {
    kernels::run_kernel(*step.op, step.kernel,
                        kernels::KernelContext{step.inputs, step.outputs, attrs, run});
    return;
  }
  absl::InlinedVector<Tensor, 4> inputs(step.inputs.begin(), step.inputs.end());
  absl::InlinedVector<Tensor, 2> outputs(step.outputs.begin(), step.outputs.end());
  const int num_inputs = static_cast<int>(inputs.size());
  for (const Patch& patch : step.patches) {
    const Tensor& t = frame.externals[static_cast<size_t>(patch.external)];
    if (patch.position < num_inputs) {
      inputs[static_cast<size_t>(patch.position)] = t;
    } else {
      outputs[static_cast<size_t>(patch.position - num_inputs)] = t;
    }
  }
  kernels::run_kernel(*step.op, step.kernel, kernels::KernelContext{inputs, outputs, attrs, run});
}

void run_all_steps(const Frame& frame, const engine::RunContext& run) {
  for (const Executor::Program::Step& step : frame.program->steps) run_step(step, frame, run);
}

// One call on a CUDA device (Note [One launch per call]), on its worker.
void run_as_cuda_graph(const Frame& frame, const engine::RunContext& run) {
  using State = Executor::Program::Captured::State;
  const Executor::Program& program = *frame.program;
  Executor::Program::Captured& captured = *program.captured;
  std::lock_guard lock(captured.mu);
  if (captured.state == State::kFirstCall || captured.state == State::kNodeByNode) {
    if (captured.state == State::kFirstCall) captured.state = State::kCapture;
    return run_all_steps(frame, run);
  }
  const size_t num_inputs = static_cast<size_t>(program.num_call_inputs);
  if (captured.state == State::kCapture) {
    Frame staged{frame.program, {}, {}};
    for (const Tensor& t : frame.externals) {
      staged.externals.push_back(Tensor::empty(t.shape(), t.dtype(), t.device()));
    }
    captured.staged = staged.externals;
    bool recorded_every_step = true;
    {
      // Only what the capture takes stays with the graph, not the scratch of
      // a node-by-node replay below.
      KeepNewStorages keep(&captured.scratch);
      cuda::begin_capture(run.stream);
      try {
        run_all_steps(staged, run);
      } catch (...) {
        // Not capturable, or failing: the node-by-node replay reports it.
        recorded_every_step = false;
      }
      captured.graph = cuda::end_capture(run.stream);
    }
    if (captured.graph == nullptr || !recorded_every_step) {
      captured.state = State::kNodeByNode;
      captured.staged.clear();
      captured.scratch.clear();
      return run_all_steps(frame, run);
    }
    captured.state = State::kCaptured;
  }
  for (size_t i = 0; i < num_inputs; ++i) {
    const Tensor& from = frame.externals[i];
    cuda::copy_async(captured.staged[i].raw_data(), from.raw_data(), from.nbytes(), run.stream);
  }
  cuda::launch_graph(captured.graph, run.stream);
  for (size_t i = num_inputs; i < frame.externals.size(); ++i) {
    const Tensor& to = frame.externals[i];
    cuda::copy_async(to.raw_data(), captured.staged[i].raw_data(), to.nbytes(), run.stream);
  }
}

}  // namespace

namespace {

// Where each value of the graph lives while a program runs: a fixed tensor
// (a planned buffer or a constant), or a slot of the frame's externals
// (the call's inputs, then its fresh outputs); -1 where fixed.
struct Placement {
  std::vector<Tensor> fixed;
  std::vector<int> external;
};

// Places the graph's inputs and outputs, and every planned value in its
// buffer's view.
Placement place_values(Executor::Program& p) {
  const Graph& g = p.graph;
  Placement at{std::vector<Tensor>(g.values.size()), std::vector<int>(g.values.size(), -1)};
  for (const GraphInput& input : g.inputs) {
    if (input.kind == InputKind::kConstant) {
      // Weights of a graph loaded on the CPU, replayed on a GPU: moved once.
      at.fixed[input.value] = input.constant.device() == p.options.device
                                  ? input.constant
                                  : kernels::call1(kernels::to_device_op(), {input.constant},
                                                   {{"device", p.options.device.to_string()}},
                                                   std::source_location::current());
      p.input_position.push_back(-1);
    } else {
      at.external[input.value] = p.num_call_inputs;
      p.input_position.push_back(p.num_call_inputs++);
    }
  }
  using Source = Executor::Program::OutputSource;
  for (const GraphOutput& output : g.outputs) {
    if (g.value(output.value).node < 0) {
      int input_index = 0;
      while (g.inputs[input_index].value != output.value) ++input_index;
      p.output_source.push_back({Source::kGraphInput, input_index});
      continue;
    }
    if (at.external[output.value] < 0) {  // Else the same value output twice.
      at.external[output.value] = p.num_call_inputs + p.num_fresh_outputs++;
    }
    p.output_source.push_back({Source::kExternal, at.external[output.value]});
  }
  for (size_t id = 0; id < g.values.size(); ++id) {
    const int buffer = p.plan.buffer_of[id];
    if (buffer >= 0) at.fixed[id] = view_of(p.buffers[buffer], g.values[id]);
  }
  return at;
}

// One step per node: its kernel for the device, its fixed tensors and the
// patches that put the call's externals in place.
void build_steps(Executor::Program& p, const Placement& at) {
  p.steps.reserve(p.graph.nodes.size());
  for (const Node& node : p.graph.nodes) {
    Executor::Program::Step step;
    step.op = node.op;
    step.kernel = p.options.device.is_cpu() ? node.op->cpu : node.op->cuda;
    {
      CallSiteScope site(node.op->name.c_str(), node.where);
      NameScope scope(node.scope, node.where);
      TANDEM_CHECK(step.kernel != nullptr, "has no kernel for ", p.options.device.to_string());
    }
    step.attrs = node.attrs;
    step.where = node.where;
    step.scope = node.scope;
    if (kernels::is_random(*node.op)) step.seed_slot = p.num_random_steps++;
    auto place = [&](ValueId id, int position, absl::InlinedVector<Tensor, 4>* into_inputs,
                     absl::InlinedVector<Tensor, 2>* into_outputs) {
      Tensor t = at.external[id] >= 0 ? Tensor() : at.fixed[id];
      if (at.external[id] >= 0)
        step.patches.push_back({position, at.external[id]});
      else
        (into_inputs ? step.reads : step.writes).push_back(t.var());
      if (into_inputs)
        into_inputs->push_back(std::move(t));
      else
        into_outputs->push_back(std::move(t));
    };
    int position = 0;
    for (ValueId id : node.inputs) place(id, position++, &step.inputs, nullptr);
    for (ValueId id : node.outputs) place(id, position++, nullptr, &step.outputs);
    // Note [Collectives run in program order] in kernels/communicator.h.
    if (node.op->collective) step.writes.push_back(kernels::collective_order_var(p.options.device));
    p.steps.push_back(std::move(step));
  }
}

// Consecutive steps grouped into engine ops of at most max_segment_nodes
// (Note [Segments]).
void build_segments(Executor::Program& p) {
  const int max_nodes = std::max(1, p.options.max_segment_nodes);
  const int num_steps = static_cast<int>(p.steps.size());
  auto is_collective = [&](int i) { return p.steps[static_cast<size_t>(i)].op->collective; };
  for (int begin = 0, end = 0; begin < num_steps; begin = end) {
    // A collective is a segment of its own, which may finish after its
    // function returns (Note [Ops that finish later] in core/engine/engine.h)
    // while the worker runs the segments that do not read its output.
    end = begin + 1;
    if (!is_collective(begin)) {
      while (end < std::min(begin + max_nodes, num_steps) && !is_collective(end)) ++end;
    }
    Executor::Program::Segment segment{begin, end, {}, {}, {}, {}};
    for (int i = segment.begin; i < segment.end; ++i) {
      const Executor::Program::Step& step = p.steps[static_cast<size_t>(i)];
      segment.reads.insert(segment.reads.end(), step.reads.begin(), step.reads.end());
      segment.writes.insert(segment.writes.end(), step.writes.begin(), step.writes.end());
      for (const Patch& patch : step.patches) {
        segment.patches.push_back(patch);
        segment.patch_is_read.push_back(patch.position < static_cast<int>(step.inputs.size()));
      }
    }
    p.segments.push_back(std::move(segment));
  }
}

// For Note [Small calls run on the caller]: each var once, as a write if any
// step writes it (run_if_free claims a var for reading or for writing, and a
// var claimed for both would never be free). Planned buffers are reused, so
// most are read and written.
void collect_caller_vars(Executor::Program& p) {
  absl::flat_hash_set<engine::Var*> written;
  for (const Executor::Program::Step& step : p.steps) {
    for (engine::Var* var : step.writes) {
      if (written.insert(var).second) p.writes.push_back(var);
    }
  }
  absl::flat_hash_set<engine::Var*> read;
  for (const Executor::Program::Step& step : p.steps) {
    for (engine::Var* var : step.reads) {
      if (!written.contains(var) && read.insert(var).second) p.reads.push_back(var);
    }
  }
}

}  // namespace

Executor::Executor(Graph graph, ExecutorOptions options) {
  auto program = std::make_shared<Program>();
  Program& p = *program;
  verify(graph, "executor");
  p.graph = std::move(graph);
  p.options = options;
  p.plan = plan_memory(p.graph, options.plan_memory);
  for (size_t bytes : p.plan.buffer_bytes) {
    p.buffers.push_back(
        Tensor::empty(Shape{static_cast<int64_t>(bytes)}, DType::kUInt8, options.device));
  }
  build_steps(p, place_values(p));
  build_segments(p);
  const bool communicates = std::any_of(p.graph.nodes.begin(), p.graph.nodes.end(),
                                        [](const Node& node) { return node.op->collective; });
  // A graph with collectives replays node by node on a GPU: NCCL's calls are
  // not captured into a CUDA graph (its communicator starts at the first one).
  if (options.device.is_cuda() && options.cuda_graph && !communicates) {
    p.captured = std::make_unique<Program::Captured>();
  }
  if (options.device.is_cpu() && !communicates && small_enough_for_the_caller(p.graph)) {
    p.runs_on_caller = true;
    collect_caller_vars(p);
  }
  program_ = std::move(program);
}

Executor::~Executor() = default;
Executor::Executor(Executor&&) noexcept = default;
Executor& Executor::operator=(Executor&&) noexcept = default;

const Graph& Executor::graph() const { return program_->graph; }
const MemoryPlan& Executor::memory_plan() const { return program_->plan; }

std::vector<Tensor> Executor::run(absl::Span<const Tensor> inputs,
                                  const std::function<int64_t(int64_t)>& reseed,
                                  std::source_location where) const {
  const Program& p = *program_;
  const Graph& g = p.graph;
  CallSiteScope site("graph", where);
  TANDEM_CHECK(static_cast<int>(inputs.size()) == p.num_call_inputs, "the graph takes ",
               p.num_call_inputs, " inputs, got ", inputs.size());

  auto frame = std::make_shared<Frame>();
  frame->program = program_;
  frame->externals.reserve(static_cast<size_t>(p.num_call_inputs + p.num_fresh_outputs));
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    const int position = p.input_position[i];
    if (position < 0) continue;
    const Tensor& t = inputs[static_cast<size_t>(position)];
    const Value& v = g.value(g.inputs[i].value);
    TANDEM_CHECK(t.defined(), "input '", g.inputs[i].name, "' is undefined");
    TANDEM_CHECK(t.shape() == v.shape && t.dtype() == v.dtype && t.device() == p.options.device,
                 "input '", g.inputs[i].name, "' is ", dtype_name(t.dtype()), t.shape().to_string(),
                 " on ", t.device().to_string(), ", the graph was built for ", dtype_name(v.dtype),
                 v.shape.to_string(), " on ", p.options.device.to_string());
    frame->externals.push_back(t.snapshot());
  }
  std::vector<Tensor> outputs;
  outputs.reserve(g.outputs.size());
  for (size_t o = 0; o < g.outputs.size(); ++o) {
    const Program::OutputSource source = p.output_source[o];
    if (source.kind == Program::OutputSource::kExternal) {
      if (source.index >= static_cast<int>(frame->externals.size())) {
        const Value& v = g.value(g.outputs[o].value);
        frame->externals.push_back(Tensor::empty(v.shape, v.dtype, p.options.device));
      }
      outputs.push_back(frame->externals[static_cast<size_t>(source.index)]);
      continue;
    }
    // An output that is a graph input: the caller's tensor, or a constant.
    const size_t input = static_cast<size_t>(source.index);
    const int position = p.input_position[input];
    outputs.push_back(position >= 0 ? inputs[static_cast<size_t>(position)]
                                    : g.inputs[input].constant);
  }

  if (reseed) {
    frame->seeded_attrs.reserve(static_cast<size_t>(p.num_random_steps));
    for (const Program::Step& step : p.steps) {
      if (step.seed_slot < 0) continue;
      frame->seeded_attrs.push_back(step.attrs);
      frame->seeded_attrs.back().set("seed", reseed(step.attrs.get_int("seed")));
    }
  }

  engine::Engine& engine = engine::current();
  if (p.runs_on_caller && !p.steps.empty()) {
    // Note [Small calls run on the caller].
    absl::InlinedVector<engine::Var*, 16> reads(p.reads.begin(), p.reads.end());
    absl::InlinedVector<engine::Var*, 16> writes(p.writes.begin(), p.writes.end());
    for (size_t i = 0; i < frame->externals.size(); ++i) {
      bool input = i < static_cast<size_t>(p.num_call_inputs);
      (input ? reads : writes).push_back(frame->externals[i].var());
    }
    const Program::Step& first = p.steps.front();
    if (engine.run_if_free([&](const engine::RunContext& run) { run_all_steps(*frame, run); },
                           reads, writes, first.op->name.c_str(), first.where)) {
      return outputs;
    }
  }
  if (p.captured != nullptr && !p.steps.empty() && !(reseed && p.num_random_steps > 0)) {
    // The whole call as one op: Note [One launch per call].
    absl::InlinedVector<engine::Var*, 16> reads, writes;
    for (const Program::Segment& segment : p.segments) {
      reads.insert(reads.end(), segment.reads.begin(), segment.reads.end());
      writes.insert(writes.end(), segment.writes.begin(), segment.writes.end());
    }
    for (size_t i = 0; i < frame->externals.size(); ++i) {
      bool input = i < static_cast<size_t>(p.num_call_inputs);
      (input ? reads : writes).push_back(frame->externals[i].var());
    }
    const Program::Step& first = p.steps.front();
    engine.push([frame](const engine::RunContext& run) { run_as_cuda_graph(*frame, run); },
                p.options.device, reads, writes, first.op->name.c_str(), first.where);
    return outputs;
  }
  for (const Program::Segment& segment : p.segments) {
    absl::InlinedVector<engine::Var*, 8> reads(segment.reads.begin(), segment.reads.end());
    absl::InlinedVector<engine::Var*, 8> writes(segment.writes.begin(), segment.writes.end());
    for (size_t k = 0; k < segment.patches.size(); ++k) {
      engine::Var* var = frame->externals[static_cast<size_t>(segment.patches[k].external)].var();
      (segment.patch_is_read[k] ? reads : writes).push_back(var);
    }
    const Program::Step& first = p.steps[static_cast<size_t>(segment.begin)];
    engine.push(
        [&segment, frame](const engine::RunContext& run) {
          const Program& program = *frame->program;
          if (segment.end - segment.begin == 1) {
            run_step(program.steps[static_cast<size_t>(segment.begin)], *frame, run);
            return;
          }
          // A step after this one may read what it writes: none finishes later.
          engine::RunContext in_order = run;
          in_order.deferral = nullptr;
          for (int i = segment.begin; i < segment.end; ++i) {
            run_step(program.steps[static_cast<size_t>(i)], *frame, in_order);
          }
        },
        p.options.device, reads, writes, first.op->name.c_str(), first.where);
  }
  return outputs;
}

}  // namespace tandem::trace
