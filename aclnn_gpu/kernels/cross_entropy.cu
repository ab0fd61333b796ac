// cross_entropy.cu -- aclnnCrossEntropyLoss (forward) and aclnnCrossEntropyLossGrad (the mission).
//
// Kernels (T: float, double, __half, __nv_bfloat16; I: int (int32) or long long (int64) targets):
//   ce_weight_sums<I>      1 block. red[0] = D = sum of w[t_i] over rows that count (target in
//                          [0,C) and != ignore_index), red[1] = W = sum_c w[c]; doubles, fixed order.
//   ce_grad<T, I>          the gradient w.r.t. the logits, one streaming pass (spec ops.md §2.2):
//                          out = a_i*p - s_i*w_j, target column b_i*expm1(lp) + s_i*(p*W - w_t);
//                          rows are spread over "groups" of `group` consecutive threads (any power of
//                          two, may span blocks: no reductions inside a row).
//   ce_forward<T, I>       one block per row: online log-sum-exp (pass 1 reads x), pass 2 writes
//                          logProb and sums w_c*lp_c (label smoothing only); per-row loss.
//   ce_loss_reduce<T>      1 block: mean/sum of the per-row losses (double, fixed order).
// Rows: a scalar head up to the first 16-byte boundary, 16-byte vectors, a scalar tail; `vec` = 0
// makes every access scalar (the host sets it only when the paired pointers share their alignment).
// Never out of bounds: a target outside [0, C) that is not ignore_index only makes its row NaN.
#include "common.cuh"

namespace aclg {
namespace ce {

constexpr int kReduceThreads = 256;

// ---- candidates for common.cuh: typed exp / expm1 / log for the math types
__device__ __forceinline__ float m_exp(float x) { return expf(x); }
__device__ __forceinline__ double m_exp(double x) { return exp(x); }
__device__ __forceinline__ float m_expm1(float x) { return expm1f(x); }
__device__ __forceinline__ double m_expm1(double x) { return expm1(x); }
__device__ __forceinline__ float m_log(float x) { return logf(x); }
__device__ __forceinline__ double m_log(double x) { return log(x); }

// ---- candidates for common.cuh: butterfly merge of online-softmax states (every lane / thread
// ends with the same value: maxsum_merge is symmetric in its arguments)
template <class A> __device__ __forceinline__ MaxSum<A> warp_maxsum(MaxSum<A> s) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o >>= 1) {
    MaxSum<A> r;
    r.max = __shfl_xor_sync(kFullMask, s.max, o);
    r.sum = __shfl_xor_sync(kFullMask, s.sum, o);
    s = maxsum_merge(s, r);
  }
  return s;
}
template <class A> __device__ __forceinline__ MaxSum<A> block_maxsum(MaxSum<A> s, A* smax, A* ssum) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  s = warp_maxsum(s);
  if (lane == 0) {
    smax[warp] = s.max;
    ssum[warp] = s.sum;
  }
  __syncthreads();
  MaxSum<A> t;
  t.max = lane < warps ? smax[lane] : neg_inf<A>();
  t.sum = lane < warps ? ssum[lane] : A(0);
  t = warp_maxsum(t);
  __syncthreads();
  return t;
}

// ---- candidates for common.cuh: row walkers (scalar head to a 16-byte boundary, vector body,
// scalar tail). `lane` in [0, nthr) picks this thread's share.
template <class T> __device__ __forceinline__ i64 head_len(const T* r, i64 C, int vec) {
  if (!vec) return C;
  const i64 h = (i64)(((16u - (unsigned)((unsigned long long)r & 15u)) & 15u) / sizeof(T));
  return h < C ? h : C;
}

// f(j, value) for every element of the row r[0..C)
template <class T, class F>
__device__ __forceinline__ void row_read(const T* r, i64 C, int vec, i64 lane, i64 nthr, F& f) {
  constexpr int V = Vec16<T>::N;
  const i64 h = head_len(r, C, vec);
  for (i64 j = lane; j < h; j += nthr) f(j, load(r, j));
  const i64 nv = (C - h) / V;
  const T* rb = r + h;
  for (i64 v = lane; v < nv; v += nthr) {
    const Vec16<T> pk = load16(rb, v);
#pragma unroll
    for (int k = 0; k < V; ++k) f(h + v * V + k, to_math(pk.v[k]));
  }
  for (i64 j = h + nv * V + lane; j < C; j += nthr) f(j, load(r, j));
}

