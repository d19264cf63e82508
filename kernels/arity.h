// An op's input count, checked before its inference reads the inputs:
// dispatch, a graph's add_node and the ONNX importer all take inputs from
// callers that may give the wrong number (a hostile file's Concat of
// nothing).
#pragma once

#include <cstddef>

#include "core/error.h"
#include "kernels/registry.h"

namespace tandem::kernels {

inline void check_input_count(const OpDef& op, size_t given) {
  if (op.num_inputs == kVariadic) {
    TANDEM_CHECK(given > 0, "expects at least one input, got none");
  } else {
    TANDEM_CHECK(static_cast<int>(given) == op.num_inputs, "expects ", op.num_inputs,
                 op.num_inputs == 1 ? " input" : " inputs", ", got ", given);
  }
}

}  // namespace tandem::kernels
