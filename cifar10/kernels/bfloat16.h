// float32 and bfloat16 (held as uint16_t) values read and written one at a time, for
// the kernels' arithmetic (no TensorFlow header).  A bfloat16 value is read exactly;
// a float32 result is rounded to nearest even, as TensorFlow's casts do.
#ifndef CIFAR10_KERNELS_BFLOAT16_H_
#define CIFAR10_KERNELS_BFLOAT16_H_

#include <cstdint>
#include <cstring>

namespace cifar10 {

typedef uint16_t bf16;

inline float load(const float* p, int i) { return p[i]; }
inline float load(const bf16* p, int i) {
  const uint32_t bits = static_cast<uint32_t>(p[i]) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
inline void store(float* p, int i, float v) { p[i] = v; }
inline void store(bf16* p, int i, float v) {  // round to nearest even; NaN stays NaN
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  const bool nan = (bits & 0x7fffffffu) > 0x7f800000u;
  const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  p[i] = nan ? static_cast<bf16>((bits >> 16) | 0x40u) : static_cast<bf16>(rounded);
}

}  // namespace cifar10

#endif  // CIFAR10_KERNELS_BFLOAT16_H_