// d[j] = f(j, s[j]); s and d must share their alignment modulo 16 when vec != 0
template <class T, class F>
__device__ __forceinline__ void row_map(const T* s, T* d, i64 C, int vec, i64 lane, i64 nthr, F& f) {
  constexpr int V = Vec16<T>::N;
  const i64 h = head_len(s, C, vec);
  for (i64 j = lane; j < h; j += nthr) store(d, j, f(j, load(s, j)));
  const i64 nv = (C - h) / V;
  const T* sb = s + h;
  T* db = d + h;
  for (i64 v = lane; v < nv; v += nthr) {
    const Vec16<T> pk = load16(sb, v);
    Vec16<T> q;
#pragma unroll
    for (int k = 0; k < V; ++k) q.v[k] = from_math<T>(f(h + v * V + k, to_math(pk.v[k])));
    store16(db, v, q);
  }
  for (i64 j = h + nv * V + lane; j < C; j += nthr) store(d, j, f(j, load(s, j)));
}

// d[0..C) = value, without reading anything
template <class T>
__device__ __forceinline__ void row_fill(T* d, i64 C, int vec, i64 lane, i64 nthr, math_t<T> value) {
  constexpr int V = Vec16<T>::N;
  const i64 h = head_len(d, C, vec);
  const T tv = from_math<T>(value);
  for (i64 j = lane; j < h; j += nthr) d[j] = tv;
  const i64 nv = (C - h) / V;
  T* db = d + h;
  Vec16<T> q;
#pragma unroll
  for (int k = 0; k < V; ++k) q.v[k] = tv;
  for (i64 v = lane; v < nv; v += nthr) store16(db, v, q);
  for (i64 j = h + nv * V + lane; j < C; j += nthr) d[j] = tv;
}

}  // namespace ce
}  // namespace aclg

using namespace aclg;

// ------------------------------------------------------------------------------ D and W
// red[0] = D (need_d), red[1] = W (need_w); launch with one block of kReduceThreads threads.
template <class I>
__global__ void __launch_bounds__(ce::kReduceThreads)
ce_weight_sums(const I* target, const float* weight, double* red, long long N, long long C,
               long long ignore_index, int need_d, int need_w) {
  __shared__ double scratch[ce::kReduceThreads / kWarp];
  double d = 0.0, w = 0.0;
  if (need_d) {
    for (i64 i = threadIdx.x; i < N; i += blockDim.x) {
      const i64 t = (i64)target[i];
      if (t != ignore_index && t >= 0 && t < C) d += weight ? (double)weight[t] : 1.0;
    }
  }
  if (need_w && weight) {
    for (i64 c = threadIdx.x; c < C; c += blockDim.x) w += (double)weight[c];
  }
  d = block_sum(d, scratch);
  w = block_sum(w, scratch);
  if (threadIdx.x == 0) {
    red[0] = d;
    red[1] = weight ? w : (double)C;
  }
}

// ------------------------------------------------------------------------------ gradient
// reduction: 0 none (grad_loss (N,)), 1 mean, 2 sum (grad_loss element 0). red: from
// ce_weight_sums (read only for mean, or label_smoothing != 0 with weights); may be null otherwise.
template <class T, class I>
__global__ void __launch_bounds__(256)
ce_grad(const T* grad_loss, const T* log_prob, const I* target, const float* weight, T* out,
        const double* red, long long N, long long C, long long ignore_index, int reduction,
        double label_smoothing, long long group, int vec) {
  typedef math_t<T> M;
  const i64 gt = global_thread();
  const i64 lane = gt % group;
  const i64 ngroups = grid_threads() / group;
  bool zero_all = false;
  double inv_d = 1.0;
  if (reduction == 1) {
    const double D = red[0];
    if (D == 0.0) zero_all = true;  // every row ignored: zeros (docs/API.md §7)
    else inv_d = 1.0 / D;
  }
  const bool smooth = label_smoothing != 0.0;
  const M one_m_ls = (M)(1.0 - label_smoothing);
  const M ls_c = (M)(label_smoothing / (double)C);
  const M W = smooth ? (weight ? (M)red[1] : (M)C) : M(0);
  const bool use_w = smooth && weight != nullptr;

  for (i64 i = gt / group; i < N; i += ngroups) {
    const i64 t = (i64)target[i];
    const T* lp = log_prob + i * C;
    T* o = out + i * C;
    if (t == ignore_index || zero_all || t < 0 || t >= C) {
      const bool bad = t != ignore_index && (t < 0 || t >= C);
      ce::row_fill(o, C, vec, lane, group, bad ? quiet_nan<M>() : M(0));
      continue;
    }
    M G = load(grad_loss, reduction == 0 ? i : 0);
    if (reduction == 1) G = G * (M)inv_d;
    const M wt = weight ? (M)weight[t] : M(1);
    const M b = G * one_m_ls * wt;  // nllg_i
    // without smoothing the smoothing terms are absent, not multiplied by 0: an infinite G or an
    // overflowing exp(lp) must not turn into 0 * inf = NaN
    const M s = smooth ? G * ls_c : M(0);  // sm_i
    const M a = smooth ? b + s * W : b;
    auto f = [&](i64 j, M l) -> M {
      const M p = ce::m_exp(l);
      if (!smooth) return j == t ? b * ce::m_expm1(l) : a * p;
      const M wj = use_w ? (M)weight[j] : M(1);
      if (j == t) return b * ce::m_expm1(l) + s * (p * W - wj);  // p - 1 kept in fp32
      return a * p - s * wj;
    };
    ce::row_map(lp, o, C, vec, lane, group, f);
  }
}

