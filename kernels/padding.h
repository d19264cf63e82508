// The padding modes of the "pad" op (kernels/ops/padding.cc), shared with
// its CUDA kernel: which input position each padded position reads.
#pragma once

#include <cstdint>

#include "kernels/attrs.h"
#include "kernels/host_device.h"

namespace tandem::kernels {

enum class PadMode { kConstant, kReflect, kReplicate, kCircular };

// The op's "mode" attribute; an unknown name is an Error listing the modes.
PadMode pad_mode(const Attrs& attrs);

inline const char* pad_mode_name(PadMode mode) {
  switch (mode) {
    case PadMode::kReflect:
      return "reflect";
    case PadMode::kReplicate:
      return "replicate";
    case PadMode::kCircular:
      return "circular";
    default:
      return "constant";
  }
}

// The input position that position `o` of an axis of `size` padded by
// `before` reads, for the modes that read the input (the pad op's checks
// hold: reflect's pads are below size, the others' axis is not empty). For
// constant padding, o - before, which may be outside [0, size).
TANDEM_HOST_DEVICE inline int64_t pad_source(PadMode mode, int64_t o, int64_t before,
                                             int64_t size) {
  int64_t i = o - before;
  switch (mode) {
    case PadMode::kReflect:
      if (i < 0) i = -i;
      return i < size ? i : 2 * (size - 1) - i;
    case PadMode::kReplicate:
      return i < 0 ? 0 : (i < size ? i : size - 1);
    case PadMode::kCircular:
      i %= size;
      return i < 0 ? i + size : i;
    default:
      return i;
  }
}

}  // namespace tandem::kernels
