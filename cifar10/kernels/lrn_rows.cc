// Local response normalisation over the channel axis, forward and backward, each in
// one pass over the tensor: the arithmetic only.  This file includes no TensorFlow
// header, so that it can be compiled for the machine's own vector unit
// (-march=native), which TensorFlow's headers do not always compile with.
//
// A row is one pixel's `depth` channels, held in vector registers (vectors.h) while
// it is worked on; the window's sums move copies of the row one lane at a time
// across them, so no step goes through memory.  With d_c = bias + alpha * sum of
// x_j^2 over the channels j within `radius` of c, and beta 0.75:
//   forward   y_c = x_c * d_c^-0.75, d^-0.75 from two vector rsqrt (powers());
//   backward  dx_j = g_j d_j^-0.75 - 2 alpha beta x_j sum_{c within radius of j} g_c x_c d_c^-1.75
// (the same formulas as cifar10.lrn.fast_lrn, whose tests this kernel shares).
//
// The arithmetic is float32.  Each of x, y (and dy, dx) may be stored as float32 or
// bfloat16 (uint16_t here): a bfloat16 value is read exactly and a result is rounded
// to nearest even, as TensorFlow's casts do, so the casts around the layer happen
// here, in the same pass, instead of in passes of their own.
#include <cstdint>

#include "bfloat16.h"
#include "vectors.h"

