// scaled_masked_softmax.cu -- aclnnScaledMaskedSoftmax (forward) and aclnnScaledMaskedSoftmaxBackward.
//
//   forward : y   = softmax(scale * x) over the last axis (length S2), masked positions excluded
//                   (y = 0 there); a fully masked row gives zeros.
//   backward: out = (y * (g - dot)) * scale with dot = sum_j g*y over the WHOLE row (masked positions
//                   included), then exactly 0 wherever masked.
//
// Rows are the B*N*S1 leading positions, contiguous, S2 elements each. The mask is bytes (bool, true =
// masked out), (Bm, Nm, S1, S2) broadcast over dims 0 and 1: the host passes the mask row strides
// `mrow_b` (= Nm*S1, or 0 when Bm == 1) and `mrow_n` (= S1, or 0 when Nm == 1). mask == nullptr
// means no mask. `causal` != 0 additionally masks j > i, i = row index within S1 (fixTriuMask).
//
// Row mappings (the host picks by S2, see ops/scaled_masked_softmax/launch.py):
//   smsm_{fwd,bwd}_rows<T, VW, CHUNKS, BLOCK=false>: a warp per row, several rows per block; the
//       row lives in registers (CHUNKS*VW elements per lane).
//   smsm_{fwd,bwd}_rows<T, VW, CHUNKS, BLOCK=true> : a block per row, row in registers
//       (CHUNKS*VW elements per thread), block reductions through 32 floats of shared memory.
//   smsm_{fwd,bwd}_long<T, VW, STAGE>              : a block per row, any length: pass 1 reduces
//       (online max/sum, resp. the g.y dot), pass 2 writes; STAGE=true keeps the row in dynamic
//       shared memory between the passes (rows up to 48 KiB of staged data), STAGE=false re-reads
//       it from global memory (L2) for rows beyond that.
// VW is the elements per access: 16 / sizeof(T) (16-byte vectors, needs S2 % VW == 0 and 16-byte
// aligned pointers) or 1. Element chunk c of a row covers [c*VW, c*VW + VW); thread `lane` of a group
// of GS threads holds chunks lane, lane + GS, ... (coalesced). Each thread accumulates its own
// elements in index order, then a fixed butterfly reduction: bit-reproducible results.
#include "common.cuh"

namespace aclg {
namespace smsm {

// VW mask bytes of chunk c as one integer (byte v = element c*VW + v).
template <int VW> __device__ __forceinline__ unsigned long long load_mask_bits(const unsigned char* m, i64 c);
template <> __device__ __forceinline__ unsigned long long load_mask_bits<1>(const unsigned char* m, i64 c) {
  return m[c];
}
template <> __device__ __forceinline__ unsigned long long load_mask_bits<2>(const unsigned char* m, i64 c) {
  return reinterpret_cast<const unsigned short*>(m)[c];
}
template <> __device__ __forceinline__ unsigned long long load_mask_bits<4>(const unsigned char* m, i64 c) {
  return reinterpret_cast<const unsigned int*>(m)[c];
}
template <> __device__ __forceinline__ unsigned long long load_mask_bits<8>(const unsigned char* m, i64 c) {
  return reinterpret_cast<const unsigned long long*>(m)[c];
}

// VW storage elements of chunk c, converted to fp32.
template <class T, int VW> __device__ __forceinline__ void load_chunk(const T* p, i64 c, float* dst) {
  if constexpr (VW == 1) {
    dst[0] = to_math(p[c]);
  } else {
    static_assert(VW == Vec16<T>::N, "VW is 1 or a 16-byte vector");
    const Vec16<T> v = load16(p, c);
#pragma unroll
    for (int e = 0; e < VW; ++e) dst[e] = to_math(v.v[e]);
  }
}
// Like load_chunk, and also copies the chunk (storage type) to `stage` (shared memory).
template <class T, int VW> __device__ __forceinline__ void load_stage_chunk(const T* p, T* stage, i64 c, float* dst) {
  if constexpr (VW == 1) {
    const T a = p[c];
    stage[c] = a;
    dst[0] = to_math(a);
  } else {
    const Vec16<T> v = load16(p, c);
    store16(stage, c, v);
#pragma unroll
    for (int e = 0; e < VW; ++e) dst[e] = to_math(v.v[e]);
  }
}
template <class T, int VW> __device__ __forceinline__ void store_chunk(T* p, i64 c, const float* src) {
  if constexpr (VW == 1) {
    p[c] = from_math<T>(src[0]);
  } else {
    Vec16<T> v;
#pragma unroll
    for (int e = 0; e < VW; ++e) v.v[e] = from_math<T>(src[e]);
    store16(p, c, v);
  }
}

// Where a row's mask bytes start (nullptr: no mask).
__device__ __forceinline__ const unsigned char* mask_row(const unsigned char* mask, i64 row, i64 S1, i64 S2, i64 N,
                                                        i64 mrow_b, i64 mrow_n) {
  if (mask == nullptr) return nullptr;
  const i64 i = row % S1, bn = row / S1;
  const i64 n = bn % N, b = bn / N;
  return mask + (b * mrow_b + n * mrow_n + i) * S2;
}

// Is element j (chunk c, lane-in-chunk e) masked?
__device__ __forceinline__ bool is_masked(unsigned long long bits, int e, i64 j, i64 i, int causal) {
  return ((bits >> (8 * e)) & 0xffull) != 0ull || (causal && j > i);
}

__device__ __forceinline__ float fmax_(float a, float b) { return a > b ? a : b; }

// Online (max, sum of exp) reduction over a warp / a block; maxsum_merge is symmetric, so every
// lane gets the same bits in a fixed order. scratch: 2 * 32 floats of shared memory.
__device__ __forceinline__ MaxSum<float> warp_maxsum(MaxSum<float> s) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o >>= 1) {
    MaxSum<float> t;
    t.max = __shfl_xor_sync(kFullMask, s.max, o);
    t.sum = __shfl_xor_sync(kFullMask, s.sum, o);
    s = maxsum_merge(s, t);
  }
  return s;
}
__device__ __forceinline__ MaxSum<float> block_maxsum(MaxSum<float> s, float* scratch) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  s = warp_maxsum(s);
  if (lane == 0) {
    scratch[warp] = s.max;
    scratch[kWarp + warp] = s.sum;
  }
  __syncthreads();
  MaxSum<float> t;
  t.max = lane < warps ? scratch[lane] : neg_inf<float>();
  t.sum = lane < warps ? scratch[kWarp + lane] : 0.f;
  t = warp_maxsum(t);
  __syncthreads();
  return t;
}

