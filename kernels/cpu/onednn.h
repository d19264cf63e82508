// oneDNN glue for the CPU kernels: one process-wide engine, a stream per
// call, and memory objects that wrap Tensor data in place (no copies).
//
//   dnnl::memory::desc md = onednn::desc(x.shape(), dnnl::memory::format_tag::nchw);
//   onednn::execute(dnnl::convolution_forward(pd),
//                   {{DNNL_ARG_SRC, onednn::wrap(x, pd.src_desc())}, ...});
//
// Only float32 goes through oneDNN: it has no float64 for most primitives, so
// each op keeps a plain-loop float64 path (which the gradient checks use).
// oneDNN's own exceptions (dnnl::error) never leave these helpers: they become
// tandem::Error naming the primitive, so an op that fails on a worker fails
// its outputs like any other kernel error. Internal to kernels/.
#pragma once

#include <string_view>
#include <unordered_map>

#include <oneapi/dnnl/dnnl.hpp>

#include "core/shape.h"
#include "core/tensor.h"

namespace tandem::kernels::onednn {

// The CPU engine, created on first use and shared by every kernel (oneDNN
// engines are thread-safe; primitives are cached by oneDNN itself).
const dnnl::engine& cpu_engine();

// The dims of `shape` as oneDNN wants them.
dnnl::memory::dims dims_of(const Shape& shape);
dnnl::memory::dims dims_of(std::initializer_list<int64_t> dims);

// A float32 descriptor with a format tag, or with explicit strides (for
// transposed views).
dnnl::memory::desc desc(const dnnl::memory::dims& dims, dnnl::memory::format_tag tag);
dnnl::memory::desc strided_desc(const dnnl::memory::dims& dims, const dnnl::memory::dims& strides);

// A memory object over the tensor's own elements. The descriptor must match
// the tensor's layout and size; the tensor must outlive the memory. oneDNN
// takes a non-const pointer even for inputs; it never writes them.
dnnl::memory wrap(const Tensor& tensor, const dnnl::memory::desc& md);

// Creates the primitive descriptor with `make` and converts a dnnl::error
// (typically "unimplemented") into a tandem::Error naming `what`.
template <class F>
auto make_pd(std::string_view what, F&& make) -> decltype(make());

// Runs `primitive` on a fresh stream of the CPU engine and waits for it.
void execute(const dnnl::primitive& primitive, const std::unordered_map<int, dnnl::memory>& args,
             std::string_view what);

// Creates oneDNN's static state now, on the calling thread, and makes the
// engine drain before it is destroyed at exit (Note [oneDNN at exit]).
// Called once, by the registry, before any op runs.
void warm_up();

// Converts the dnnl::error being handled into a tandem::Error (rethrows).
[[noreturn]] void rethrow_dnnl_error(std::string_view what);

template <class F>
auto make_pd(std::string_view what, F&& make) -> decltype(make()) {
  try {
    return make();
  } catch (const dnnl::error&) {
    rethrow_dnnl_error(what);
  }
}

}  // namespace tandem::kernels::onednn
