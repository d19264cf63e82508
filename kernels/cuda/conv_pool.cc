// The CUDA kernels of the convolution and pooling ops
// (kernels/ops/conv_pool.cc): convolutions on cuDNN's convolution API, the
// bias and fused activation on our epilogue (bias_activation.h), pooling on
// our own kernels (pooling.h says why).
//
// Note [cuDNN convolution algorithms]
// cuDNN offers several algorithms per convolution, fastest depending on the
// shapes. We take the first its heuristics rank (cudnnGet*Algorithm_v7)
// among those that need at most kMaxWorkspace bytes of scratch and keep the
// requested math; cudnnFind* would time them all, but it synchronizes the
// device, which a kernel must never do (Note [GPU ops complete at launch]).
// The choice is cached per shape, attributes, dtype, math and device. The
// math is exact FMA for float32 unless cuda_matmul_precision() allows TF32
// (kernels/matmul_precision.h). This is cuDNN's legacy API, deprecated in
// cuDNN 9 but complete there.
#include <climits>
#include <cstdint>
#include <mutex>
#include <vector>

#include "absl/container/flat_hash_map.h"

#include "kernels/cpu/dtype_visit.h"
#include "kernels/cuda/bias_activation.h"
#include "kernels/cuda/families.h"
#include "kernels/cuda/handles.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/pooling.h"
#include "kernels/matmul_precision.h"
#include "kernels/registry.h"

namespace tandem::kernels {
namespace {

// Convolutions

// Note [cuDNN convolution algorithms]: 1 GiB, a small part of a data-center
// GPU's memory; the caching allocator reuses the block call after call.
constexpr size_t kMaxWorkspace = size_t{1} << 30;

// A cuDNN descriptor, created and destroyed with its owner.
template <class D, cudnnStatus_t (*kCreate)(D*), cudnnStatus_t (*kDestroy)(D)>
class Descriptor {
 public:
  Descriptor() { TANDEM_CUDNN_CHECK(kCreate(&descriptor_)); }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  ~Descriptor() { kDestroy(descriptor_); }
  D get() const { return descriptor_; }

 private:
  D descriptor_;
};

using TensorDescriptor =
    Descriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using FilterDescriptor =
    Descriptor<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor>;
using ConvolutionDescriptor =
    Descriptor<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor,
               cudnnDestroyConvolutionDescriptor>;

int to_int(int64_t value, const char* what) {
  TANDEM_CHECK(value <= INT_MAX, "cuDNN takes int sizes, but ", what, " is ", value);
  return static_cast<int>(value);
}

cudnnDataType_t cudnn_data_type(DType dtype) {
  TANDEM_CHECK(dtype == DType::kFloat32 || dtype == DType::kFloat64,
               "CUDA convolutions take float32 or float64, got ", dtype_name(dtype));
  return dtype == DType::kFloat64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
}

void set_nchw(const TensorDescriptor& d, const Shape& s, cudnnDataType_t type) {
  TANDEM_CUDNN_CHECK(cudnnSetTensor4dDescriptor(
      d.get(), CUDNN_TENSOR_NCHW, type, to_int(s[0], "a batch"), to_int(s[1], "a channel count"),
      to_int(s[2], "a height"), to_int(s[3], "a width")));
}

enum class ConvPass { kForward, kBackwardData, kBackwardFilter };

// An algorithm of one pass (its cudnnConvolution*Algo_t), the math type to
// run it with, and the workspace it needs.
struct ConvAlgorithm {
  int algorithm = 0;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  size_t workspace = 0;
};

// One convolution as cuDNN sees it: packed NCHW x and y, OIHW w, and the
// convolution's attributes, on the op's handle.
class CudnnConv {
 public:
  CudnnConv(const KernelContext& c, const Shape& x, const Shape& w, const Shape& y, DType dtype)
      : handle_(cuda::cudnn_handle(c)), dtype_(dtype) {
    const cudnnDataType_t type = cudnn_data_type(dtype);
    const std::vector<int64_t>& stride = c.attrs.get_ints("stride");
    const std::vector<int64_t>& padding = c.attrs.get_ints("padding");
    const std::vector<int64_t>& dilation = c.attrs.get_ints("dilation");
    const int64_t groups = c.attrs.get_int("groups");
    set_nchw(x_, x, type);
    set_nchw(y_, y, type);
    TANDEM_CUDNN_CHECK(cudnnSetFilter4dDescriptor(
        w_.get(), type, CUDNN_TENSOR_NCHW, to_int(w[0], "a channel count"),
        to_int(w[1], "a channel count"), to_int(w[2], "a kernel height"),
        to_int(w[3], "a kernel width")));
    TANDEM_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
        conv_.get(), to_int(padding[0], "padding"), to_int(padding[1], "padding"),
        to_int(stride[0], "a stride"), to_int(stride[1], "a stride"),
        to_int(dilation[0], "a dilation"), to_int(dilation[1], "a dilation"),
        CUDNN_CROSS_CORRELATION, type));
    TANDEM_CUDNN_CHECK(cudnnSetConvolutionGroupCount(conv_.get(), to_int(groups, "groups")));
    // Note [cuDNN convolution algorithms]: exact unless TF32 is allowed.
    math_ = dtype == DType::kFloat32 && cuda_matmul_precision() == MatmulPrecision::kFloat32
                ? CUDNN_FMA_MATH
                : CUDNN_DEFAULT_MATH;
    TANDEM_CUDNN_CHECK(cudnnSetConvolutionMathType(conv_.get(), math_));
    key_ = {c.run.device.index(), static_cast<int64_t>(dtype), math_, groups};
    key_.insert(key_.end(), x.begin(), x.end());
    key_.insert(key_.end(), w.begin(), w.end());
    for (const std::vector<int64_t>* attr : {&stride, &padding, &dilation}) {
      key_.insert(key_.end(), attr->begin(), attr->end());
    }
  }