template <bool BLOCK> __device__ __forceinline__ float group_sum(float v, float* scratch) {
  if constexpr (BLOCK) return block_sum(v, scratch);
  else return warp_sum(v);
}
template <bool BLOCK> __device__ __forceinline__ float group_max(float v, float* scratch) {
  if constexpr (BLOCK) return block_max(v, scratch);
  else return warp_max(v);
}

}  // namespace smsm
}  // namespace aclg

using aclg::i64;
using aclg::kWarp;
using aclg::MaxSum;
using aclg::neg_inf;
namespace smsm = aclg::smsm;

// ------------------------------------------------------------------------------ register variants
// BLOCK=false: blockDim.x/32 warps, a warp per row; BLOCK=true: a block per row. The host guarantees
// S2 <= GS * CHUNKS * VW (GS = 32 or blockDim.x) and S2 % VW == 0.
template <class T, int VW, int CHUNKS, bool BLOCK>
__global__ void __launch_bounds__(512) smsm_bwd_rows(const T* __restrict__ g, const T* __restrict__ y,
                                                     const unsigned char* __restrict__ mask, T* __restrict__ out,
                                                     i64 rows, i64 S1, i64 S2, i64 N, i64 mrow_b, i64 mrow_n,
                                                     float scale, int causal) {
  __shared__ float scratch[kWarp];
  const int GS = BLOCK ? (int)blockDim.x : kWarp;
  const int lane = BLOCK ? (int)threadIdx.x : (int)(threadIdx.x % kWarp);
  const i64 groups = BLOCK ? (i64)gridDim.x : (i64)gridDim.x * (blockDim.x / kWarp);
  const i64 first = BLOCK ? (i64)blockIdx.x : (i64)blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  const i64 nchunks = S2 / VW;
  for (i64 row = first; row < rows; row += groups) {
    const T* gr = g + row * S2;
    const T* yr = y + row * S2;
    float gv[CHUNKS * VW], yv[CHUNKS * VW];
#pragma unroll
    for (int k = 0; k < CHUNKS; ++k) {
      const i64 c = (i64)k * GS + lane;
      if (c < nchunks) {
        smsm::load_chunk<T, VW>(gr, c, gv + k * VW);
        smsm::load_chunk<T, VW>(yr, c, yv + k * VW);
      } else {
#pragma unroll
        for (int e = 0; e < VW; ++e) gv[k * VW + e] = yv[k * VW + e] = 0.f;
      }
    }
    float dot = 0.f;
#pragma unroll
    for (int e = 0; e < CHUNKS * VW; ++e) dot += gv[e] * yv[e];
    dot = smsm::group_sum<BLOCK>(dot, scratch);
    const unsigned char* mr = smsm::mask_row(mask, row, S1, S2, N, mrow_b, mrow_n);
    const i64 i = row % S1;
    T* orow = out + row * S2;
#pragma unroll
    for (int k = 0; k < CHUNKS; ++k) {
      const i64 c = (i64)k * GS + lane;
      if (c < nchunks) {
        const unsigned long long bits = mr ? smsm::load_mask_bits<VW>(mr, c) : 0ull;
        float o[VW];
#pragma unroll
        for (int e = 0; e < VW; ++e) {
          const float v = (yv[k * VW + e] * (gv[k * VW + e] - dot)) * scale;
          o[e] = smsm::is_masked(bits, e, c * VW + e, i, causal) ? 0.f : v;
        }
        smsm::store_chunk<T, VW>(orow, c, o);
      }
    }
  }
}

