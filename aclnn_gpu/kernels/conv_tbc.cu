// conv_tbc.cu -- the non-GEMM kernels of ConvTBC forward/backward (the products run in cuBLAS; see
// ops/conv_tbc/launch.py for the plan).
//
//   tbc_pad_copy<Tin, Tout>   time-padded (or cropped) copy of a (rows, B, C) tensor with optional
//                             dtype conversion and arbitrary source strides: the GEMM operands
//                             (padded input, padded grad, fp16 copies for cubeMathType 2).
//   tbc_bias_epilogue<T>      y = acc (fp32) + bias[c] (bias may be null) -> storage type; in place
//                             when T is float and acc == y.
//   tbc_col_sum<Tin, Tout>    deterministic column sums of a row-major (R, C) matrix: block
//                             (tile of 32 columns, chunk of rows); fixed per-thread order, fixed
//                             order across the 8 warps; a second launch over the (S, C) partials
//                             finishes (no atomics).
//   tbc_fill_zero<T>          zeros (empty-input path).
//
// Sizes are long long, grids are grid-stride, block size 256 (col_sum: exactly 256 = 8 warps).
#include "common.cuh"

using aclg::i64;

namespace tbc {
template <class To, class From> __device__ __forceinline__ To cvt(From v) {
  return aclg::from_math<To>(aclg::to_math(v));
}
template <class T> __device__ __forceinline__ T zero() { return aclg::from_math<T>(0.0f); }
enum { kColWarps = 8 };  // warps per tbc_col_sum block (blockDim.x == 256)
}  // namespace tbc

// dst[j, b, c] = src[(j - lead), b, c] when 0 <= j - lead < rows_src, else 0; j < rows_out.
// Source element (t, b, c) is at t*s_t + b*s_b + c*s_c; dst is contiguous (rows_out, B, C).
template <class Tin, class Tout>
__global__ void tbc_pad_copy(const Tin* src, Tout* dst, i64 rows_out, i64 lead, i64 rows_src, i64 B, i64 C,
                             i64 s_t, i64 s_b, i64 s_c) {
  const i64 BC = B * C;
  const i64 n = rows_out * BC;
  const bool dense = (s_c == 1 && s_b == C);
  for (i64 idx = aclg::global_thread(); idx < n; idx += aclg::grid_threads()) {
    const i64 j = idx / BC;
    const i64 r = idx - j * BC;
    const i64 t = j - lead;
    Tout v = tbc::zero<Tout>();
    if (t >= 0 && t < rows_src) {
      i64 off;
      if (dense) {
        off = t * s_t + r;
      } else {
        const i64 b = r / C;
        off = t * s_t + b * s_b + (r - b * C) * s_c;
      }
      v = tbc::cvt<Tout>(src[off]);
    }
    dst[idx] = v;
  }
}

// y[r, c] = acc[r, c] + bias[c] (bias == nullptr: no bias), rows x C contiguous.
template <class T>
__global__ void tbc_bias_epilogue(const float* acc, const T* bias, T* y, i64 rows, i64 C) {
  const i64 n = rows * C;
  for (i64 idx = aclg::global_thread(); idx < n; idx += aclg::grid_threads()) {
    float v = acc[idx];
    if (bias != nullptr) v += aclg::to_math(bias[idx % C]);
    y[idx] = aclg::from_math<T>(v);
  }
}

// out[chunk, c] = sum over rows r in [chunk*rows_per_chunk, min(R, (chunk+1)*rows_per_chunk)) of
// src[r, c]; chunk = blockIdx.y. Requires blockDim.x == 256.
template <class Tin, class Tout>
__global__ void tbc_col_sum(const Tin* src, Tout* out, i64 R, i64 C, i64 rows_per_chunk) {
  __shared__ float part[tbc::kColWarps][aclg::kWarp + 1];
  const int lane = threadIdx.x % aclg::kWarp;
  const int wy = threadIdx.x / aclg::kWarp;
  const i64 r0 = (i64)blockIdx.y * rows_per_chunk;
  const i64 r1 = r0 + rows_per_chunk < R ? r0 + rows_per_chunk : R;
  const i64 ntiles = (C + aclg::kWarp - 1) / aclg::kWarp;
  for (i64 tile = blockIdx.x; tile < ntiles; tile += gridDim.x) {
    const i64 c = tile * aclg::kWarp + lane;
    float s = 0.0f;
    if (c < C) {
      for (i64 r = r0 + wy; r < r1; r += tbc::kColWarps) s += aclg::to_math(src[r * C + c]);
    }
    part[wy][lane] = s;
    __syncthreads();
    if (wy == 0 && c < C) {
      float t = part[0][lane];
#pragma unroll
      for (int y = 1; y < tbc::kColWarps; ++y) t += part[y][lane];
      out[(i64)blockIdx.y * C + c] = aclg::from_math<Tout>(t);
    }
    __syncthreads();
  }
}

template <class T>
__global__ void tbc_fill_zero(T* p, i64 n) {
  for (i64 idx = aclg::global_thread(); idx < n; idx += aclg::grid_threads()) p[idx] = tbc::zero<T>();
}