  cudnnHandle_t handle() const { return handle_; }
  cudnnTensorDescriptor_t x() const { return x_.get(); }
  cudnnTensorDescriptor_t y() const { return y_.get(); }
  cudnnFilterDescriptor_t w() const { return w_.get(); }
  cudnnConvolutionDescriptor_t conv() const { return conv_.get(); }

  // The algorithm for `pass` (cached), with the descriptor set to its math.
  ConvAlgorithm algorithm(ConvPass pass) {
    static auto& mutex = *new std::mutex;  // Leaked, like the handles: used until exit.
    static auto& cache = *new absl::flat_hash_map<std::vector<int64_t>, ConvAlgorithm>;
    std::vector<int64_t> key = key_;
    key.push_back(static_cast<int64_t>(pass));
    ConvAlgorithm chosen;
    bool cached;
    {
      std::lock_guard lock(mutex);
      auto it = cache.find(key);
      cached = it != cache.end();
      if (cached) chosen = it->second;
    }
    if (!cached) {
      // Outside the lock: two threads may both ask the heuristics, and agree.
      chosen = rank(pass);
      std::lock_guard lock(mutex);
      cache.emplace(key, chosen);
    }
    TANDEM_CUDNN_CHECK(cudnnSetConvolutionMathType(conv_.get(), chosen.math));
    return chosen;
  }

 private:
  // The heuristics' first acceptable algorithm (Note [cuDNN convolution
  // algorithms]). `query(results, capacity, &returned)` asks for a ranking.
  template <class Perf, class Query>
  ConvAlgorithm first_fit(const char* what, int capacity, Query query) const {
    std::vector<Perf> results(capacity);
    int returned = 0;
    query(results.data(), capacity, &returned);
    for (int i = 0; i < returned; ++i) {
      const Perf& r = results[i];
      if (r.status == CUDNN_STATUS_SUCCESS && r.memory <= kMaxWorkspace &&
          (math_ != CUDNN_FMA_MATH || r.mathType == CUDNN_FMA_MATH)) {
        return {static_cast<int>(r.algo), r.mathType, r.memory};
      }
    }
    TANDEM_CHECK(false, "cuDNN has no ", what, " algorithm for this convolution (",
                 dtype_name(dtype_), ", at most ", kMaxWorkspace >> 20, " MiB of workspace)");
    return {};
  }

