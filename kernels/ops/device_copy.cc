// Moving data between devices: to_device copies a tensor to the device its
// "device" attribute names ("cpu", "cuda:0"). Tensor::to is its eager form.
//
// The op runs on the GPU whenever one side is a GPU (OpDef::output_device),
// so its CUDA kernel (kernels/cuda/copy.cc) does every transfer: host to
// device, device to host, and between devices. The CPU kernel only copies
// host memory, for completeness (Tensor::to returns a tensor already on the
// device itself, as in PyTorch).
#include <cstring>

#include "kernels/known_ops.h"
#include "kernels/ops/families.h"
#include "kernels/ops/op_helpers.h"
#include "kernels/registry.h"

namespace tandem::kernels {
namespace {

Device device_attr(const Attrs& attrs) { return Device::parse(attrs.get_string("device")); }

TensorMetas infer_same(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  device_attr(attrs);  // A bad device name fails here, at the call.
  return {in[0]};
}

void copy_kernel(const KernelContext& c) {
  if (c.inputs[0].nbytes() != 0) {
    std::memcpy(c.outputs[0].raw_data(), c.inputs[0].raw_data(), c.inputs[0].nbytes());
  }
}

// The gradient goes back to where the input lives.
std::vector<Tensor> to_device_gradient(const GradContext& c) {
  const Tensor& g = c.grad_outputs[0];
  if (!g.defined()) return {Tensor()};
  return {nested_call1("to_device", {g}, {{"device", c.inputs[0].device().to_string()}})};
}

}  // namespace

const OpDef& to_device_op() { return op_def<"to_device">(); }

void register_device_copy_ops(Registry& registry) {
  registry.add({.name = "to_device",
                .attrs = {{.name = "device", .default_value = std::string(), .required = true}},
                .infer = infer_same,
                .cpu = copy_kernel,
                .gradient = to_device_gradient,
                .doc = "a copy of x on another device",
                .output_device = device_attr});
}

}  // namespace tandem::kernels
