// kl_div.cu -- KL divergence forward (aclnnKlDiv) and backward (aclnnKlDivBackward).
//
// Backward, on B = broadcast(self, target):  r = -(e * g) * coef,  e = exp(t) if logTarget else t,
// out = r summed over the axes along which self was broadcast (fixed order), cast to out's dtype.
// Forward, elementwise on B:  logTarget=0: xlogy(t, t) - t * s   (0 where t == 0, PyTorch's form)
//                             logTarget=1: exp(t) * (t - s)
// then none (shape B) or a deterministic two-stage sum (sum / mean / batchmean divide by `div`).
//
// Dtype design. Math is fp32 for fp16/bf16/fp32 storage and fp64 when any operand is fp64.
//  * Fast paths (`*_contig<T>`): every operand contiguous over the same element range and of one
//    storage type T (the common case); 16-byte vector loads/stores when the host saw every pointer
//    16-byte aligned (`vec`), a scalar tail after the vectors. gradOutput may be a broadcast scalar
//    (`g_scalar`, the usual mean/sum upstream gradient).
//  * General paths (`*_strided<M>`): any rank <= 8 strides / broadcasts (stride 0) from the tiling
//    block, and each operand's dtype as a runtime ACL code loaded/stored through a switch
//    (load_dyn/store_dyn): the path is memory- and index-bound, a uniform switch costs nothing
//    there, and it avoids 4^3 instantiations per kernel. Templated only on the math type M.
// logTarget is a runtime flag (uniform branch) for the same reason.
//
// Tiling layouts (int64 words at the workspace head, written by ops/kl_div/launch.py):
//  backward general: [0, 33)  kept space  = self's dims  [rank, size[8], stride_g[8], stride_t[8], stride_out[8]]
//                    [33, 58) reduced space = B's dims along which self was broadcast
//                                            [rank, size[8], stride_g[8], stride_t[8]]
//  forward general:  [0, 33)  B            [rank, size[8], stride_s[8], stride_t[8], stride_out[8]]
// No floating-point atomics anywhere: reductions are per-thread sequential loops plus the fixed
// butterfly of block_sum, and the forward's per-block partials are combined by one block in index
// order, so a given launch geometry always gives bit-identical results.
#include "common.cuh"

using namespace aclg;

namespace kl {

enum : int { kKeptBlock = 0, kRedBlock = 1 + kMaxRank + 3 * kMaxRank };  // tiling word offsets (33)

__device__ __forceinline__ float kexp(float x) { return expf(x); }
__device__ __forceinline__ double kexp(double x) { return exp(x); }
__device__ __forceinline__ float klog(float x) { return logf(x); }
__device__ __forceinline__ double klog(double x) { return log(x); }

template <class M> __device__ __forceinline__ M bwd_elem(M g, M t, int log_target, M coef) {
  const M e = log_target ? kexp(t) : t;
  return -(e * g) * coef;
}

template <class M> __device__ __forceinline__ M fwd_elem(M s, M t, int log_target) {
  if (log_target) return kexp(t) * (t - s);
  const M xlogy = t == M(0) ? M(0) : t * klog(t);  // NaN t stays NaN, t < 0 gives NaN from log
  return xlogy - t * s;
}

}  // namespace kl

using namespace kl;

// ============================================================================ backward
// Fast path: g (n elements, or one broadcast scalar), t and out contiguous, one storage type.
template <class T>
__global__ void __launch_bounds__(256) kl_bwd_contig(const T* __restrict__ g, const T* __restrict__ t,
                                                     T* __restrict__ out, long long n, int g_scalar,
                                                     int log_target, int vec, math_t<T> coef) {
  typedef math_t<T> M;
  const i64 tid = global_thread(), nth = grid_threads();
  const M g0 = g_scalar ? load(g, 0) : M(0);
  i64 done = 0;
  if (vec) {
    constexpr int N = Vec16<T>::N;
    const i64 nv = n / N;
    for (i64 v = tid; v < nv; v += nth) {
      const Vec16<T> tv = load16(t, v);
      const Vec16<T> gv = g_scalar ? tv : load16(g, v);
      Vec16<T> ov;
#pragma unroll
      for (int k = 0; k < N; ++k) {
        const M gk = g_scalar ? g0 : to_math(gv.v[k]);
        ov.v[k] = from_math<T>(bwd_elem<M>(gk, to_math(tv.v[k]), log_target, coef));
      }
      store16(out, v, ov);
    }
    done = nv * N;
  }
  for (i64 i = done + tid; i < n; i += nth) {
    const M gi = g_scalar ? g0 : load(g, i);
    store(out, i, bwd_elem<M>(gi, load(t, i), log_target, coef));
  }
}

// General path, one thread per out element: sums its n_red broadcast-extra elements in row-major
// order of the reduced space (n_red == 1: plain strided/broadcast elementwise; n_red == 0: B is
// empty along a reduced axis and out is 0).
template <class M>
__global__ void __launch_bounds__(256) kl_bwd_strided(const void* g, int dt_g, const void* t, int dt_t, void* out,
                                                      int dt_out, const long long* __restrict__ tiling,
                                                      long long n_out, long long n_red, int log_target, M coef) {
  const i64 tid = global_thread(), nth = grid_threads();
  const i64* kept = tiling + kKeptBlock;
  const i64* red = tiling + kRedBlock;
  for (i64 o = tid; o < n_out; o += nth) {
    i64 ko[3];
    strided_offsets<3>(kept, o, ko);
    M acc = M(0);
    for (i64 r = 0; r < n_red; ++r) {
      i64 ro[2];
      strided_offsets<2>(red, r, ro);
      acc += bwd_elem<M>(load_dyn<M>(g, ko[0] + ro[0], dt_g), load_dyn<M>(t, ko[1] + ro[1], dt_t), log_target, coef);
    }
    store_dyn<M>(out, ko[2], dt_out, acc);
  }
}

