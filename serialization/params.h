// The params file: named tensors in one binary file, the weights of an
// exported model (beside its graph JSON) and of an eager checkpoint
// (nn::Module::save).
//
//   write_params("model.params", {{"fc.weight", w}, {"fc.bias", b}});
//   ParamsFile params = read_params("model.params");
//   params.tensors[0].name;  // "fc.weight"
//
// The layout is in serialization/FORMAT.md ("Params file"): a small header,
// an index (name, dtype, shape, offset, length and CRC-32 of each tensor),
// then the tensors' bytes, each 64-byte aligned so that a loader can map the
// file. Writing is deterministic (the same tensors give the same bytes) and
// atomic (serialization/file_io.h).
//
// Reading trusts no byte: every count, length,
// offset and shape is checked against the file's size with checked
// arithmetic before anything is allocated, and a bad file throws
// tandem::Error naming the file, the byte offset, the tensor and what is
// wrong. Tensors are copied into fresh CPU storage, never mapped: a file
// truncated by another process while a model runs cannot fault it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/types/span.h"

#include "core/dtype.h"
#include "core/shape.h"
#include "core/tensor.h"

namespace tandem::serialization {

struct NamedTensor {
  std::string name;
  Tensor tensor;
};

// Where one tensor lies in a params file, as its index says.
struct ParamsEntry {
  std::string name;
  DType dtype = DType::kFloat32;
  Shape shape;
  uint64_t offset = 0;  // From the start of the file; a multiple of 64.
  uint64_t length = 0;  // numel * dtype size, exactly.
  uint32_t crc32 = 0;   // zlib's CRC-32 of the `length` bytes.

  friend bool operator==(const ParamsEntry&, const ParamsEntry&) = default;
};

struct ParamsFile {
  std::vector<ParamsEntry> entries;  // In file order.
  std::vector<NamedTensor> tensors;  // CPU, contiguous; same order.
};

class AtomicFile;

// A params file's bytes, laid out but not yet written: the tensors checked,
// snapshotted (a later in-place update cannot change what is written) and
// indexed. What write_params writes, in two steps, for a caller that names
// the file after its contents (export_graph: Note [Exporting two files]).
class ParamsImage {
 public:
  // Checks `tensors` (CPU; unique, non-empty UTF-8 names without control
  // characters; rank <= 32) and waits for their values. Throws
  // tandem::Error naming `display_name` and the tensor.
  ParamsImage(absl::Span<const NamedTensor> tensors, std::string_view display_name);

  // The index, in file order, as it will be written.
  const std::vector<ParamsEntry>& entries() const { return entries_; }
  // The header checksum (FORMAT.md): the CRC-32 of the header and the index,
  // which holds every tensor's CRC-32, so it changes with any byte.
  uint32_t checksum() const { return checksum_; }
  // Writes the whole file to `out`, which must be empty; the caller commits.
  void write_to(AtomicFile& out) const;

 private:
  std::vector<ParamsEntry> entries_;
  std::vector<Tensor> values_;  // Snapshots, one per entry.
  std::string head_;            // The 36-byte header.
  std::string index_;
  uint32_t checksum_ = 0;
};

// Writes `tensors` to `path` (as ParamsImage, then atomically:
// serialization/file_io.h) and returns the index as written.
std::vector<ParamsEntry> write_params(const std::string& path,
                                      absl::Span<const NamedTensor> tensors);

// Reads and checks the whole file (every checksum).
// With `no_follow`, a symbolic link at `path` is refused (a model's params
// file must be a regular file in its folder); the check and the open are one
// system call, so the file cannot be swapped in between.
ParamsFile read_params(const std::string& path, bool no_follow = false);

// The same checks on a file image in memory; `display_name` stands for the
// path in messages (the fuzz target reads this way).
ParamsFile parse_params(absl::Span<const uint8_t> bytes, std::string_view display_name);

}  // namespace tandem::serialization
