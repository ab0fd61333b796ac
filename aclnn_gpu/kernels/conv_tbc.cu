// conv_tbc.cu -- the non-GEMM kernels of ConvTBC forward/backward (the products run in cuBLAS; see
// ops/conv_tbc/launch.py for the plan).
//
//   tbc_col_sums<Tin, Tsum>   column sums of a row-major (R, C) tensor over chunks of rows (gradBias):
//                             block = (tile of columns, chunk of rows), fixed per-thread order, fixed
//                             order across the 8 warps, 16-byte loads when the host says so; one sum
//                             row per chunk (the final sums with one chunk, fp32 partials with
//                             several, which tbc_reduce adds up). No atomics.
//   tbc_copy<Tin, Tout>       dst (R, B, C) contiguous = a strided (R, B, C) view of src (any strides,
//                             negative too) with dtype conversion: operand staging, fp16 copies for
//                             cubeMathType 2, the bias broadcast.
//   tbc_fill_zero<T>          zeros (a gradWeight tap without rows; a gradInput no tap covers whole).
//   tbc_reduce<O, T>          the backward's split-k gradWeight sums (partials + remainder rows) and
//                             gradBias's chunk sums, in a fixed order, rounded once, one launch.
//
// Sizes are long long; copy/fill/round are grid-stride with block size 256; tbc_col_sums and
// tbc_reduce need exactly 256 threads (8 warps) and loop over their tiles.
#include "common.cuh"

using aclg::i64;

namespace tbc {
template <class To, class From> __device__ __forceinline__ To cvt(From v) {
  return aclg::from_math<To>(aclg::to_math(v));
}
template <class T> __device__ __forceinline__ T zero() { return aclg::from_math<T>(0.0f); }
enum { kColWarps = 8 };  // warps per tbc_col_sums block (blockDim.x == 256)
}  // namespace tbc

