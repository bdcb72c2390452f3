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
#include <cmath>
#include <cstdint>

namespace {

constexpr int kMaxDepth = 1024;  // the op refuses deeper tensors
constexpr int kMaxRadius = 32;

// out[c] = sum of v[c - radius .. c + radius] (v has radius zeros each side).
template <int kDepth>
inline void window_sums(const float* __restrict v, int depth, int radius,
                        float* __restrict out) {
  const int n = kDepth > 0 ? kDepth : depth;
  for (int c = 0; c < n; ++c) out[c] = v[c];
  for (int k = 1; k <= 2 * radius; ++k)
    for (int c = 0; c < n; ++c) out[c] += v[c + k];
}

template <int kDepth>
void forward(const float* __restrict x, float* __restrict y, int64_t begin, int64_t end,
             int depth, int radius, float bias, float alpha) {
  const int n = kDepth > 0 ? kDepth : depth;
  alignas(64) float sq[kMaxDepth + 2 * kMaxRadius] = {0};
  alignas(64) float s[kMaxDepth];
  for (int64_t r = begin; r < end; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    for (int c = 0; c < n; ++c) sq[radius + c] = xr[c] * xr[c];
    window_sums<kDepth>(sq, n, radius, s);
    for (int c = 0; c < n; ++c) {
      const float q = std::sqrt(bias + alpha * s[c]);
      yr[c] = xr[c] / (q * std::sqrt(q));
    }
  }
}

template <int kDepth>
void backward(const float* __restrict x, const float* __restrict g, float* __restrict dx,
              int64_t begin, int64_t end, int depth, int radius, float bias, float alpha) {
  const int n = kDepth > 0 ? kDepth : depth;
  const float k = 2.f * alpha * 0.75f;
  alignas(64) float sq[kMaxDepth + 2 * kMaxRadius] = {0};
  alignas(64) float t[kMaxDepth + 2 * kMaxRadius] = {0};
  alignas(64) float s[kMaxDepth];
  alignas(64) float scale[kMaxDepth];
  for (int64_t r = begin; r < end; ++r) {
    const float* xr = x + r * n;
    const float* gr = g + r * n;
    float* out = dx + r * n;
    for (int c = 0; c < n; ++c) sq[radius + c] = xr[c] * xr[c];
    window_sums<kDepth>(sq, n, radius, s);
    for (int c = 0; c < n; ++c) {
      const float d = bias + alpha * s[c];
      const float q = std::sqrt(d);
      const float sc = 1.f / (q * std::sqrt(q));
      scale[c] = sc;
      t[radius + c] = gr[c] * xr[c] * sc / d;
    }
    window_sums<kDepth>(t, n, radius, s);
    for (int c = 0; c < n; ++c) out[c] = gr[c] * scale[c] - k * xr[c] * s[c];
  }
}

}  // namespace

// Rows [begin, end) of x (rows x depth floats, row-major); depth <= 1024, radius <= 32.
extern "C" {
void cifar10_lrn_forward(const float* x, float* y, int64_t begin, int64_t end, int depth,
                         int radius, float bias, float alpha) {
  if (depth == 64) forward<64>(x, y, begin, end, depth, radius, bias, alpha);
  else forward<0>(x, y, begin, end, depth, radius, bias, alpha);
}
void cifar10_lrn_backward(const float* x, const float* g, float* dx, int64_t begin,
                          int64_t end, int depth, int radius, float bias, float alpha) {
  if (depth == 64) backward<64>(x, g, dx, begin, end, depth, radius, bias, alpha);
  else backward<0>(x, g, dx, begin, end, depth, radius, bias, alpha);
}
}
