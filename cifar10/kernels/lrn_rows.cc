// Local response normalisation over the channel axis, forward and backward, each in
// one pass over the tensor: the arithmetic only.  This file includes no TensorFlow
// header, so that it can be compiled for the machine's own vector unit
// (-march=native), which TensorFlow's headers do not always compile with.
//
// A row is one pixel's `depth` channels.  With d_c = bias + alpha * sum of x_j^2 over
// the channels j within `radius` of c, and beta 0.75:
//   forward   y_c = x_c * d_c^-0.75, d^-0.75 computed as 1 / (sqrt(d) * sqrt(sqrt(d)));
//   backward  dx_j = g_j d_j^-0.75 - 2 alpha beta x_j sum_{c within radius of j} g_c x_c d_c^-1.75
// (the same formulas as cifar10.model.fast_lrn, whose tests this kernel shares).
//
// The arithmetic is float32.  Each of x, y (and dy, dx) may be stored as float32 or
// bfloat16 (uint16_t here): a bfloat16 value is read exactly and a result is rounded
// to nearest even, as TensorFlow's casts do, so the casts around the layer happen
// here, in the same pass, instead of in passes of their own.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "bfloat16.h"

namespace {

constexpr int kMaxDepth = 1024;  // the op refuses deeper tensors
constexpr int kMaxRadius = 32;

using cifar10::bf16;
using cifar10::load;
using cifar10::store;

// out[c] = sum of v[c - radius .. c + radius] (v has radius zeros each side).
template <int kDepth>
inline void window_sums(const float* __restrict v, int depth, int radius,
                        float* __restrict out) {
  const int n = kDepth > 0 ? kDepth : depth;
  for (int c = 0; c < n; ++c) out[c] = v[c];
  for (int k = 1; k <= 2 * radius; ++k)
    for (int c = 0; c < n; ++c) out[c] += v[c + k];
}

template <int kDepth, typename In, typename Out>
void forward(const In* __restrict x, Out* __restrict y, int64_t begin, int64_t end,
             int depth, int radius, float bias, float alpha) {
  const int n = kDepth > 0 ? kDepth : depth;
  alignas(64) float xs[kMaxDepth];
  alignas(64) float sq[kMaxDepth + 2 * kMaxRadius] = {0};
  alignas(64) float s[kMaxDepth];
  for (int64_t r = begin; r < end; ++r) {
    const In* xr = x + r * n;
    Out* yr = y + r * n;
    for (int c = 0; c < n; ++c) xs[c] = load(xr, c);
    for (int c = 0; c < n; ++c) sq[radius + c] = xs[c] * xs[c];
    window_sums<kDepth>(sq, n, radius, s);
    for (int c = 0; c < n; ++c) {
      const float q = std::sqrt(bias + alpha * s[c]);
      store(yr, c, xs[c] / (q * std::sqrt(q)));
    }
  }
}

// x and dx are In, dy is Out (the forward pass's output type).
template <int kDepth, typename In, typename Out>
void backward(const In* __restrict x, const Out* __restrict g, In* __restrict dx,
              int64_t begin, int64_t end, int depth, int radius, float bias, float alpha) {
  const int n = kDepth > 0 ? kDepth : depth;
  const float k = 2.f * alpha * 0.75f;
  alignas(64) float xs[kMaxDepth];
  alignas(64) float gs[kMaxDepth];
  alignas(64) float sq[kMaxDepth + 2 * kMaxRadius] = {0};
  alignas(64) float t[kMaxDepth + 2 * kMaxRadius] = {0};
  alignas(64) float s[kMaxDepth];
  alignas(64) float scale[kMaxDepth];
  for (int64_t r = begin; r < end; ++r) {
    const In* xr = x + r * n;
    const Out* gr = g + r * n;
    In* out = dx + r * n;
    for (int c = 0; c < n; ++c) xs[c] = load(xr, c);
    for (int c = 0; c < n; ++c) gs[c] = load(gr, c);
    for (int c = 0; c < n; ++c) sq[radius + c] = xs[c] * xs[c];
    window_sums<kDepth>(sq, n, radius, s);
    for (int c = 0; c < n; ++c) {
      const float d = bias + alpha * s[c];
      const float q = std::sqrt(d);
      const float sc = 1.f / (q * std::sqrt(q));
      scale[c] = sc;
      t[radius + c] = gs[c] * xs[c] * sc / d;
    }
    window_sums<kDepth>(t, n, radius, s);
    for (int c = 0; c < n; ++c) store(out, c, gs[c] * scale[c] - k * xs[c] * s[c]);
  }
}

template <typename In, typename Out>
void forward_of(const void* x, void* y, int64_t begin, int64_t end, int depth, int radius,
                float bias, float alpha) {
  const In* xp = static_cast<const In*>(x);
  Out* yp = static_cast<Out*>(y);
  if (depth == 64) forward<64>(xp, yp, begin, end, depth, radius, bias, alpha);
  else forward<0>(xp, yp, begin, end, depth, radius, bias, alpha);
}

template <typename In, typename Out>
void backward_of(const void* x, const void* g, void* dx, int64_t begin, int64_t end,
                 int depth, int radius, float bias, float alpha) {
  const In* xp = static_cast<const In*>(x);
  const Out* gp = static_cast<const Out*>(g);
  In* dp = static_cast<In*>(dx);
  if (depth == 64) backward<64>(xp, gp, dp, begin, end, depth, radius, bias, alpha);
  else backward<0>(xp, gp, dp, begin, end, depth, radius, bias, alpha);
}

}  // namespace

// Rows [begin, end) of x (rows x depth values, row-major); depth <= 1024, radius <= 32.
// in_bf16 / out_bf16: x (and dx) / y (and dy) hold bfloat16, else float32.
extern "C" {
void cifar10_lrn_forward(const void* x, void* y, int in_bf16, int out_bf16, int64_t begin,
                         int64_t end, int depth, int radius, float bias, float alpha) {
  if (in_bf16 && out_bf16) forward_of<bf16, bf16>(x, y, begin, end, depth, radius, bias, alpha);
  else if (in_bf16) forward_of<bf16, float>(x, y, begin, end, depth, radius, bias, alpha);
  else if (out_bf16) forward_of<float, bf16>(x, y, begin, end, depth, radius, bias, alpha);
  else forward_of<float, float>(x, y, begin, end, depth, radius, bias, alpha);
}

void cifar10_lrn_backward(const void* x, const void* g, void* dx, int in_bf16, int out_bf16,
                          int64_t begin, int64_t end, int depth, int radius, float bias,
                          float alpha) {
  if (in_bf16 && out_bf16) backward_of<bf16, bf16>(x, g, dx, begin, end, depth, radius, bias, alpha);
  else if (in_bf16) backward_of<bf16, float>(x, g, dx, begin, end, depth, radius, bias, alpha);
  else if (out_bf16) backward_of<float, bf16>(x, g, dx, begin, end, depth, radius, bias, alpha);
  else backward_of<float, float>(x, g, dx, begin, end, depth, radius, bias, alpha);
}
}