  ConvAlgorithm rank(ConvPass pass) const {
    int capacity = 0;
    switch (pass) {
      case ConvPass::kForward:
        TANDEM_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(handle_, &capacity));
        return first_fit<cudnnConvolutionFwdAlgoPerf_t>(
            "forward", capacity, [&](auto* results, int n, int* returned) {
              TANDEM_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(handle_, x(), w(), conv(),
                                                                        y(), n, returned, results));
            });
      case ConvPass::kBackwardData:
        TANDEM_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(handle_, &capacity));
        return first_fit<cudnnConvolutionBwdDataAlgoPerf_t>(
            "backward data", capacity, [&](auto* results, int n, int* returned) {
              TANDEM_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
                  handle_, w(), y(), conv(), x(), n, returned, results));
            });
      case ConvPass::kBackwardFilter:
        TANDEM_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(handle_, &capacity));
        return first_fit<cudnnConvolutionBwdFilterAlgoPerf_t>(
            "backward filter", capacity, [&](auto* results, int n, int* returned) {
              TANDEM_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                  handle_, x(), y(), conv(), w(), n, returned, results));
            });
    }
    TANDEM_INTERNAL_ASSERT(false, "unknown convolution pass");
  }

  cudnnHandle_t handle_;
  DType dtype_;
  TensorDescriptor x_, y_;
  FilterDescriptor w_;
  ConvolutionDescriptor conv_;
  cudnnMathType_t math_ = CUDNN_DEFAULT_MATH;
  // What the choice depends on, but the pass: device, dtype, math, groups,
  // x's and w's shapes, stride, padding, dilation.
  std::vector<int64_t> key_;
};

// Scratch for an algorithm, alive until the kernel returns (the caching
// allocator reuses it only after the stream's work on it).
Tensor workspace(const KernelContext& c, size_t bytes) {
  return Tensor::empty(Shape{static_cast<int64_t>(bytes)}, DType::kUInt8, c.run.device);
}

void zero(const Tensor& t, cudaStream_t stream) {
  TANDEM_CUDA_CHECK(cudaMemsetAsync(t.raw_data(), 0, t.nbytes(), stream));
}

// conv2d(x, weight, bias) -> y, then the fused activation.
void conv2d_kernel(const KernelContext& c) {
  const Tensor &x = c.inputs[0], &w = c.inputs[1], &b = c.inputs[2], &y = c.outputs[0];
  if (y.numel() == 0) return;
  cudaStream_t stream = cuda::stream_of(c);
  if (x.numel() == 0 || w.numel() == 0) {
    zero(y, stream);  // No products (zero channels, or an all-padding input): bias only.
  } else {
    CudnnConv conv(c, x.shape(), w.shape(), y.shape(), x.dtype());
    const ConvAlgorithm a = conv.algorithm(ConvPass::kForward);
    Tensor scratch = workspace(c, a.workspace);
    TANDEM_CUDNN_CHECK(cudnnConvolutionForward(
        conv.handle(), cuda::kOne.for_dtype(x.dtype()), conv.x(), x.raw_data(), conv.w(),
        w.raw_data(), conv.conv(), static_cast<cudnnConvolutionFwdAlgo_t>(a.algorithm),
        scratch.raw_data(), a.workspace, cuda::kZero.for_dtype(x.dtype()), conv.y(), y.raw_data()));
  }
  cuda::add_bias_and_activate(y, b, y.shape()[2] * y.shape()[3], c.attrs, stream);
}

// conv2d_backward_data(grad_y, weight) -> grad_x.
void conv2d_backward_data_kernel(const KernelContext& c) {
  const Tensor &gy = c.inputs[0], &w = c.inputs[1], &gx = c.outputs[0];
  if (gx.numel() == 0) return;
  if (gy.numel() == 0 || w.numel() == 0) return zero(gx, cuda::stream_of(c));
  CudnnConv conv(c, gx.shape(), w.shape(), gy.shape(), gy.dtype());
  const ConvAlgorithm a = conv.algorithm(ConvPass::kBackwardData);
  Tensor scratch = workspace(c, a.workspace);
  TANDEM_CUDNN_CHECK(cudnnConvolutionBackwardData(
      conv.handle(), cuda::kOne.for_dtype(gy.dtype()), conv.w(), w.raw_data(), conv.y(),
      gy.raw_data(), conv.conv(), static_cast<cudnnConvolutionBwdDataAlgo_t>(a.algorithm),
      scratch.raw_data(), a.workspace, cuda::kZero.for_dtype(gy.dtype()), conv.x(), gx.raw_data()));
}