// General path, one block per out element (few out elements, long reductions): thread j sums
// r = j, j + blockDim, ... in order, then the fixed block butterfly.
template <class M>
__global__ void __launch_bounds__(256) kl_bwd_strided_block(const void* g, int dt_g, const void* t, int dt_t,
                                                            void* out, int dt_out,
                                                            const long long* __restrict__ tiling, long long n_out,
                                                            long long n_red, int log_target, M coef) {
  __shared__ M scratch[kWarp];
  const i64* kept = tiling + kKeptBlock;
  const i64* red = tiling + kRedBlock;
  for (i64 o = blockIdx.x; o < n_out; o += gridDim.x) {
    i64 ko[3];
    strided_offsets<3>(kept, o, ko);
    M acc = M(0);
    for (i64 r = threadIdx.x; r < n_red; r += blockDim.x) {
      i64 ro[2];
      strided_offsets<2>(red, r, ro);
      acc += bwd_elem<M>(load_dyn<M>(g, ko[0] + ro[0], dt_g), load_dyn<M>(t, ko[1] + ro[1], dt_t), log_target, coef);
    }
    acc = block_sum(acc, scratch);  // ends with a barrier: scratch reusable next iteration
    if (threadIdx.x == 0) store_dyn<M>(out, ko[2], dt_out, acc);
  }
}

// ============================================================================ forward
// reduction none, fast path: s, t, out contiguous over B, one storage type.
template <class T>
__global__ void __launch_bounds__(256) kl_fwd_contig(const T* __restrict__ s, const T* __restrict__ t,
                                                     T* __restrict__ out, long long n, int log_target, int vec) {
  typedef math_t<T> M;
  const i64 tid = global_thread(), nth = grid_threads();
  i64 done = 0;
  if (vec) {
    constexpr int N = Vec16<T>::N;
    const i64 nv = n / N;
    for (i64 v = tid; v < nv; v += nth) {
      const Vec16<T> sv = load16(s, v), tv = load16(t, v);
      Vec16<T> ov;
#pragma unroll
      for (int k = 0; k < N; ++k) ov.v[k] = from_math<T>(fwd_elem<M>(to_math(sv.v[k]), to_math(tv.v[k]), log_target));
      store16(out, v, ov);
    }
    done = nv * N;
  }
  for (i64 i = done + tid; i < n; i += nth) store(out, i, fwd_elem<M>(load(s, i), load(t, i), log_target));
}

// reduction none, general path.
template <class M>
__global__ void __launch_bounds__(256) kl_fwd_strided(const void* s, int dt_s, const void* t, int dt_t, void* out,
                                                      int dt_out, const long long* __restrict__ tiling, long long n,
                                                      int log_target) {
  const i64 tid = global_thread(), nth = grid_threads();
  for (i64 i = tid; i < n; i += nth) {
    i64 off[3];
    strided_offsets<3>(tiling, i, off);
    store_dyn<M>(out, off[2], dt_out, fwd_elem<M>(load_dyn<M>(s, off[0], dt_s), load_dyn<M>(t, off[1], dt_t), log_target));
  }
}

// Reductions, stage 1 (fast path): block b writes its partial sum to partials[b].
template <class T>
__global__ void __launch_bounds__(256) kl_fwd_partial_contig(const T* __restrict__ s, const T* __restrict__ t,
                                                             long long n, int log_target, int vec,
                                                             math_t<T>* __restrict__ partials) {
  typedef math_t<T> M;
  __shared__ M scratch[kWarp];
  const i64 tid = global_thread(), nth = grid_threads();
  M acc = M(0);
  i64 done = 0;
  if (vec) {
    constexpr int N = Vec16<T>::N;
    const i64 nv = n / N;
    for (i64 v = tid; v < nv; v += nth) {
      const Vec16<T> sv = load16(s, v), tv = load16(t, v);
#pragma unroll
      for (int k = 0; k < N; ++k) acc += fwd_elem<M>(to_math(sv.v[k]), to_math(tv.v[k]), log_target);
    }
    done = nv * N;
  }
  for (i64 i = done + tid; i < n; i += nth) acc += fwd_elem<M>(load(s, i), load(t, i), log_target);
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

// Reductions, stage 1 (general path).
template <class M>
__global__ void __launch_bounds__(256) kl_fwd_partial_strided(const void* s, int dt_s, const void* t, int dt_t,
                                                              const long long* __restrict__ tiling, long long n,
                                                              int log_target, M* __restrict__ partials) {
  __shared__ M scratch[kWarp];
  const i64 tid = global_thread(), nth = grid_threads();
  M acc = M(0);
  for (i64 i = tid; i < n; i += nth) {
    i64 off[2];
    strided_offsets<2>(tiling, i, off);
    acc += fwd_elem<M>(load_dyn<M>(s, off[0], dt_s), load_dyn<M>(t, off[1], dt_t), log_target);
  }
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

// Reductions, stage 2: one block sums the `count` partials in a fixed order and writes
// sum / div (div = 1 for sum, numel(B) for mean, B[0] for batchmean; count 0 -> 0 / div).
template <class M>
__global__ void __launch_bounds__(256) kl_fwd_final(const M* __restrict__ partials, long long count, M div,
                                                    void* out, int dt_out) {
  __shared__ M scratch[kWarp];
  M acc = M(0);
  for (i64 i = threadIdx.x; i < count; i += blockDim.x) acc += partials[i];
  acc = block_sum(acc, scratch);
  if (blockIdx.x == 0 && threadIdx.x == 0) store_dyn<M>(out, 0, dt_out, acc / div);
}
