// conv_tbc.cu -- the non-GEMM kernels of ConvTBC forward/backward (the products run in cuBLAS; see
// ops/conv_tbc/launch.py for the plan).
//
//   tbc_batch_major<Tin, Tout, Tsum>  one pass over a time-major (Tn, B, C) tensor: its batch-major
//                             copy (B, Tn, C) (the operand whose K consecutive time rows of one
//                             sample are one contiguous GEMM row), optional, and its column sums
//                             over the Tn*B rows (gradBias), optional. 16-byte loads and stores when
//                             the host says so. Deterministic: block = (tile of columns, chunk of
//                             rows), fixed per-thread order, fixed order across the 8 warps; with
//                             S > 1 row chunks the block writes an fp32 partial row and a second
//                             launch (Tn = S, B = 1, no copy) sums the (S, C) partials. No atomics.
//                             Chunks run in reverse block order (blocks dispatch roughly in index
//                             order), so the pass ends on the head of src, which the next launch
//                             reads first (gradWeight's GEMM); partials stay indexed by chunk.
//   tbc_copy<Tin, Tout>       dst (R, B, C) contiguous = a strided (R, B, C) view of src (any strides,
//                             negative too) with dtype conversion: operand staging, fp16 copies for
//                             cubeMathType 2, the tap-reversed transposed weights, bias broadcast.
//   tbc_fill_zero<T>          zeros (a gradWeight tap without valid rows; the empty-input path).
//   tbc_weights<T>            the backward's two weight-sized passes in one launch (fp16 / bf16):
//                             gradInput's tap-reversed transposed weights and gradWeight rounded once
//                             from the fp32 sums of its GEMMs.
//
// Sizes are long long; copy/fill are grid-stride with block size 256; tbc_batch_major needs
// exactly 256 threads (8 warps).
#include "common.cuh"

using aclg::i64;

namespace tbc {
template <class To, class From> __device__ __forceinline__ To cvt(From v) {
  return aclg::from_math<To>(aclg::to_math(v));
}
template <class T> __device__ __forceinline__ T zero() { return aclg::from_math<T>(0.0f); }
enum { kColWarps = 8 };  // warps per tbc_batch_major block (blockDim.x == 256)

// The 16-byte path copies a packet unchanged: only when source and destination types agree (the
// host never asks for it otherwise; the second overload only makes every instantiation compile).
template <class T> __device__ __forceinline__ void store_packet(T* p, i64 i, const aclg::Vec16<T>& v) {
  aclg::store16(p, i, v);
}
template <class A, class B> __device__ __forceinline__ void store_packet(A*, i64, const aclg::Vec16<B>&) {}
}  // namespace tbc

// Source row r = t*B + b of the row-major (Tn*B, C) `src` goes to row b*Tn + t of `dst` (when dst is
// not null); sums[blockIdx.y, c] = sum over the rows of chunk blockIdx.y ([y*rpc, min(R, (y+1)*rpc)))
// of src[r, c] (when sums is not null). vec != 0: every lane owns 16 bytes of columns (C a multiple
// of the packet, src/dst 16-byte aligned, Tin == Tout), else one column.
template <class Tin, class Tout, class Tsum>
__global__ void tbc_batch_major(const Tin* src, Tout* dst, Tsum* sums, i64 Tn, i64 B, i64 C, i64 rows_per_chunk,
                                int vec) {
  constexpr int W = aclg::Vec16<Tin>::N;
  __shared__ float part[tbc::kColWarps][W][aclg::kWarp + 1];
  const int lane = threadIdx.x % aclg::kWarp;
  const int wy = threadIdx.x / aclg::kWarp;
  const int w = vec ? W : 1;
  const i64 R = Tn * B;
  // chunks in reverse block order: the pass's last loads are the head of src, which the next launch
  // (gradWeight's GEMM) reads first and finds in L2; partials stay indexed by chunk (fixed sum order)
  const i64 chunk = (i64)gridDim.y - 1 - blockIdx.y;
  const i64 r0 = chunk * rows_per_chunk;
  const i64 r1 = r0 + rows_per_chunk < R ? r0 + rows_per_chunk : R;
  const i64 span = (i64)aclg::kWarp * w;
  const i64 ntiles = (C + span - 1) / span;
  for (i64 tile = blockIdx.x; tile < ntiles; tile += gridDim.x) {
    const i64 c0 = tile * span + (i64)lane * w;
    float s[W];
#pragma unroll
    for (int i = 0; i < W; ++i) s[i] = 0.0f;
    if (c0 < C) {
      for (i64 r = r0 + wy; r < r1; r += tbc::kColWarps) {
        const i64 t = r / B;
        const i64 drow = (r - t * B) * Tn + t;
        if (vec) {
          const aclg::Vec16<Tin> v = aclg::load16(src, (r * C + c0) / W);
#pragma unroll
          for (int i = 0; i < W; ++i) s[i] += aclg::to_math(v.v[i]);
          if (dst != nullptr) tbc::store_packet(dst, (drow * C + c0) / W, v);
        } else {
          const Tin v = src[r * C + c0];
          s[0] += aclg::to_math(v);
          if (dst != nullptr) dst[drow * C + c0] = tbc::cvt<Tout>(v);
        }
      }
    }
    if (sums != nullptr) {
#pragma unroll
      for (int i = 0; i < W; ++i) part[wy][i][lane] = s[i];
      __syncthreads();
      if (wy == 0 && c0 < C) {
        for (int i = 0; i < w; ++i) {
          float acc = part[0][i][lane];
#pragma unroll
          for (int y = 1; y < tbc::kColWarps; ++y) acc += part[y][i][lane];
          sums[chunk * C + c0 + i] = aclg::from_math<Tsum>(acc);
        }
      }
      __syncthreads();
    }
  }
}

