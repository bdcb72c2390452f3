// The TensorFlow ops Cifar10Lrn and Cifar10LrnGrad (CPU; float32 arithmetic, each
// tensor float32 or bfloat16) around the arithmetic of lrn_rows.cc, shared out over
// TensorFlow's intra-op threads.
#include <cstdint>
#include <functional>
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"

extern "C" {
void cifar10_lrn_forward(const void* x, void* y, int in_bf16, int out_bf16, int64_t begin,
                         int64_t end, int depth, int radius, float bias, float alpha);
void cifar10_lrn_backward(const void* x, const void* g, void* dx, int in_bf16, int out_bf16,
                          int64_t begin, int64_t end, int depth, int radius, float bias,
                          float alpha);
}

namespace tensorflow {

// y = LRN(x), in Tout; T and Tout are each float or bfloat16.
REGISTER_OP("Cifar10Lrn")
    .Input("x: T")
    .Output("y: Tout")
    .Attr("T: {float, bfloat16}")
    .Attr("Tout: {float, bfloat16}")
    .Attr("depth_radius: int")
    .Attr("bias: float")
    .Attr("alpha: float")
    .SetShapeFn(shape_inference::UnchangedShape);

// dx (T) from the forward pass's input x (T) and the gradient of its output, dy (Tout).
REGISTER_OP("Cifar10LrnGrad")
    .Input("x: T")
    .Input("dy: Tout")
    .Output("dx: T")
    .Attr("T: {float, bfloat16}")
    .Attr("Tout: {float, bfloat16}")
    .Attr("depth_radius: int")
    .Attr("bias: float")
    .Attr("alpha: float")
    .SetShapeFn(shape_inference::UnchangedShape);

class Cifar10LrnBase : public OpKernel {
 public:
  explicit Cifar10LrnBase(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("depth_radius", &radius_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("bias", &bias_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("alpha", &alpha_));
  }

 protected:
  void Check(OpKernelContext* ctx, const Tensor& x) {
    OP_REQUIRES(ctx, x.dims() >= 1 && x.dim_size(x.dims() - 1) >= 1 &&
                         x.dim_size(x.dims() - 1) <= 1024 && radius_ >= 0 &&
                         radius_ <= 32,
                errors::InvalidArgument("Cifar10Lrn: the last axis may hold 1 to 1024 "
                                        "channels and depth_radius be 0 to 32"));
  }
  void Run(OpKernelContext* ctx, int64_t rows, int64_t cost,
           const std::function<void(int64_t, int64_t)>& work) {
    ctx->device()->tensorflow_cpu_worker_threads()->workers->ParallelFor(rows, cost, work);
  }
  int radius_;
  float bias_, alpha_;
};

class Cifar10LrnOp : public Cifar10LrnBase {
 public:
  using Cifar10LrnBase::Cifar10LrnBase;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    Check(ctx, x);
    if (!ctx->status().ok()) return;
    Tensor* y = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &y));
    const int depth = x.dim_size(x.dims() - 1);
    if (x.NumElements() == 0) return;
    const void* xp = x.data();
    void* yp = y->data();
    const int in_bf16 = x.dtype() == DT_BFLOAT16, out_bf16 = y->dtype() == DT_BFLOAT16;
    const int radius = radius_;
    const float bias = bias_, alpha = alpha_;
    Run(ctx, x.NumElements() / depth, 20 * depth, [=](int64_t b, int64_t e) {
      cifar10_lrn_forward(xp, yp, in_bf16, out_bf16, b, e, depth, radius, bias, alpha);
    });
  }
};

class Cifar10LrnGradOp : public Cifar10LrnBase {
 public:
  using Cifar10LrnBase::Cifar10LrnBase;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& dy = ctx->input(1);
    Check(ctx, x);
    if (!ctx->status().ok()) return;
    OP_REQUIRES(ctx, x.shape() == dy.shape(),
                errors::InvalidArgument("Cifar10LrnGrad: x and dy differ in shape"));
    Tensor* dx = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &dx));
    const int depth = x.dim_size(x.dims() - 1);
    if (x.NumElements() == 0) return;
    const void* xp = x.data();
    const void* gp = dy.data();
    void* op = dx->data();
    const int in_bf16 = x.dtype() == DT_BFLOAT16, out_bf16 = dy.dtype() == DT_BFLOAT16;
    const int radius = radius_;
    const float bias = bias_, alpha = alpha_;
    Run(ctx, x.NumElements() / depth, 40 * depth, [=](int64_t b, int64_t e) {
      cifar10_lrn_backward(xp, gp, op, in_bf16, out_bf16, b, e, depth, radius, bias, alpha);
    });
  }
};

REGISTER_KERNEL_BUILDER(Name("Cifar10Lrn").Device(DEVICE_CPU), Cifar10LrnOp);
REGISTER_KERNEL_BUILDER(Name("Cifar10LrnGrad").Device(DEVICE_CPU), Cifar10LrnGradOp);

}  // namespace tensorflow