// ------------------------------------------------------------------------------ forward
// One block per row (grid-stride). Writes log_prob; the per-row loss goes to loss_none (T, reduction
// none) or, when loss_none is null, to rows[i] (double) with the row's weight in rows[N + i].
template <class T, class I>
__global__ void __launch_bounds__(256)
ce_forward(const T* x, const I* target, const float* weight, T* log_prob, T* loss_none,
           double* rows, long long N, long long C, long long ignore_index, double label_smoothing,
           int vec) {
  typedef math_t<T> M;
  __shared__ M smax[32];
  __shared__ M ssum[32];
  const bool smooth = label_smoothing != 0.0;
  for (i64 i = blockIdx.x; i < N; i += gridDim.x) {
    const T* xr = x + i * C;
    T* lr = log_prob + i * C;
    MaxSum<M> st;
    st.max = neg_inf<M>();
    st.sum = M(0);
    auto acc_max = [&](i64, M v) { st = maxsum_add(st, v); };
    ce::row_read(xr, C, vec, threadIdx.x, blockDim.x, acc_max);
    st = ce::block_maxsum(st, smax, ssum);
    // Non-finite rows follow PyTorch's log_softmax, x - max - log(sum exp(x - max)): a NaN logit
    // makes st.sum NaN (see maxsum_merge); a +inf logit makes x - max NaN or -inf, so the row is
    // NaN: (mx - mx) is 0 for a finite max and NaN for +-inf (an all -inf row is NaN already).
    const M mx = st.max, logsum = ce::m_log(st.sum) + (mx - mx);
    M acc = M(0);
    auto write_lp = [&](i64 j, M v) -> M {
      const M l = (v - mx) - logsum;
      if (smooth) acc += (weight ? (M)weight[j] : M(1)) * l;
      return l;
    };
    ce::row_map(xr, lr, C, vec, threadIdx.x, blockDim.x, write_lp);
    if (smooth) acc = block_sum(acc, smax);
    if (threadIdx.x == 0) {
      const i64 t = (i64)target[i];
      M loss, wt;
      if (t == ignore_index) {
        loss = M(0);
        wt = M(0);
      } else if (t < 0 || t >= C) {
        loss = quiet_nan<M>();
        wt = M(0);
      } else {
        wt = weight ? (M)weight[t] : M(1);
        const M lpt = (load(xr, t) - mx) - logsum;
        loss = -lpt * wt;
        if (smooth) loss = loss * (M)(1.0 - label_smoothing) + (M)(label_smoothing / (double)C) * (-acc);
      }
      if (loss_none) {
        store(loss_none, i, loss);
      } else {
        rows[i] = (double)loss;
        rows[N + i] = (double)wt;
      }
    }
  }
}

// reduction 1 mean (D == 0 -> sum * 0: 0, or NaN when a bad row is in), 2 sum. One block.
template <class T>
__global__ void __launch_bounds__(ce::kReduceThreads)
ce_loss_reduce(const double* rows, long long N, int reduction, T* out) {
  __shared__ double scratch[ce::kReduceThreads / kWarp];
  double s = 0.0, d = 0.0;
  for (i64 i = threadIdx.x; i < N; i += blockDim.x) {
    s += rows[i];
    d += rows[N + i];
  }
  s = block_sum(s, scratch);
  d = block_sum(d, scratch);
  if (threadIdx.x == 0) {
    double r = s;
    if (reduction == 1) r = d != 0.0 ? s / d : s * 0.0;
    store(out, 0, (math_t<T>)r);
  }
}
