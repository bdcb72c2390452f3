// The TensorFlow ops Cifar10Lrn and Cifar10LrnGrad, and Cifar10BiasReluLrn and its
// gradient, which take a convolution's output before its bias and ReLU (CPU; float32
// arithmetic, each tensor float32 or bfloat16) around the arithmetic of lrn_rows.cc,
// shared out over TensorFlow's intra-op threads.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"

extern "C" {
void cifar10_lrn_forward(const void* x, const float* conv_bias, void* y, int in_bf16,
                         int out_bf16, int64_t begin, int64_t end, int depth, int radius,
                         float bias, float alpha);
void cifar10_lrn_backward(const void* x, const float* conv_bias, const void* g, void* dx,
                          float* dconv_bias, int in_bf16, int out_bf16, int64_t begin,
                          int64_t end, int depth, int radius, float bias, float alpha);
}

namespace tensorflow {

#define CIFAR10_LRN_ATTRS                  \
  Attr("T: {float, bfloat16}")             \
      .Attr("Tout: {float, bfloat16}")     \
      .Attr("depth_radius: int")           \
      .Attr("bias: float")                 \
      .Attr("alpha: float")

// y = LRN(x), in Tout; T and Tout are each float or bfloat16.
REGISTER_OP("Cifar10Lrn")
    .Input("x: T")
    .Output("y: Tout")
    .CIFAR10_LRN_ATTRS
    .SetShapeFn(shape_inference::UnchangedShape);

// dx (T) from the forward pass's input x (T) and the gradient of its output, dy (Tout).
REGISTER_OP("Cifar10LrnGrad")
    .Input("x: T")
    .Input("dy: Tout")
    .Output("dx: T")
    .CIFAR10_LRN_ATTRS
    .SetShapeFn(shape_inference::UnchangedShape);

// y = LRN(relu(z + conv_bias)), z a convolution's output [batch, ..., channels] before
// its bias (conv_bias: [channels] float).
REGISTER_OP("Cifar10BiasReluLrn")
    .Input("z: T")
    .Input("conv_bias: float")
    .Output("y: Tout")
    .CIFAR10_LRN_ATTRS
    .SetShapeFn(shape_inference::UnchangedShape);

// dz (T) and dconv_bias (float, summed over the batch in a fixed order) from z, the
// bias and dy (Tout).
REGISTER_OP("Cifar10BiasReluLrnGrad")
    .Input("z: T")
    .Input("conv_bias: float")
    .Input("dy: Tout")
    .Output("dz: T")
    .Output("dconv_bias: float")
    .CIFAR10_LRN_ATTRS
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      c->set_output(0, c->input(0));
      c->set_output(1, c->input(1));
      return OkStatus();
    });

// The ops' settings and checks; with_bias: the Cifar10BiasRelu* form, whose second
// input is the convolution's bias.
class Cifar10LrnBase : public OpKernel {
 public:
  explicit Cifar10LrnBase(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("depth_radius", &radius_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("bias", &bias_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("alpha", &alpha_));
    with_bias_ = ctx->def().op().rfind("Cifar10BiasRelu", 0) == 0;
  }

 protected:
  // x's depth, or 0 after setting an error; the bias (with_bias_) or null.
  int Check(OpKernelContext* ctx, const Tensor& x, const float** conv_bias) {
    const string op = type_string();
    const int64_t depth = x.dims() >= 1 ? x.dim_size(x.dims() - 1) : 0;
    *conv_bias = nullptr;
    if (depth < 1 || depth > 1024 || radius_ < 0 || radius_ > 32) {
      ctx->SetStatus(errors::InvalidArgument(op, ": the last axis may hold 1 to 1024 "
                                             "channels and depth_radius be 0 to 32"));
      return 0;
    }
    if (with_bias_) {
      const Tensor& b = ctx->input(1);
      if (x.dims() < 2 || b.dims() != 1 || b.dim_size(0) != depth) {
        ctx->SetStatus(errors::InvalidArgument(op, ": z must have a batch axis and "
                                               "conv_bias one value per channel"));
        return 0;
      }
      *conv_bias = b.flat<float>().data();
    }
    return static_cast<int>(depth);
  }
  void Run(OpKernelContext* ctx, int64_t units, int64_t cost,
           const std::function<void(int64_t, int64_t)>& work) {
    ctx->device()->tensorflow_cpu_worker_threads()->workers->ParallelFor(units, cost, work);
  }
  int radius_;
  float bias_, alpha_;
  bool with_bias_;
};

class Cifar10LrnOp : public Cifar10LrnBase {
 public:
  using Cifar10LrnBase::Cifar10LrnBase;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const float* cb = nullptr;
    const int depth = Check(ctx, x, &cb);
    if (!ctx->status().ok()) return;
    Tensor* y = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &y));
    if (x.NumElements() == 0) return;
    const void* xp = x.data();
    void* yp = y->data();
    const int in_bf16 = x.dtype() == DT_BFLOAT16, out_bf16 = y->dtype() == DT_BFLOAT16;
    const int radius = radius_;
    const float bias = bias_, alpha = alpha_;
    Run(ctx, x.NumElements() / depth, 20 * depth, [=](int64_t b, int64_t e) {
      cifar10_lrn_forward(xp, cb, yp, in_bf16, out_bf16, b, e, depth, radius, bias, alpha);
    });
  }
};