template <class T, int VW, int CHUNKS, bool BLOCK>
__global__ void __launch_bounds__(512) smsm_fwd_rows(const T* __restrict__ x, const unsigned char* __restrict__ mask,
                                                     T* __restrict__ y, i64 rows, i64 S1, i64 S2, i64 N,
                                                     i64 mrow_b, i64 mrow_n, float scale, int causal) {
  __shared__ float scratch[kWarp];
  const int GS = BLOCK ? (int)blockDim.x : kWarp;
  const int lane = BLOCK ? (int)threadIdx.x : (int)(threadIdx.x % kWarp);
  const i64 groups = BLOCK ? (i64)gridDim.x : (i64)gridDim.x * (blockDim.x / kWarp);
  const i64 first = BLOCK ? (i64)blockIdx.x : (i64)blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  const i64 nchunks = S2 / VW;
  const float ninf = neg_inf<float>();
  for (i64 row = first; row < rows; row += groups) {
    const T* xr = x + row * S2;
    const unsigned char* mr = smsm::mask_row(mask, row, S1, S2, N, mrow_b, mrow_n);
    const i64 i = row % S1;
    float v[CHUNKS * VW];
    float mx = ninf;
#pragma unroll
    for (int k = 0; k < CHUNKS; ++k) {
      const i64 c = (i64)k * GS + lane;
      if (c < nchunks) {
        smsm::load_chunk<T, VW>(xr, c, v + k * VW);
        const unsigned long long bits = mr ? smsm::load_mask_bits<VW>(mr, c) : 0ull;
#pragma unroll
        for (int e = 0; e < VW; ++e) {
          const float s = v[k * VW + e] * scale;
          v[k * VW + e] = smsm::is_masked(bits, e, c * VW + e, i, causal) ? ninf : s;
          mx = smsm::fmax_(mx, v[k * VW + e]);
        }
      } else {
#pragma unroll
        for (int e = 0; e < VW; ++e) v[k * VW + e] = ninf;
      }
    }
    mx = smsm::group_max<BLOCK>(mx, scratch);
    if (mx == ninf) mx = 0.f;  // fully masked row: every exp below is 0
    float sum = 0.f;
#pragma unroll
    for (int e = 0; e < CHUNKS * VW; ++e) {
      v[e] = exp(v[e] - mx);
      sum += v[e];
    }
    sum = smsm::group_sum<BLOCK>(sum, scratch);
    if (sum == 0.f) sum = 1.f;  // fully masked row -> zeros
    T* yrow = y + row * S2;
#pragma unroll
    for (int k = 0; k < CHUNKS; ++k) {
      const i64 c = (i64)k * GS + lane;
      if (c < nchunks) {
        float o[VW];
#pragma unroll
        for (int e = 0; e < VW; ++e) o[e] = v[k * VW + e] / sum;
        smsm::store_chunk<T, VW>(yrow, c, o);
      }
    }
  }
}

