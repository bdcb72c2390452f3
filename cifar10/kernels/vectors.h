// Vectors of float32 lanes as wide as the machine's registers (AVX-512: 16 floats,
// AVX: 8, else 4), written with GCC's and Clang's vector extensions, for the kernels'
// arithmetic (no TensorFlow header).  Conversions between lane widths and the
// bfloat16 loads and stores use the machine's instructions: the compilers' own
// conversions take one lane at a time.
#ifndef CIFAR10_KERNELS_VECTORS_H_
#define CIFAR10_KERNELS_VECTORS_H_

#include <cstdint>
#include <cstring>

#include "bfloat16.h"
#if defined(__AVX__)
#include <immintrin.h>
#endif

namespace cifar10 {

#if defined(__AVX512F__)
constexpr int kLanes = 16;
#elif defined(__AVX__)
constexpr int kLanes = 8;
#else
constexpr int kLanes = 4;
#endif
typedef float fv __attribute__((vector_size(4 * kLanes)));
typedef int32_t iv __attribute__((vector_size(4 * kLanes)));
typedef uint32_t uv __attribute__((vector_size(4 * kLanes)));

template <typename T, typename V>
inline T as(V v) {
  static_assert(sizeof(T) == sizeof(V), "same width");
  T t;
  std::memcpy(&t, &v, sizeof t);
  return t;
}

// kLanes bytes -> int32 lanes.
inline iv widen(const uint8_t* p) {
#if defined(__AVX512F__)
  return as<iv>(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
#elif defined(__AVX2__)
  return as<iv>(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
#else
  iv v;
  for (int l = 0; l < kLanes; ++l) v[l] = p[l];
  return v;
#endif
}

// int32 lanes of 0..255 -> kLanes bytes.
inline void narrow(iv v, uint8_t* p) {
#if defined(__AVX512F__)
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtepi32_epi8(as<__m512i>(v)));
#elif defined(__AVX2__)
  const __m256i bytes = _mm256_shuffle_epi8(  // byte 0 of each lane to the front of its half
      as<__m256i>(v), _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                       -1, -1, 0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1,
                                       -1, -1, -1, -1));
  const __m256i both = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 0, 0, 0, 0, 0, 0));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(both));
#else
  for (int l = 0; l < kLanes; ++l) p[l] = static_cast<uint8_t>(v[l]);
#endif
}

inline fv loadv(const float* p) { fv v; std::memcpy(&v, p, sizeof v); return v; }
inline fv loadv(const bf16* p) {
#if defined(__AVX512F__)
  return as<fv>(_mm512_slli_epi32(
      _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
#elif defined(__AVX2__)
  return as<fv>(_mm256_slli_epi32(
      _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
#else
  uv bits;
  for (int l = 0; l < kLanes; ++l) bits[l] = static_cast<uint32_t>(p[l]) << 16;
  return as<fv>(bits);
#endif
}
inline void storev(float* p, fv v) { std::memcpy(p, &v, sizeof v); }
inline void storev(bf16* p, fv v) {  // as store(): nearest even, NaN stays NaN
  const uv bits = as<uv>(v);
  const iv nan = (bits & 0x7fffffffu) > 0x7f800000u;
  const uv rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  const uv out = nan ? ((bits >> 16) | 0x40u) : rounded;
#if defined(__AVX512F__)
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(as<__m512i>(out)));
#elif defined(__AVX2__)
  const __m256i packed = _mm256_packus_epi32(as<__m256i>(out), _mm256_setzero_si256());
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                   _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0x08)));
#else
  for (int l = 0; l < kLanes; ++l) p[l] = static_cast<bf16>(out[l]);
#endif
}

// 1 / sqrt(d), lane by lane, to within a few units in the last place: the machine's
// estimate (AVX-512: 14 bits, AVX: 12 bits) and one Newton step, all multiplications
// and additions, where a square root and a division each take many cycles.
inline fv rsqrt(fv d) {
#if defined(__AVX512F__)
  const fv r = as<fv>(_mm512_rsqrt14_ps(as<__m512>(d)));
#elif defined(__AVX__)
  const fv r = as<fv>(_mm256_rsqrt_ps(as<__m256>(d)));
#else
  fv r;
  for (int l = 0; l < kLanes; ++l) r[l] = 1.f / __builtin_sqrtf(d[l]);
#endif
  return r * (1.5f - 0.5f * d * r * r);
}

}  // namespace cifar10

#endif  // CIFAR10_KERNELS_VECTORS_H_