class Cifar10LrnGradOp : public Cifar10LrnBase {
 public:
  using Cifar10LrnBase::Cifar10LrnBase;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& dy = ctx->input(with_bias_ ? 2 : 1);
    const float* cb = nullptr;
    const int depth = Check(ctx, x, &cb);
    if (!ctx->status().ok()) return;
    OP_REQUIRES(ctx, x.shape() == dy.shape(),
                errors::InvalidArgument(type_string(), ": the input and dy differ in shape"));
    Tensor* dx = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &dx));
    float* dcb = nullptr;
    int64_t images = 1;
    std::vector<float> parts;  // each image's bias gradient, summed below in order
    if (with_bias_) {
      Tensor* dbias = nullptr;
      OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({depth}), &dbias));
      dcb = dbias->flat<float>().data();
      std::fill(dcb, dcb + depth, 0.f);
      images = x.dim_size(0);
      parts.assign(images * depth, 0.f);
    }
    if (x.NumElements() == 0) return;
    const void* xp = x.data();
    const void* gp = dy.data();
    void* op = dx->data();
    float* pp = parts.data();
    const int in_bf16 = x.dtype() == DT_BFLOAT16, out_bf16 = dy.dtype() == DT_BFLOAT16;
    const int radius = radius_;
    const float bias = bias_, alpha = alpha_;
    const int64_t rows = x.NumElements() / depth;
    if (!with_bias_) {
      Run(ctx, rows, 40 * depth, [=](int64_t b, int64_t e) {
        cifar10_lrn_backward(xp, nullptr, gp, op, nullptr, in_bf16, out_bf16, b, e, depth,
                             radius, bias, alpha);
      });
      return;
    }
    // Whole images to each thread, so that the bias gradient's sums do not depend on
    // how the work is shared out.
    const int64_t per = rows / images;
    Run(ctx, images, 40 * depth * per, [=](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        cifar10_lrn_backward(xp, cb, gp, op, pp + i * depth, in_bf16, out_bf16, i * per,
                             (i + 1) * per, depth, radius, bias, alpha);
    });
    for (int64_t i = 0; i < images; ++i)
      for (int c = 0; c < depth; ++c) dcb[c] += pp[i * depth + c];
  }
};

REGISTER_KERNEL_BUILDER(Name("Cifar10Lrn").Device(DEVICE_CPU), Cifar10LrnOp);
REGISTER_KERNEL_BUILDER(Name("Cifar10LrnGrad").Device(DEVICE_CPU), Cifar10LrnGradOp);
REGISTER_KERNEL_BUILDER(Name("Cifar10BiasReluLrn").Device(DEVICE_CPU), Cifar10LrnOp);
REGISTER_KERNEL_BUILDER(Name("Cifar10BiasReluLrnGrad").Device(DEVICE_CPU), Cifar10LrnGradOp);

}  // namespace tensorflow