// ------------------------------------------------------------------------------ two-pass variants
// A block per row, any S2 (S2 % VW == 0). STAGE=false: pass 2 re-reads the row from global memory
// (mostly L2 hits). STAGE=true: pass 1 also keeps the row (storage type) in dynamic shared memory
// (the host sizes it: S2 elements per staged tensor, <= 48 KiB) and pass 2 reads it from there, so
// global memory is read once. Each thread reads back only the chunks it wrote itself.
template <class T, int VW, bool STAGE>
__global__ void __launch_bounds__(512) smsm_bwd_long(const T* __restrict__ g, const T* __restrict__ y,
                                                     const unsigned char* __restrict__ mask, T* __restrict__ out,
                                                     i64 rows, i64 S1, i64 S2, i64 N, i64 mrow_b, i64 mrow_n,
                                                     float scale, int causal) {
  __shared__ float scratch[kWarp];
  extern __shared__ __align__(16) unsigned char smsm_stage[];
  T* sg = reinterpret_cast<T*>(smsm_stage);
  T* sy = sg + S2;  // S2 % VW == 0 and 16-byte vectors: still 16-byte aligned
  const i64 nchunks = S2 / VW;
  for (i64 row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* gr = g + row * S2;
    const T* yr = y + row * S2;
    float dot = 0.f;
    for (i64 c = threadIdx.x; c < nchunks; c += blockDim.x) {
      float gv[VW], yv[VW];
      if constexpr (STAGE) {
        smsm::load_stage_chunk<T, VW>(gr, sg, c, gv);
        smsm::load_stage_chunk<T, VW>(yr, sy, c, yv);
      } else {
        smsm::load_chunk<T, VW>(gr, c, gv);
        smsm::load_chunk<T, VW>(yr, c, yv);
      }
#pragma unroll
      for (int e = 0; e < VW; ++e) dot += gv[e] * yv[e];
    }
    dot = aclg::block_sum(dot, scratch);
    const unsigned char* mr = smsm::mask_row(mask, row, S1, S2, N, mrow_b, mrow_n);
    const i64 i = row % S1;
    T* orow = out + row * S2;
    for (i64 c = threadIdx.x; c < nchunks; c += blockDim.x) {
      float gv[VW], yv[VW], o[VW];
      smsm::load_chunk<T, VW>(STAGE ? sg : gr, c, gv);
      smsm::load_chunk<T, VW>(STAGE ? sy : yr, c, yv);
      const unsigned long long bits = mr ? smsm::load_mask_bits<VW>(mr, c) : 0ull;
#pragma unroll
      for (int e = 0; e < VW; ++e) {
        const float v = (yv[e] * (gv[e] - dot)) * scale;
        o[e] = smsm::is_masked(bits, e, c * VW + e, i, causal) ? 0.f : v;
      }
      smsm::store_chunk<T, VW>(orow, c, o);
    }
    if constexpr (STAGE) __syncthreads();  // not needed (own chunks only); keeps rows cleanly apart
  }
}

template <class T, int VW, bool STAGE>
__global__ void __launch_bounds__(512) smsm_fwd_long(const T* __restrict__ x, const unsigned char* __restrict__ mask,
                                                     T* __restrict__ y, i64 rows, i64 S1, i64 S2, i64 N,
                                                     i64 mrow_b, i64 mrow_n, float scale, int causal) {
  __shared__ float scratch[2 * kWarp];
  extern __shared__ __align__(16) unsigned char smsm_stage[];
  T* sx = reinterpret_cast<T*>(smsm_stage);
  const i64 nchunks = S2 / VW;
  const float ninf = neg_inf<float>();
  for (i64 row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * S2;
    const unsigned char* mr = smsm::mask_row(mask, row, S1, S2, N, mrow_b, mrow_n);
    const i64 i = row % S1;
    MaxSum<float> ms{ninf, 0.f};
    for (i64 c = threadIdx.x; c < nchunks; c += blockDim.x) {
      float v[VW];
      if constexpr (STAGE) {
        smsm::load_stage_chunk<T, VW>(xr, sx, c, v);
      } else {
        smsm::load_chunk<T, VW>(xr, c, v);
      }
      const unsigned long long bits = mr ? smsm::load_mask_bits<VW>(mr, c) : 0ull;
#pragma unroll
      for (int e = 0; e < VW; ++e)
        if (!smsm::is_masked(bits, e, c * VW + e, i, causal)) ms = aclg::maxsum_add(ms, v[e] * scale);
    }
    ms = smsm::block_maxsum(ms, scratch);
    const float mx = ms.max == ninf ? 0.f : ms.max;
    // fully masked row -> zeros; a NaN in the row (kept by maxsum_merge) or a +inf (mx - mx is NaN)
    // makes the whole row NaN, masked positions included, as the short-row kernels and PyTorch
    const float sum = (ms.sum == 0.f ? 1.f : ms.sum) + (mx - mx);
    T* yrow = y + row * S2;
    for (i64 c = threadIdx.x; c < nchunks; c += blockDim.x) {
      float v[VW], o[VW];
      smsm::load_chunk<T, VW>(STAGE ? sx : xr, c, v);
      const unsigned long long bits = mr ? smsm::load_mask_bits<VW>(mr, c) : 0ull;
#pragma unroll
      for (int e = 0; e < VW; ++e)
        o[e] = (smsm::is_masked(bits, e, c * VW + e, i, causal) ? 0.f : exp(v[e] * scale - mx)) / sum;
      smsm::store_chunk<T, VW>(yrow, c, o);
    }
    if constexpr (STAGE) __syncthreads();
  }
}