// conv_transpose2d(x, weight, bias) -> y: conv2d's backward data from y's
// shape to x's, then the bias.
void conv_transpose2d_kernel(const KernelContext& c) {
  conv2d_backward_data_kernel(c);
  const Tensor& y = c.outputs[0];
  if (y.numel() == 0) return;
  cuda::add_bias_and_activate(y, c.inputs[2], y.shape()[2] * y.shape()[3],
                              Attrs{{"activation", std::string("none")}}, cuda::stream_of(c));
}

// grad_bias: grad_y summed over all but the channel axis.
void conv2d_backward_bias(const KernelContext& c, const Tensor& gy, const Tensor& gb) {
  const cudnnDataType_t type = cudnn_data_type(gy.dtype());
  TensorDescriptor dy, bias;
  set_nchw(dy, gy.shape(), type);
  set_nchw(bias, Shape{int64_t{1}, gb.numel(), int64_t{1}, int64_t{1}}, type);
  TANDEM_CUDNN_CHECK(cudnnConvolutionBackwardBias(
      cuda::cudnn_handle(c), cuda::kOne.for_dtype(gy.dtype()), dy.get(), gy.raw_data(),
      cuda::kZero.for_dtype(gy.dtype()), bias.get(), gb.raw_data()));
}

// conv2d_backward_weight(x, grad_y) -> grad_weight, grad_bias.
void conv2d_backward_weight_kernel(const KernelContext& c) {
  const Tensor &x = c.inputs[0], &gy = c.inputs[1], &gw = c.outputs[0], &gb = c.outputs[1];
  cudaStream_t stream = cuda::stream_of(c);
  if (gb.numel() > 0) {
    if (gy.numel() == 0) {
      zero(gb, stream);
    } else {
      conv2d_backward_bias(c, gy, gb);
    }
  }
  if (gw.numel() == 0) return;
  if (gy.numel() == 0 || x.numel() == 0) return zero(gw, stream);  // No products.
  CudnnConv conv(c, x.shape(), gw.shape(), gy.shape(), x.dtype());
  const ConvAlgorithm a = conv.algorithm(ConvPass::kBackwardFilter);
  Tensor scratch = workspace(c, a.workspace);
  TANDEM_CUDNN_CHECK(cudnnConvolutionBackwardFilter(
      conv.handle(), cuda::kOne.for_dtype(x.dtype()), conv.x(), x.raw_data(), conv.y(),
      gy.raw_data(), conv.conv(), static_cast<cudnnConvolutionBwdFilterAlgo_t>(a.algorithm),
      scratch.raw_data(), a.workspace, cuda::kZero.for_dtype(x.dtype()), conv.w(), gw.raw_data()));
}

// Pooling

using cuda::pooling::PoolGeometry;

// max_pool2d's and avg_pool2d's windows between an input and output shape;
// the attributes were checked by inference.
PoolGeometry fixed_windows(const KernelContext& c, const Shape& in, const Shape& out) {
  const Attrs& attrs = c.attrs;
  const std::vector<int64_t>& kernel = attrs.get_ints("kernel");
  const std::vector<int64_t>& padding = attrs.get_ints("padding");
  const std::vector<int64_t>& stride =
      attrs.get_ints("stride").empty() ? kernel : attrs.get_ints("stride");
  const std::vector<int64_t> dilation =
      attrs.has("dilation") ? attrs.get_ints("dilation") : std::vector<int64_t>{1, 1};
  return {.planes = in[0] * in[1],
          .y = {in[2], out[2], kernel[0], stride[0], padding[0], dilation[0]},
          .x = {in[3], out[3], kernel[1], stride[1], padding[1], dilation[1]}};
}