// sums[chunk, c] = sum over the rows [chunk*rpc, min(R, (chunk+1)*rpc)) of the row-major (R, C) src,
// chunk = one per blockIdx.y (in fp32, rounded once to Tsum). vec != 0: every lane owns 16 bytes of
// columns (C a multiple of the packet, src 16-byte aligned), else one column.
template <class Tin, class Tsum>
__global__ void tbc_col_sums(const Tin* src, Tsum* sums, i64 R, i64 C, i64 rows_per_chunk, int vec) {
  constexpr int W = aclg::Vec16<Tin>::N;
  __shared__ float part[tbc::kColWarps][W][aclg::kWarp + 1];
  const int lane = threadIdx.x % aclg::kWarp;
  const int wy = threadIdx.x / aclg::kWarp;
  const int w = vec ? W : 1;
  // chunks in reverse block order: the pass's last loads are the head of src, which the next launch
  // (gradWeight's first GEMM) reads first and may find in L2; sums stay indexed by chunk (fixed order)
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
        if (vec) {
          const aclg::Vec16<Tin> v = aclg::load16(src, (r * C + c0) / W);
#pragma unroll
          for (int i = 0; i < W; ++i) s[i] += aclg::to_math(v.v[i]);
        } else {
          s[0] += aclg::to_math(src[r * C + c0]);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < W; ++i) part[wy][i][lane] = s[i];
    __syncthreads();
    if (wy == 0) {
      // warp 0 adds the 8 warps' sums in a fixed order and stores them coalesced: pass j writes the
      // tile's columns j*32 .. j*32 + 31, column f being lane f / w's value i = f % w
      for (int j = 0; j < w; ++j) {
        const int f = j * aclg::kWarp + lane;
        const int owner = f / w, i = f - owner * w;
        const i64 col = tile * span + f;
        if (col < C) {
          float acc = part[0][i][owner];
#pragma unroll
          for (int y = 1; y < tbc::kColWarps; ++y) acc += part[y][i][owner];
          sums[chunk * C + col] = aclg::from_math<Tsum>(acc);
        }
      }
    }
    __syncthreads();
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

// The backward's fixed-order reductions, one launch:
//  * gradWeight (part_w != null): dw[k, ci, co] = sum over s < S of part_w[s, k, ci, co] (the split-k GEMM
//    of tap k over its chunk s of c = D / S depth rows, D = n * B its valid (time, sample) rows) plus the
//    D - S*c remainder rows, summed here: x[i0*B + r, ci] * dy[o0*B + r, co]. A tap with c == 0 had no
//    GEMM (its partials are not read): all its rows are remainder. Tap k pairs output rows
//    [o0, o0 + n) with input rows from i0 = o0 + k - pad (the forward's geometry).
//  * gradBias (part_b != null): gb[c] = sum over s < Sb of part_b[s, c] (tbc_col_sums' chunk sums).
// Outputs [0, K*Cin*Cout) are gradWeight's, the next Cout gradBias's. A block (8 warps) takes 32
// consecutive outputs: warp y adds the chunks s = y, y + 8, ... and the remainder rows r = S*c + y,
// y + 8, ... of its lane's output, then warp 0 adds the 8 warp sums in order: fp32, a fixed order
// whatever the grid, rounded once. Blocks per output tile rather than per 256 outputs: a small
// gradWeight (64 x 64 channels) still spreads its partials over enough SMs.
template <class O, class T>
__global__ void tbc_reduce(const float* part_w, const O* x, const O* dy, T* dw, const float* part_b, T* gb,
                           i64 K, i64 Cin, i64 Cout, i64 S, i64 Sb, i64 Tin, i64 Tout, i64 B, i64 pad) {
  __shared__ float warp_sums[tbc::kColWarps][aclg::kWarp + 1];
  const int lane = threadIdx.x % aclg::kWarp;
  const int wy = threadIdx.x / aclg::kWarp;
  const i64 CC = Cin * Cout;
  const i64 nw = part_w != nullptr ? K * CC : 0;
  const i64 n = nw + (part_b != nullptr ? Cout : 0);
  const i64 ntiles = (n + aclg::kWarp - 1) / aclg::kWarp;
  for (i64 tile = blockIdx.x; tile < ntiles; tile += gridDim.x) {
    const i64 idx = tile * aclg::kWarp + lane;
    float acc = 0.0f;
    if (idx < nw) {
      const i64 k = idx / CC;
      const i64 e = idx - k * CC;
      const i64 ci = e / Cout;
      const i64 co = e - ci * Cout;
      const i64 o0 = pad - k > 0 ? pad - k : 0;
      const i64 o1 = Tin + pad - k < Tout ? Tin + pad - k : Tout;
      const i64 D = o1 > o0 ? (o1 - o0) * B : 0;
      const i64 c = D / S;
      if (c > 0)
        for (i64 s = wy; s < S; s += tbc::kColWarps) acc += part_w[(s * K + k) * CC + e];
      if (D > S * c) {   // (only then is o0 + k - pad a valid input row)
        const O* xr = x + ((o0 + k - pad) * B) * Cin + ci;
        const O* dr = dy + (o0 * B) * Cout + co;
        for (i64 r = S * c + wy; r < D; r += tbc::kColWarps)
          acc += aclg::to_math(xr[r * Cin]) * aclg::to_math(dr[r * Cout]);
      }
    } else if (idx < n) {
      for (i64 s = wy; s < Sb; s += tbc::kColWarps) acc += part_b[s * Cout + (idx - nw)];
    }
    warp_sums[wy][lane] = acc;
    __syncthreads();
    if (wy == 0 && idx < n) {
      float total = warp_sums[0][lane];
#pragma unroll
      for (int y = 1; y < tbc::kColWarps; ++y) total += warp_sums[y][lane];
      if (idx < nw) dw[idx] = aclg::from_math<T>(total);
      else gb[idx - nw] = aclg::from_math<T>(total);
    }
    __syncthreads();
  }
}

template <class T>
__global__ void tbc_fill_zero(T* p, i64 n) {
  for (i64 idx = aclg::global_thread(); idx < n; idx += aclg::grid_threads()) p[idx] = tbc::zero<T>();
}