// dst[(j*B + b)*C + c] = src[j*s_t + b*s_b + c*s_c] for j < R (strides in elements, any sign).
template <class Tin, class Tout>
__global__ void tbc_copy(const Tin* src, Tout* dst, i64 R, i64 B, i64 C, i64 s_t, i64 s_b, i64 s_c) {
  const i64 BC = B * C;
  const i64 n = R * BC;
  const bool dense = (s_c == 1 && s_b == C);
  for (i64 idx = aclg::global_thread(); idx < n; idx += aclg::grid_threads()) {
    const i64 j = idx / BC;
    const i64 r = idx - j * BC;
    i64 off;
    if (dense) {
      off = j * s_t + r;
    } else {
      const i64 b = r / C;
      off = j * s_t + b * s_b + (r - b * C) * s_c;
    }
    dst[idx] = tbc::cvt<Tout>(src[off]);
  }
}

// wt[((K-1-k)*Cout + co)*Cin + ci] = w[(k*Cin + ci)*Cout + co] (the tap-reversed transpose) and
// gw[i] = acc[i] rounded to T, i < K*Cin*Cout. Block = 256 threads (32 x 8) over 32 x 32 (ci, co) tiles
// of one tap: w, acc and gw are read / written along co, wt along ci (coalesced both ways through a
// shared tile; fp32 in shared memory: no bank conflicts, and T -> float -> T is exact).
template <class T>
__global__ void tbc_weights(const T* w, T* wt, const float* acc, T* gw, i64 K, i64 Cin, i64 Cout) {
  __shared__ float tile[aclg::kWarp][aclg::kWarp + 1];
  const int tx = threadIdx.x % aclg::kWarp;
  const int ty = threadIdx.x / aclg::kWarp;
  const int rows = blockDim.x / aclg::kWarp;
  const i64 tiles_ci = (Cin + aclg::kWarp - 1) / aclg::kWarp;
  const i64 tiles_co = (Cout + aclg::kWarp - 1) / aclg::kWarp;
  const i64 per_tap = tiles_ci * tiles_co;
  for (i64 id = blockIdx.x; id < K * per_tap; id += gridDim.x) {
    const i64 k = id / per_tap;
    const i64 ci0 = (id - k * per_tap) / tiles_co * aclg::kWarp;
    const i64 co0 = (id - k * per_tap) % tiles_co * aclg::kWarp;
    for (int i = ty; i < aclg::kWarp; i += rows) {
      const i64 ci = ci0 + i, co = co0 + tx;
      if (ci < Cin && co < Cout) {
        const i64 at = (k * Cin + ci) * Cout + co;
        tile[i][tx] = aclg::to_math(w[at]);
        gw[at] = tbc::cvt<T>(acc[at]);
      }
    }
    __syncthreads();
    for (int i = ty; i < aclg::kWarp; i += rows) {
      const i64 co = co0 + i, ci = ci0 + tx;
      if (ci < Cin && co < Cout) wt[((K - 1 - k) * Cout + co) * Cin + ci] = aclg::from_math<T>(tile[tx][i]);
    }
    __syncthreads();
  }
}

template <class T>
__global__ void tbc_fill_zero(T* p, i64 n) {
  for (i64 idx = aclg::global_thread(); idx < n; idx += aclg::grid_threads()) p[idx] = tbc::zero<T>();
}