PoolGeometry adaptive_windows(const KernelContext&, const Shape& in, const Shape& out) {
  return {.planes = in[0] * in[1], .y = {in[2], out[2]}, .x = {in[3], out[3]}};
}

void max_pool2d_kernel(const KernelContext& c) {
  const Tensor &x = c.inputs[0], &y = c.outputs[0];
  const PoolGeometry g = fixed_windows(c, x.shape(), y.shape());
  visit_floating(x.dtype(), [&]<class T>() {
    cuda::pooling::max_pool2d<T>(g, x.data<T>(), y.data<T>(), nullptr, cuda::stream_of(c));
  });
}

// max_pool2d_indices: x -> each window's argmax within its plane.
void max_pool2d_indices_kernel(const KernelContext& c) {
  const Tensor &x = c.inputs[0], &indices = c.outputs[0];
  const PoolGeometry g = fixed_windows(c, x.shape(), indices.shape());
  visit_floating(x.dtype(), [&]<class T>() {
    cuda::pooling::max_pool2d<T>(g, x.data<T>(), nullptr, indices.data<int64_t>(),
                                 cuda::stream_of(c));
  });
}

// max_pool2d_backward(x, grad_y) -> grad_x.
void max_pool2d_backward_kernel(const KernelContext& c) {
  const Tensor &x = c.inputs[0], &gy = c.inputs[1], &gx = c.outputs[0];
  const PoolGeometry g = fixed_windows(c, x.shape(), gy.shape());
  Tensor argmax = Tensor::empty(gy.shape(), DType::kInt64, c.run.device);
  visit_floating(x.dtype(), [&]<class T>() {
    cuda::pooling::max_pool2d_backward<T>(g, x.data<T>(), gy.data<T>(), gx.data<T>(),
                                          argmax.data<int64_t>(), cuda::stream_of(c));
  });
}

// avg_pool2d (fixed windows) and adaptive_avg_pool2d: x -> y.
template <PoolGeometry (*kWindows)(const KernelContext&, const Shape&, const Shape&)>
void average_kernel(const KernelContext& c) {
  const Tensor &x = c.inputs[0], &y = c.outputs[0];
  const PoolGeometry g = kWindows(c, x.shape(), y.shape());
  visit_floating(x.dtype(), [&]<class T>() {
    cuda::pooling::avg_pool2d<T>(g, x.data<T>(), y.data<T>(), cuda::stream_of(c));
  });
}

// Their backward ops: grad_y -> grad_x.
template <PoolGeometry (*kWindows)(const KernelContext&, const Shape&, const Shape&)>
void average_backward_kernel(const KernelContext& c) {
  const Tensor &gy = c.inputs[0], &gx = c.outputs[0];
  const PoolGeometry g = kWindows(c, gx.shape(), gy.shape());
  visit_floating(gy.dtype(), [&]<class T>() {
    cuda::pooling::avg_pool2d_backward<T>(g, gy.data<T>(), gx.data<T>(), cuda::stream_of(c));
  });
}

}  // namespace

void register_conv_pool_cuda_kernels(Registry& registry) {
  registry.set_cuda_kernel("conv2d", conv2d_kernel);
  registry.set_cuda_kernel("conv2d_backward_data", conv2d_backward_data_kernel);
  registry.set_cuda_kernel("conv2d_backward_weight", conv2d_backward_weight_kernel);
  registry.set_cuda_kernel("conv_transpose2d", conv_transpose2d_kernel);
  registry.set_cuda_kernel("max_pool2d", max_pool2d_kernel);
  registry.set_cuda_kernel("max_pool2d_backward", max_pool2d_backward_kernel);
  registry.set_cuda_kernel("max_pool2d_indices", max_pool2d_indices_kernel);
  registry.set_cuda_kernel("avg_pool2d", average_kernel<fixed_windows>);
  registry.set_cuda_kernel("avg_pool2d_backward", average_backward_kernel<fixed_windows>);
  registry.set_cuda_kernel("adaptive_avg_pool2d", average_kernel<adaptive_windows>);
  registry.set_cuda_kernel("adaptive_avg_pool2d_backward",
                           average_backward_kernel<adaptive_windows>);
}

}  // namespace tandem::kernels
