// The TensorFlow ops Cifar10BiasReluPool and Cifar10BiasReluPoolGrad (CPU): 3x3,
// stride-2, SAME max pooling of relu(z + bias), around the arithmetic of
// pool_rows.cc, shared out image by image over TensorFlow's intra-op threads.
#include <cstdint>
#include <vector>
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/framework/tensor_util.h"

extern "C" {
void cifar10_pool_forward(const void* z, const float* bias, void* y, uint8_t* arg,
                          int in_bf16, int out_bf16, int64_t begin, int64_t end, int h,
                          int w, int c);
void cifar10_pool_backward(const void* g, const uint8_t* arg, void* dz, float* dbias,
                           int in_bf16, int out_bf16, int64_t begin, int64_t end, int h,
                           int w, int c);
}

namespace tensorflow {

namespace {
// pool_rows.cc indexes within an image with int: under 2^31 values an image.
bool FitsInt(int64_t h, int64_t w, int64_t c) { return h * w * c <= INT32_MAX; }

int64_t Half(int64_t size) { return (size + 1) / 2; }
}  // namespace

// y = max_pool(relu(z + bias), 3x3, stride 2, SAME) in Tout, and which of each
// window's positions gave each output (255: none, the ReLU gave 0).
REGISTER_OP("Cifar10BiasReluPool")
    .Input("z: T")
    .Input("bias: float")
    .Output("y: Tout")
    .Output("argmax: uint8")
    .Attr("T: {float, bfloat16}")
    .Attr("Tout: {float, bfloat16}")
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      shape_inference::ShapeHandle z;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 4, &z));
      auto half = [&](int axis) {
        shape_inference::DimensionHandle d = c->Dim(z, axis);
        return c->ValueKnown(d) ? c->MakeDim(Half(c->Value(d))) : c->UnknownDim();
      };
      shape_inference::ShapeHandle y =
          c->MakeShape({c->Dim(z, 0), half(1), half(2), c->Dim(z, 3)});
      c->set_output(0, y);
      c->set_output(1, y);
      return absl::OkStatus();
    });

// dz (T, of shape z_shape) and dbias (float) from dy (Tout) and the forward's argmax.
REGISTER_OP("Cifar10BiasReluPoolGrad")
    .Input("dy: Tout")
    .Input("argmax: uint8")
    .Input("z_shape: int32")
    .Output("dz: T")
    .Output("dbias: float")
    .Attr("T: {float, bfloat16}")
    .Attr("Tout: {float, bfloat16}")
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      shape_inference::ShapeHandle z;
      TF_RETURN_IF_ERROR(c->MakeShapeFromShapeTensor(2, &z));
      TF_RETURN_IF_ERROR(c->WithRank(z, 4, &z));
      c->set_output(0, z);
      c->set_output(1, c->Vector(c->Dim(c->input(0), 3)));
      return absl::OkStatus();
    });

class Cifar10BiasReluPoolOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& z = ctx->input(0);
    const Tensor& bias = ctx->input(1);
    OP_REQUIRES(ctx, z.dims() == 4 && z.dim_size(3) >= 1 &&
                         FitsInt(z.dim_size(1), z.dim_size(2), z.dim_size(3)),
                errors::InvalidArgument("Cifar10BiasReluPool: z must be [batch, rows, "
                                        "columns, channels], at least one channel and "
                                        "under 2^31 values an image"));
    OP_REQUIRES(ctx, bias.dims() == 1 && bias.dim_size(0) == z.dim_size(3),
                errors::InvalidArgument("Cifar10BiasReluPool: one bias per channel"));
    const int64_t n = z.dim_size(0);
    const int h = z.dim_size(1), w = z.dim_size(2), c = z.dim_size(3);
    const TensorShape shape({n, Half(h), Half(w), c});
    Tensor* y = nullptr;
    Tensor* arg = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, shape, &y));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, shape, &arg));
    if (z.NumElements() == 0) return;
    const void* zp = z.data();
    const float* bp = bias.flat<float>().data();
    void* yp = y->data();
    uint8_t* ap = arg->flat<uint8_t>().data();
    const int in_bf16 = z.dtype() == DT_BFLOAT16, out_bf16 = y->dtype() == DT_BFLOAT16;
    ctx->device()->tensorflow_cpu_worker_threads()->workers->ParallelFor(
        n, int64_t(h) * w * c * 4, [=](int64_t b, int64_t e) {
          cifar10_pool_forward(zp, bp, yp, ap, in_bf16, out_bf16, b, e, h, w, c);
        });
  }
};

class Cifar10BiasReluPoolGradOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& dy = ctx->input(0);
    const Tensor& arg = ctx->input(1);
    TensorShape shape;
    OP_REQUIRES_OK(ctx, tensor::MakeShape(ctx->input(2), &shape));
    OP_REQUIRES(ctx, shape.dims() == 4 && dy.shape() == arg.shape() && dy.dims() == 4 &&
                         dy.dim_size(0) == shape.dim_size(0) &&
                         dy.dim_size(1) == Half(shape.dim_size(1)) &&
                         dy.dim_size(2) == Half(shape.dim_size(2)) &&
                         dy.dim_size(3) == shape.dim_size(3) &&
                         FitsInt(shape.dim_size(1), shape.dim_size(2), shape.dim_size(3)),
                errors::InvalidArgument("Cifar10BiasReluPoolGrad: dy, argmax and z_shape "
                                        "do not match"));
    const int64_t n = shape.dim_size(0);
    const int h = shape.dim_size(1), w = shape.dim_size(2), c = shape.dim_size(3);
    Tensor* dz = nullptr;
    Tensor* dbias = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, shape, &dz));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({c}), &dbias));
    float* db = dbias->flat<float>().data();
    std::fill(db, db + c, 0.f);
    if (shape.num_elements() == 0) return;
    std::vector<float> parts(n * c);  // each image's bias gradient, summed below
    const void* gp = dy.data();
    const uint8_t* ap = arg.flat<uint8_t>().data();
    void* dp = dz->data();
    float* pp = parts.data();
    const int in_bf16 = dz->dtype() == DT_BFLOAT16, out_bf16 = dy.dtype() == DT_BFLOAT16;
    ctx->device()->tensorflow_cpu_worker_threads()->workers->ParallelFor(
        n, int64_t(h) * w * c * 6, [=](int64_t b, int64_t e) {
          cifar10_pool_backward(gp, ap, dp, pp, in_bf16, out_bf16, b, e, h, w, c);
        });
    for (int64_t i = 0; i < n; ++i)
      for (int ch = 0; ch < c; ++ch) db[ch] += pp[i * c + ch];
  }
};

REGISTER_KERNEL_BUILDER(Name("Cifar10BiasReluPool").Device(DEVICE_CPU), Cifar10BiasReluPoolOp);
REGISTER_KERNEL_BUILDER(
    Name("Cifar10BiasReluPoolGrad").Device(DEVICE_CPU).HostMemory("z_shape"),
    Cifar10BiasReluPoolGradOp);

}  // namespace tensorflow