namespace {

using cifar10::as;
using cifar10::bf16;
using cifar10::fv;
using cifar10::iv;
using cifar10::kLanes;
using cifar10::load;
using cifar10::loadv;
using cifar10::rsqrt;
using cifar10::store;
using cifar10::storev;

constexpr int kMaxDepth = 1024;  // the op refuses deeper tensors
constexpr int kMaxVectors = kMaxDepth / kLanes;

// The lanes of the pair (a, b) one place towards the front: a[1..], b[0].
inline fv next_lane(fv a, fv b) {
#if defined(__AVX512F__)
  return as<fv>(_mm512_alignr_epi32(as<__m512i>(b), as<__m512i>(a), 1));
#elif defined(__AVX2__)
  const __m256i ai = as<__m256i>(a);
  return as<fv>(_mm256_alignr_epi8(_mm256_permute2x128_si256(ai, as<__m256i>(b), 0x21), ai, 4));
#else
  fv r;
  for (int l = 0; l + 1 < kLanes; ++l) r[l] = a[l + 1];
  r[kLanes - 1] = b[0];
  return r;
#endif
}

// The lanes of the pair (a, b) one place towards the back: a[last], b[0..last - 1].
inline fv previous_lane(fv a, fv b) {
#if defined(__AVX512F__)
  return as<fv>(_mm512_alignr_epi32(as<__m512i>(b), as<__m512i>(a), 15));
#elif defined(__AVX2__)
  const __m256i bi = as<__m256i>(b);
  return as<fv>(_mm256_alignr_epi8(bi, _mm256_permute2x128_si256(as<__m256i>(a), bi, 0x21), 12));
#else
  fv r;
  r[0] = a[kLanes - 1];
  for (int l = 1; l < kLanes; ++l) r[l] = b[l - 1];
  return r;
#endif
}

// A row of `depth` channels as vectors, the lanes past the depth zero.
template <typename T>
inline void load_row(const T* p, int depth, int nv, fv* v) {
  const int full = depth / kLanes;
  for (int i = 0; i < full; ++i) v[i] = loadv(p + i * kLanes);
  if (full < nv) {
    alignas(64) float tail[kLanes] = {0};
    for (int l = 0; l < depth - full * kLanes; ++l) tail[l] = load(p, full * kLanes + l);
    v[full] = loadv(tail);
  }
}

template <typename T>
inline void store_row(T* p, int depth, const fv* v) {
  const int full = depth / kLanes;
  for (int i = 0; i < full; ++i) storev(p + i * kLanes, v[i]);
  if (full * kLanes < depth) {
    alignas(64) float tail[kLanes];
    storev(tail, v[full]);
    for (int l = 0; l < depth - full * kLanes; ++l) store(p, full * kLanes + l, tail[l]);
  }
}

// s[c] = sum of v[c - radius .. c + radius] over a row of nv vectors (zero outside),
// by moving copies of the row one lane at a time each way.
template <int kNV>
inline void window_sums(const fv* __restrict v, int nv_, int radius, fv* __restrict s) {
  const int nv = kNV > 0 ? kNV : nv_;
  fv up[kNV > 0 ? kNV : kMaxVectors], down[kNV > 0 ? kNV : kMaxVectors];
  for (int i = 0; i < nv; ++i) s[i] = up[i] = down[i] = v[i];
  const fv zero = {};
  for (int k = 0; k < radius; ++k) {
    for (int i = 0; i < nv; ++i) up[i] = next_lane(up[i], i + 1 < nv ? up[i + 1] : zero);
    for (int i = nv - 1; i >= 0; --i) down[i] = previous_lane(i > 0 ? down[i - 1] : zero, down[i]);
    for (int i = 0; i < nv; ++i) s[i] += up[i] + down[i];
  }
}

// d^-3/4 and d^-1 as (d^-1/2)^2 * (d^-1/2)^-1/2 and (d^-1/2)^2: two vector rsqrt
// instead of two square roots and a division.
inline void powers(fv d, fv* scale, fv* inverse) {
  const fv r = rsqrt(d);
  *inverse = r * r;
  *scale = *inverse * rsqrt(r);
}

// The layer's settings; conv_bias (depth floats) or null: with it the input is a
// convolution's output z before its bias, and LRN normalises relu(z + conv_bias).
struct Params {
  int depth, radius;
  float bias, alpha;
  const float* conv_bias;
};

// conv_bias as vectors, loaded once for all the rows; false where there is none.
inline bool load_bias(const Params& p, int nv, fv* bias) {
  if (p.conv_bias) load_row(p.conv_bias, p.depth, nv, bias);
  return p.conv_bias != nullptr;
}

// The row as LRN's input: relu(z + bias) (NaN stays NaN, as tf.nn.relu), and where
// that let z's gradient through; without a bias the row itself, all lanes through.
inline void rectify(bool with_bias, const fv* bias, int nv, fv* xs, iv* through) {
  if (!with_bias) {
    for (int i = 0; i < nv; ++i) through[i] = iv{} - 1;
    return;
  }
  for (int i = 0; i < nv; ++i) {
    const fv v = xs[i] + bias[i];
    through[i] = v > 0.f;
    xs[i] = through[i] | (v != v) ? v : 0.f;
  }
}

template <int kNV, typename In, typename Out>
void forward(const In* __restrict x, Out* __restrict y, int64_t begin, int64_t end,
             const Params& p) {
  const int nv = kNV > 0 ? kNV : (p.depth + kLanes - 1) / kLanes;
  constexpr int kArray = kNV > 0 ? kNV : kMaxVectors;
  fv xs[kArray], sq[kArray], s[kArray], bias[kArray];
  iv through[kArray];
  const bool with_bias = load_bias(p, nv, bias);
  for (int64_t r = begin; r < end; ++r) {
    load_row(x + r * p.depth, p.depth, nv, xs);
    rectify(with_bias, bias, nv, xs, through);
    for (int i = 0; i < nv; ++i) sq[i] = xs[i] * xs[i];
    window_sums<kNV>(sq, nv, p.radius, s);
    for (int i = 0; i < nv; ++i) {
      fv scale, inverse;
      powers(p.bias + p.alpha * s[i], &scale, &inverse);
      s[i] = xs[i] * scale;
    }
    store_row(y + r * p.depth, p.depth, s);
  }
}

// x and dx are In, dy is Out (the forward pass's output type).  With conv_bias, dx is
// z's gradient and dconv_bias (depth floats) gets the sum of the rows' dx added.
template <int kNV, typename In, typename Out>
void backward(const In* __restrict x, const Out* __restrict g, In* __restrict dx,
              float* __restrict dconv_bias, int64_t begin, int64_t end, const Params& p) {
  const int nv = kNV > 0 ? kNV : (p.depth + kLanes - 1) / kLanes;
  constexpr int kArray = kNV > 0 ? kNV : kMaxVectors;
  const float k = 2.f * p.alpha * 0.75f;
  fv xs[kArray], gs[kArray], t[kArray], s[kArray], scale[kArray], sum[kArray] = {};
  fv bias[kArray];
  iv through[kArray];
  const fv one = fv{} + 1.f, zero = {};
  const bool with_bias = load_bias(p, nv, bias);
  for (int64_t r = begin; r < end; ++r) {
    load_row(x + r * p.depth, p.depth, nv, xs);
    load_row(g + r * p.depth, p.depth, nv, gs);
    rectify(with_bias, bias, nv, xs, through);
    for (int i = 0; i < nv; ++i) t[i] = xs[i] * xs[i];
    window_sums<kNV>(t, nv, p.radius, s);
    for (int i = 0; i < nv; ++i) {
      fv inverse;
      powers(p.bias + p.alpha * s[i], &scale[i], &inverse);
      // g x d^-7/4, multiplied in this order: d^-7/4 alone under- or overflows float32
      // for d beyond about 1e-22 .. 1e22, which x d^-3/4 and then d^-1 do not
      t[i] = gs[i] * xs[i] * scale[i] * inverse;
    }
    window_sums<kNV>(t, nv, p.radius, s);
    for (int i = 0; i < nv; ++i) {
      // times 1 or 0, as TensorFlow's ReLU gradient: a NaN gradient stays NaN
      t[i] = (gs[i] * scale[i] - k * xs[i] * s[i]) * (through[i] ? one : zero);
      sum[i] += t[i];
    }
    store_row(dx + r * p.depth, p.depth, t);
  }
  if (dconv_bias) {
    alignas(64) float row[kMaxDepth];
    store_row(row, p.depth, sum);
    for (int c = 0; c < p.depth; ++c) dconv_bias[c] += row[c];
  }
}

template <typename In, typename Out>
void forward_of(const void* x, void* y, int64_t begin, int64_t end, const Params& p) {
  const In* xp = static_cast<const In*>(x);
  Out* yp = static_cast<Out*>(y);
  if (p.depth == 64) forward<64 / kLanes>(xp, yp, begin, end, p);
  else forward<0>(xp, yp, begin, end, p);
}

template <typename In, typename Out>
void backward_of(const void* x, const void* g, void* dx, float* dconv_bias, int64_t begin,
                 int64_t end, const Params& p) {
  const In* xp = static_cast<const In*>(x);
  const Out* gp = static_cast<const Out*>(g);
  In* dp = static_cast<In*>(dx);
  if (p.depth == 64) backward<64 / kLanes>(xp, gp, dp, dconv_bias, begin, end, p);
  else backward<0>(xp, gp, dp, dconv_bias, begin, end, p);
}

}  // namespace

