// 3x3 max pooling with stride 2 and SAME padding over NHWC tensors of relu(z + bias),
// z being the convolution before it: the arithmetic only (no TensorFlow header, so
// that it can be compiled with -march=native, as lrn_rows.cc).
//
// Forward, image by image: y = relu(m + bias), m the maximum of z over each window
// (NaNs passed over).  That is relu(z + bias) pooled, to the bit: adding a bias and
// rounding are monotonic, so the largest z gives the largest z + bias.  `arg` keeps,
// for each output, which of the window's 9 positions held the maximum (the first
// one on a tie, row by row), or kNone where the ReLU gave 0 and no gradient flows.
// (Where two values of z differ but give the same z + bias after rounding,
// TensorFlow's ReLU-then-pool sends the gradient to the first, this kernel to the
// larger z: both are gradients of the same function.)
//
// Backward, image by image: dz at each input position is the sum of the gradients
// of the (at most 4) outputs whose maximum it held, added in float32 and rounded
// once; the bias gradient is the sum of the gradients of the outputs the ReLU let
// through.  z, dz may be float32 or bfloat16 (uint16_t here), y and dy too; the
// arithmetic is float32 and a bfloat16 store rounds to nearest even.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>

#include "bfloat16.h"
#include "vectors.h"

namespace {

using cifar10::bf16;
using cifar10::load;
using cifar10::store;
using cifar10::kLanes;
using cifar10::fv;
using cifar10::iv;
using cifar10::uv;
using cifar10::as;
using cifar10::widen;
using cifar10::narrow;
using cifar10::loadv;
using cifar10::storev;

constexpr uint8_t kNone = 255;

// Rows (or columns) padded before the first window: SAME padding puts the odd one after.
inline int pad_before(int in, int out) { return std::max((out - 1) * 2 + 3 - in, 0) / 2; }

struct Shape {
  int h, w, c, oh, ow, pt, pl;
  Shape(int h_, int w_, int c_) : h(h_), w(w_), c(c_), oh((h_ + 1) / 2), ow((w_ + 1) / 2) {
    pt = pad_before(h, oh);
    pl = pad_before(w, ow);
  }
};

// The window's position (0..8, row by row) of input (r, q) for output (i, j).
inline int position(const Shape& s, int i, int j, int r, int q) {
  return (r - i * 2 + s.pt) * 3 + (q - j * 2 + s.pl);
}

template <typename In, typename Out>
void forward(const In* __restrict z, const float* __restrict bias, Out* __restrict y,
             uint8_t* __restrict arg, int64_t begin, int64_t end, const Shape& s) {
  const int c = s.c, vc = c - c % kLanes;
  for (int64_t n = begin; n < end; ++n) {
    const In* zn = z + n * s.h * s.w * c;
    for (int i = 0; i < s.oh; ++i) {
      const int r0 = std::max(i * 2 - s.pt, 0), r1 = std::min(i * 2 - s.pt + 3, s.h);
      for (int j = 0; j < s.ow; ++j) {
        const int q0 = std::max(j * 2 - s.pl, 0), q1 = std::min(j * 2 - s.pl + 3, s.w);
        const int64_t o = ((n * s.oh + i) * s.ow + j) * c;
        for (int c0 = 0; c0 < vc; c0 += kLanes) {
          // From -inf, so that a NaN is passed over wherever it is in the window.
          fv best = fv{} - std::numeric_limits<float>::infinity();
          iv at = iv{} + position(s, i, j, r0, q0);
          for (int r = r0; r < r1; ++r) {
            for (int q = q0; q < q1; ++q) {
              const fv v = loadv(zn + (r * s.w + q) * c + c0);
              const iv more = v > best;  // strictly: the first maximum stays
              best = more ? v : best;
              at = more ? position(s, i, j, r, q) : at;
            }
          }
          const fv v = best + loadv(bias + c0);
          const iv on = v > 0.f;
          storev(y + o + c0, on ? v : 0.f);
          at = on ? at : kNone;
          narrow(at, arg + o + c0);
        }
        for (int ch = vc; ch < c; ++ch) {
          float best = -std::numeric_limits<float>::infinity();
          int at = position(s, i, j, r0, q0);
          for (int r = r0; r < r1; ++r) {
            for (int q = q0; q < q1; ++q) {
              const float v = load(zn + (r * s.w + q) * c, ch);
              if (v > best) { best = v; at = position(s, i, j, r, q); }
            }
          }
          best += bias[ch];
          if (!(best > 0.f)) { best = 0.f; at = kNone; }
          store(y + o, ch, best);
          arg[o + ch] = static_cast<uint8_t>(at);
        }
      }
    }
  }
}

// dbias gets each image's bias gradient: dbias[n * c + ch].
template <typename In, typename Out>
void backward(const Out* __restrict g, const uint8_t* __restrict arg, In* __restrict dz,
              float* __restrict dbias, int64_t begin, int64_t end, const Shape& s) {
  const int c = s.c, vc = c - c % kLanes;
  for (int64_t n = begin; n < end; ++n) {
    In* dn = dz + n * s.h * s.w * c;
    for (int r = 0; r < s.h; ++r) {
      // The windows i whose rows 2i - pt .. 2i - pt + 2 hold r.
      const int i0 = std::max(r + s.pt - 1, 0) / 2, i1 = std::min((r + s.pt) / 2, s.oh - 1);
      for (int q = 0; q < s.w; ++q) {
        const int j0 = std::max(q + s.pl - 1, 0) / 2, j1 = std::min((q + s.pl) / 2, s.ow - 1);
        In* out = dn + (r * s.w + q) * c;
        for (int c0 = 0; c0 < vc; c0 += kLanes) {
          fv acc = {};
          for (int i = i0; i <= i1; ++i) {
            for (int j = j0; j <= j1; ++j) {
              const int64_t o = ((n * s.oh + i) * s.ow + j) * c + c0;
              const iv mine = widen(arg + o) == position(s, i, j, r, q);
              acc += as<fv>(as<iv>(loadv(g + o)) & mine);
            }
          }
          storev(out + c0, acc);
        }
        for (int ch = vc; ch < c; ++ch) {
          float acc = 0.f;
          for (int i = i0; i <= i1; ++i) {
            for (int j = j0; j <= j1; ++j) {
              const int64_t o = ((n * s.oh + i) * s.ow + j) * c;
              if (arg[o + ch] == position(s, i, j, r, q)) acc += load(g + o, ch);
            }
          }
          store(out, ch, acc);
        }
      }
    }
    float* db = dbias + n * c;
    for (int ch = 0; ch < c; ++ch) db[ch] = 0.f;
    const int64_t first = n * s.oh * s.ow;
    for (int64_t o = first; o < first + s.oh * s.ow; ++o) {
      const Out* go = g + o * c;
      const uint8_t* ao = arg + o * c;
      for (int ch = 0; ch < c; ++ch) db[ch] += ao[ch] != kNone ? load(go, ch) : 0.f;
    }
  }
}

template <typename In, typename Out>
void forward_of(const void* z, const float* bias, void* y, uint8_t* arg, int64_t begin,
                int64_t end, const Shape& s) {
  const In* zp = static_cast<const In*>(z);
  Out* yp = static_cast<Out*>(y);
  forward(zp, bias, yp, arg, begin, end, s);
}

template <typename In, typename Out>
void backward_of(const void* g, const uint8_t* arg, void* dz, float* dbias, int64_t begin,
                 int64_t end, const Shape& s) {
  const Out* gp = static_cast<const Out*>(g);
  In* dp = static_cast<In*>(dz);
  backward(gp, arg, dp, dbias, begin, end, s);
}

}  // namespace

