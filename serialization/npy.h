// NumPy .npy files: how tools/tandem-run takes inputs and gives outputs.
//
//   write_npy("x.npy", tensor);          // np.load("x.npy") reads it
//   Tensor x = read_npy("x.npy");        // np.save("x.npy", a) wrote it
//
// Format versions 1.0, 2.0 and 3.0 are read; 1.0 is written, byte for byte
// as np.save writes it. Ranks up to 64 (NumPy 2's limit). dtypes: float32
// '<f4', float64 '<f8', float16 '<f2', int32 '<i4', int64 '<i8', uint8 '|u1',
// bool '|b1' (bfloat16 has no NumPy dtype and is refused). Big-endian arrays
// are byte-swapped on read; Fortran-order arrays are refused with a message
// saying how to make a C-order copy. The header is parsed as untrusted input:
// a bad file throws tandem::Error naming the file, the byte offset and the
// problem, never allocating more than the file's data can fill.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/types/span.h"

#include "core/tensor.h"

namespace tandem::serialization {

// Writes `tensor` (CPU; waits for its value) atomically to `path`.
void write_npy(const std::string& path, const Tensor& tensor);

// Reads `path` into a new CPU tensor.
Tensor read_npy(const std::string& path);

// The same from a file image in memory; `display_name` stands for the path.
Tensor parse_npy(absl::Span<const uint8_t> bytes, std::string_view display_name);

}  // namespace tandem::serialization
