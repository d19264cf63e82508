#include "trace/passes/memory_plan.h"

#include <algorithm>

namespace tandem::trace {
namespace {

// Buffers start 64-byte aligned inside the allocator; rounding sizes keeps
// a reused buffer's capacity a multiple of a cache line.
size_t rounded(size_t bytes) { return (bytes + 63) / 64 * 64; }

size_t bytes_of(const Value& v) {
  return rounded(static_cast<size_t>(v.shape.numel()) * dtype_size(v.dtype));
}

}  // namespace

MemoryPlan plan_memory(const Graph& graph, bool reuse) {
  MemoryPlan plan;
  plan.buffer_of.assign(graph.values.size(), -1);

  std::vector<bool> bound(graph.values.size(), false);  // Inputs and outputs.
  for (const GraphInput& input : graph.inputs) bound[input.value] = true;
  for (const GraphOutput& output : graph.outputs) bound[output.value] = true;

  // The index of the last node reading each value (its producer if none does).
  std::vector<int> last_use(graph.values.size(), -1);
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    for (ValueId id : graph.nodes[n].outputs) last_use[id] = static_cast<int>(n);
    for (ValueId id : graph.nodes[n].inputs) last_use[id] = static_cast<int>(n);
  }

  std::vector<int> free_buffers;
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    const Node& node = graph.nodes[n];
    for (ValueId id : node.outputs) {
      if (bound[id]) continue;
      const size_t need = bytes_of(graph.value(id));
      plan.unplanned_bytes += need;
      int chosen = -1;
      if (reuse && !free_buffers.empty()) {
        // Best fit: the smallest free buffer that is big enough, else the
        // largest one, grown.
        auto fits = [&](int b) { return plan.buffer_bytes[b] >= need; };
        auto smaller = [&](int a, int b) { return plan.buffer_bytes[a] < plan.buffer_bytes[b]; };
        std::vector<int>::iterator pick = free_buffers.end();
        for (auto it = free_buffers.begin(); it != free_buffers.end(); ++it) {
          if (fits(*it) && (pick == free_buffers.end() || smaller(*it, *pick))) pick = it;
        }
        if (pick == free_buffers.end())
          pick = std::max_element(free_buffers.begin(), free_buffers.end(), smaller);
        chosen = *pick;
        free_buffers.erase(pick);
        plan.buffer_bytes[chosen] = std::max(plan.buffer_bytes[chosen], need);
      } else {
        chosen = static_cast<int>(plan.buffer_bytes.size());
        plan.buffer_bytes.push_back(need);
      }
      plan.buffer_of[id] = chosen;
    }
    // Free after the node's outputs are placed: a node never writes a buffer
    // it reads.
    auto release = [&](ValueId id) {
      if (plan.buffer_of[id] >= 0 && last_use[id] == static_cast<int>(n)) {
        free_buffers.push_back(plan.buffer_of[id]);
        last_use[id] = -2;  // Freed once even if the node reads it twice.
      }
    };
    for (ValueId id : node.inputs) release(id);
    for (ValueId id : node.outputs) release(id);
  }
  for (size_t bytes : plan.buffer_bytes) plan.planned_bytes += bytes;
  return plan;
}

}  // namespace tandem::trace