// Images [begin, end) of z [n, h, w, c] -> y, arg [n, (h + 1) / 2, (w + 1) / 2, c];
// c <= 1024; bias: c floats; dbias: n * c floats.  in_bf16 / out_bf16: z
// (and dz) / y (and dy) hold bfloat16, else float32.
extern "C" {
void cifar10_pool_forward(const void* z, const float* bias, void* y, uint8_t* arg,
                          int in_bf16, int out_bf16, int64_t begin, int64_t end, int h,
                          int w, int c) {
  const Shape s(h, w, c);
  if (in_bf16 && out_bf16) forward_of<bf16, bf16>(z, bias, y, arg, begin, end, s);
  else if (in_bf16) forward_of<bf16, float>(z, bias, y, arg, begin, end, s);
  else if (out_bf16) forward_of<float, bf16>(z, bias, y, arg, begin, end, s);
  else forward_of<float, float>(z, bias, y, arg, begin, end, s);
}

void cifar10_pool_backward(const void* g, const uint8_t* arg, void* dz, float* dbias,
                           int in_bf16, int out_bf16, int64_t begin, int64_t end, int h,
                           int w, int c) {
  const Shape s(h, w, c);
  if (in_bf16 && out_bf16) backward_of<bf16, bf16>(g, arg, dz, dbias, begin, end, s);
  else if (in_bf16) backward_of<bf16, float>(g, arg, dz, dbias, begin, end, s);
  else if (out_bf16) backward_of<float, bf16>(g, arg, dz, dbias, begin, end, s);
  else backward_of<float, float>(g, arg, dz, dbias, begin, end, s);
}
}