// Rows [begin, end) of x (rows x depth values, row-major); depth <= 1024, radius <= 32.
// in_bf16 / out_bf16: x (and dx) / y (and dy) hold bfloat16, else float32.
// conv_bias: null, or depth floats: x is then z, LRN's input relu(z + conv_bias), dx
// z's gradient, and the backward pass adds the sum of the rows' dx to dconv_bias.
extern "C" {
void cifar10_lrn_forward(const void* x, const float* conv_bias, void* y, int in_bf16,
                         int out_bf16, int64_t begin, int64_t end, int depth, int radius,
                         float bias, float alpha) {
  const Params p{depth, radius, bias, alpha, conv_bias};
  if (in_bf16 && out_bf16) forward_of<bf16, bf16>(x, y, begin, end, p);
  else if (in_bf16) forward_of<bf16, float>(x, y, begin, end, p);
  else if (out_bf16) forward_of<float, bf16>(x, y, begin, end, p);
  else forward_of<float, float>(x, y, begin, end, p);
}

void cifar10_lrn_backward(const void* x, const float* conv_bias, const void* g, void* dx,
                          float* dconv_bias, int in_bf16, int out_bf16, int64_t begin,
                          int64_t end, int depth, int radius, float bias, float alpha) {
  const Params p{depth, radius, bias, alpha, conv_bias};
  if (in_bf16 && out_bf16) backward_of<bf16, bf16>(x, g, dx, dconv_bias, begin, end, p);
  else if (in_bf16) backward_of<bf16, float>(x, g, dx, dconv_bias, begin, end, p);
  else if (out_bf16) backward_of<float, bf16>(x, g, dx, dconv_bias, begin, end, p);
  else backward_of<float, float>(x, g, dx, dconv_bias, begin, end, p);
}
}
