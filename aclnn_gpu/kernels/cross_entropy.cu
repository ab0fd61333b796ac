// cross_entropy.cu -- aclnnCrossEntropyLoss (forward) and aclnnCrossEntropyLossGrad (the mission).
//
// Kernels (T: float, double, __half, __nv_bfloat16; I: int (int32) or long long (int64) targets):
//   ce_weight_sums<I>      1 block. red[0] = D = sum of w[t_i] over rows that count (target in
//                          [0,C) and != ignore_index), red[1] = W = sum_c w[c], red[2] (z-loss "mean"
//                          only) = 1/n, n = the rows whose target != ignore_index (0 when n == 0);
//                          doubles, fixed order.
//   ce_grad<T, I>          the gradient w.r.t. the logits, one streaming pass (spec ops.md §2.2):
//                          out = a_i*p - s_i*w_j, then the target column b_i*expm1(lp) + s_i*(p*W - w_t)
//                          rewritten by the lane that wrote it (one element per row, from cache);
//                          z-loss (zscale != 0) folds z_i = 2*zscale*lse_i*(G_i + gZ_i) [/ n] into
//                          a_i and adds z_i*p to the target column: no second pass over logProb;
//                          rows are spread over "groups" of `group` consecutive threads (any power of
//                          two, may span blocks: no reductions inside a row).
//   ce_forward<T, I>       one block per row: online log-sum-exp (pass 1 reads x), pass 2 writes
//                          logProb and sums w_c*lp_c (label smoothing only); per-row loss (+ the
//                          z-loss zscale*lse^2 of rows not ignored), lse and the per-row z-loss.
//   ce_forward_stats / ce_forward_write / ce_forward_finish <T, I>
//                          the same forward for few long rows, each split over several blocks (the
//                          section "forward, split rows" below).
//   ce_loss_reduce<T>      1 block: mean/sum of the per-row losses (double, fixed order); with the
//                          z-loss, its own mean (over n, not D) or sum, added to the loss.
// Rows: a scalar head up to the first 16-byte boundary, 16-byte vectors, a scalar tail; `vec` = 0
// makes every access scalar (the host sets it only when the paired pointers share their alignment).
// Never out of bounds: a target outside [0, C) that is not ignore_index only makes its row NaN.
#include "common.cuh"

namespace aclg {
namespace ce {

constexpr int kReduceThreads = 256;
// ce_grad's minimum resident blocks: fp64 asks for 3, or ptxas picks 64 registers and spills on sm_90;
// the other types give no hint (0), and take 48 registers without one
template <class T> constexpr int kGradMinBlocks = sizeof(T) == 8 ? 3 : 0;

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

// The lane of row_map's split (over nthr lanes) that maps element j of the row whose source is s.
template <class T>
__device__ __forceinline__ i64 row_owner(const T* s, i64 C, int vec, i64 j, i64 nthr) {
  constexpr int V = Vec16<T>::N;
  const i64 h = head_len(s, C, vec);
  if (j < h) return j % nthr;
  const i64 nv = (C - h) / V;
  if (j < h + nv * V) return ((j - h) / V) % nthr;
  return (j - h - nv * V) % nthr;
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

// A row's results from its log-sum-exp (mx, logsum; inf_row / nan_any: lse of a non-finite row, see
// ce_forward), its target logit xt_of(t) (read only for a target in [0, C)) and its smoothing sum acc:
// the per-row loss (+ the z-loss), lse and the z-loss, to loss_none / zloss_none (reduction none) or
// rows (double: loss, weight, z-loss, z-loss count; ce_loss_reduce reduces them). One thread per row.
template <class T, class XT>
__device__ __forceinline__ void row_result(i64 i, i64 t, const float* weight, i64 C, i64 ignore_index,
                                           double label_smoothing, double zscale, math_t<T> mx, math_t<T> logsum,
                                           bool inf_row, bool nan_any, math_t<T> acc, XT& xt_of, T* loss_none,
                                           double* rows, T* zloss_none, T* lse_out, i64 N) {
  typedef math_t<T> M;
  const bool smooth = label_smoothing != 0.0;
  const bool zl = zscale != 0.0;
  M loss, wt;
  const M lse = !inf_row ? mx + logsum : nan_any ? quiet_nan<M>() : mx;  // a NaN makes logsum NaN
  // z-loss of rows not ignored (CANN's ignoreMask: out-of-range targets included); absent, not
  // 0 * lse^2, when zscale == 0
  const M z = (zl && t != ignore_index) ? (M)zscale * lse * lse : M(0);
  if (t == ignore_index) {
    loss = M(0);
    wt = M(0);
  } else if (t < 0 || t >= C) {
    loss = quiet_nan<M>();
    wt = M(0);
  } else {
    wt = weight ? (M)weight[t] : M(1);
    const M lpt = (xt_of(t) - mx) - logsum;
    loss = -lpt * wt;
    if (smooth) loss = loss * (M)(1.0 - label_smoothing) + (M)(label_smoothing / (double)C) * (-acc);
  }
  if (lse_out) store(lse_out, i, lse);
  if (loss_none) {
    store(loss_none, i, zl ? loss + z : loss);  // reduced: ce_loss_reduce adds the reduced z-loss
    if (zloss_none) store(zloss_none, i, z);
  } else {
    rows[i] = (double)loss;
    rows[N + i] = (double)wt;
    if (zl) {
      rows[2 * N + i] = (double)z;
      rows[3 * N + i] = t != ignore_index ? 1.0 : 0.0;
    }
  }
}

// The split forward's chunk records (ce_forward_stats), in doubles so that one layout serves every
// math type (float -> double -> float is exact), field-major and row-fastest so that the finish's
// thread per row reads them coalesced: part[(f * S + k) * N + i] for field f of chunk k of row i
// (the chunk's online-softmax max and sum, 1 when it holds a NaN), then part[3 * S * N + i] the
// row's target logit (written by the chunk that holds it).
enum { kPartMax = 0, kPartSum = 1, kPartNan = 2, kPartFields = 3 };

// A split row's online-softmax state: its S chunk records merged by one warp in a fixed shape
// (lane l merges chunks l, l + 32, ... in order, then a butterfly: warp_maxsum), so about
// S / 32 + 5 dependent merges rather than S. Every warp of every block of ce_forward_write runs the
// same merge on the same values and holds the same bits; the (row, chunk 0) block stores them in
// row[] (kRow* fields, row-fastest) for ce_forward_finish, which merges nothing. Call from whole
// warps (blockDim.x a multiple of 32).
enum { kRowMax = 0, kRowSum = 1, kRowNan = 2, kRowFields = 3 };

template <class M>
__device__ __forceinline__ MaxSum<M> merge_parts(const double* part, i64 S, i64 N, i64 i, bool& nan_any) {
  MaxSum<M> st;
  st.max = neg_inf<M>();
  st.sum = M(0);
  bool nan_lane = false;
  for (i64 k = threadIdx.x % kWarp; k < S; k += kWarp) {
    MaxSum<M> r;
    r.max = (M)part[(kPartMax * S + k) * N + i];
    r.sum = (M)part[(kPartSum * S + k) * N + i];
    st = maxsum_merge(st, r);
    nan_lane |= part[(kPartNan * S + k) * N + i] != 0.0;
  }
  nan_any = __any_sync(kFullMask, nan_lane);
  return warp_maxsum(st);
}

// The reduced loss from rows (ce_forward / ce_forward_finish): reduction 1 mean (D == 0 -> sum * 0:
// 0, or NaN when a bad row is in), 2 sum; fixed-order double sums over a block of kReduceThreads.
// zl: rows holds the z-loss too; its mean divides by n = sum of rows[3N..4N), and it is added to the
// loss. zloss_out (may be null): the reduced z-loss (0 when !zl).
template <class T>
__device__ __forceinline__ void reduce_rows(const double* rows, i64 N, int reduction, T* out, int zl, T* zloss_out) {
  __shared__ double scratch[ce::kReduceThreads / kWarp];
  double s = 0.0, d = 0.0, zs = 0.0, n = 0.0;
  for (i64 i = threadIdx.x; i < N; i += blockDim.x) {
    s += rows[i];
    d += rows[N + i];
  }
  if (zl) {
    for (i64 i = threadIdx.x; i < N; i += blockDim.x) {
      zs += rows[2 * N + i];
      n += rows[3 * N + i];
    }
  }
  s = block_sum(s, scratch);
  d = block_sum(d, scratch);
  if (zl) {
    zs = block_sum(zs, scratch);
    n = block_sum(n, scratch);
  }
  if (threadIdx.x == 0) {
    double r = s;
    if (reduction == 1) r = d != 0.0 ? s / d : s * 0.0;
    double zr = zs;
    if (reduction == 1) zr = n != 0.0 ? zs / n : zs * 0.0;
    if (zl) r = r + zr;
    store(out, 0, (math_t<T>)r);
    if (zloss_out) store(zloss_out, 0, (math_t<T>)zr);
  }
}

}  // namespace ce
}  // namespace aclg

using namespace aclg;

// ------------------------------------------------------------------------------ D and W
// red[0] = D (need_d), red[1] = W (need_w); launch with one block of kReduceThreads threads.
template <class I>
__global__ void __launch_bounds__(ce::kReduceThreads)
ce_weight_sums(const I* target, const float* weight, double* red, long long N, long long C,
               long long ignore_index, int need_d, int need_w, int need_n) {
  __shared__ double scratch[ce::kReduceThreads / kWarp];
  double d = 0.0, w = 0.0, n = 0.0;
  if (need_d) {
    for (i64 i = threadIdx.x; i < N; i += blockDim.x) {
      const i64 t = (i64)target[i];
      if (t != ignore_index && t >= 0 && t < C) d += weight ? (double)weight[t] : 1.0;
      if (t != ignore_index) n += 1.0;  // CANN's sum(ignoreMask): out-of-range targets count
    }
  }
  if (need_w && weight) {
    for (i64 c = threadIdx.x; c < C; c += blockDim.x) w += (double)weight[c];
  }
  d = block_sum(d, scratch);
  w = block_sum(w, scratch);
  if (need_n) n = block_sum(n, scratch);
  if (threadIdx.x == 0) {
    red[0] = d;
    red[1] = weight ? w : (double)C;
    if (need_n) red[2] = n != 0.0 ? 1.0 / n : 0.0;  // divided here, once, not in every ce_grad thread
  }
}

// ------------------------------------------------------------------------------ gradient
// reduction: 0 none (grad_loss (N,)), 1 mean, 2 sum (grad_loss element 0). red: from
// ce_weight_sums (read only for mean, or label_smoothing != 0 with weights); may be null otherwise.
// z-loss when zscale != 0: lse (N,) the forward's lse, grad_zloss (shaped like grad_loss) or null;
// both unread when zscale == 0 (the z-loss terms are then absent, not multiplied by 0).
template <class T, class I>
__global__ void __launch_bounds__(256, ce::kGradMinBlocks<T>)
ce_grad(const T* grad_loss, const T* log_prob, const I* target, const float* weight, T* out,
        const double* red, const T* grad_zloss, const T* lse, long long N, long long C,
        long long ignore_index, int reduction, double label_smoothing, double zscale, long long group,
        int vec) {
  typedef math_t<T> M;
  const i64 gt = global_thread();
  const i64 lane = gt % group;
  const i64 ngroups = grid_threads() / group;
  const bool zl = zscale != 0.0;
  bool ce_off = false;  // "mean" with D == 0: no cross-entropy term (the z-loss term may remain)
  double inv_d = 1.0, inv_n = 1.0;
  if (reduction == 1) {
    const double D = red[0];
    if (D == 0.0) ce_off = true;  // every row ignored: zeros (docs/API.md §7)
    else inv_d = 1.0 / D;
    if (zl) inv_n = red[2];  // 1/n (ce_weight_sums)
  }
  const bool zero_all = ce_off && !zl;
  const M zs2 = (M)(2.0 * zscale);
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
    M z = M(0);  // z-loss: 2 * zscale * lse_i * zlossGrad_i (CANN's lseGrad), the factor of p
    if (zl) {
      M Gz = G;
      if (grad_zloss) Gz = Gz + load(grad_zloss, reduction == 0 ? i : 0);
      if (reduction == 1) Gz = Gz * (M)inv_n;
      z = zs2 * load(lse, i) * Gz;
    }
    if (reduction == 1) G = ce_off ? M(0) : G * (M)inv_d;
    const M wt = weight ? (M)weight[t] : M(1);
    const M b = G * one_m_ls * wt;  // nllg_i
    // without smoothing the smoothing terms are absent, not multiplied by 0: an infinite G or an
    // overflowing exp(lp) must not turn into 0 * inf = NaN (the z-loss terms alike)
    const M s = smooth ? G * ls_c : M(0);  // sm_i
    const M a0 = smooth ? b + s * W : b;
    const M a = zl ? a0 + z : a0;
    auto f = [&](i64 j, M l) -> M {
      const M p = ce::m_exp(l);
      if (!smooth) return a * p;
      const M wj = use_w ? (M)weight[j] : M(1);
      return a * p - s * wj;
    };
    ce::row_map(lp, o, C, vec, lane, group, f);
    // the target column, rewritten by the lane that wrote it above (program order: its value wins)
    if (lane == ce::row_owner(lp, C, vec, t, group)) {
      const M l = load(lp, t);
      const M p = ce::m_exp(l);
      // p - 1 kept in fp32; an infinite b takes PyTorch's log_softmax backward form, -b + p * b, which
      // is NaN there (b * expm1 would give an infinity)
      M c = is_finite(b) ? b * ce::m_expm1(l) : p * b - b;
      if (smooth) c = c + s * (p * W - (use_w ? (M)weight[t] : M(1)));
      if (zl) c = c + z * p;
      store(o, t, c);
    }
  }
}

// ------------------------------------------------------------------------------ forward
// One block per row (grid-stride). Writes log_prob; the per-row loss goes to loss_none (T, reduction
// none) or, when loss_none is null, to rows[i] (double) with the row's weight in rows[N + i].
// z-loss (zscale != 0): z_i = zscale * lse_i^2 for rows whose target != ignore_index, added to the
// row's loss; zloss_none (reduction none, may be null) receives z_i; with rows, rows[2N + i] = z_i
// and rows[3N + i] = 1 for a row that counts in the z-loss mean. lse_out (may be null): lse_i of
// every row. lse follows torch.logsumexp: +inf for a row holding +inf, -inf for an all -inf row,
// NaN for a row holding NaN.
template <class T, class I>
__global__ void __launch_bounds__(256)
ce_forward(const T* x, const I* target, const float* weight, T* log_prob, T* loss_none,
           double* rows, T* zloss_none, T* lse_out, long long N, long long C, long long ignore_index,
           double label_smoothing, double zscale, int vec) {
  typedef math_t<T> M;
  __shared__ M smax[32];
  __shared__ M ssum[32];
  const bool smooth = label_smoothing != 0.0;
  const bool zl = zscale != 0.0;
  const bool want_lse = zl || lse_out != nullptr;
  for (i64 i = blockIdx.x; i < N; i += gridDim.x) {
    const T* xr = x + i * C;
    T* lr = log_prob + i * C;
    MaxSum<M> st;
    st.max = neg_inf<M>();
    st.sum = M(0);
    bool nan_seen = false;  // lse of a row whose max is +inf: +inf, or NaN when it holds a NaN
    auto acc_max = [&](i64, M v) {
      st = maxsum_add(st, v);
      nan_seen |= v != v;
    };
    ce::row_read(xr, C, vec, threadIdx.x, blockDim.x, acc_max);
    st = ce::block_maxsum(st, smax, ssum);
    // lse of a row with an infinite max (torch.logsumexp): that max (+inf; -inf: every logit -inf),
    // or NaN when the row holds a NaN (st.sum is not NaN then under a +inf max: hence the block's
    // vote). Block-uniform: st is the same in every thread.
    const bool inf_row = !(st.max > neg_inf<M>() && st.max < pos_inf<M>());
    bool nan_any = false;
    if (want_lse && inf_row) nan_any = __syncthreads_or(nan_seen);
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
      auto xt_of = [&](i64 t) -> M { return load(xr, t); };
      ce::row_result<T>(i, (i64)target[i], weight, C, ignore_index, label_smoothing, zscale, mx, logsum, inf_row,
                        nan_any, acc, xt_of, loss_none, rows, zloss_none, lse_out, N);
    }
  }
}

// ------------------------------------------------------------------------------ forward, split rows
// Few long rows (host: launch.forward_split): each row is cut into S chunks of `chunk` elements (the
// last one shorter), one block per (row, chunk) unit u = i * S + k, in three launches on one stream:
//   ce_forward_stats   the chunk's online-softmax state and NaN vote -> part (ce::merge_parts' layout),
//                      and the target logit from the chunk that holds it;
//   ce_forward_write   merges the row's S records (ce::merge_parts: one warp, fixed shape), writes the
//                      chunk's logProb and (label smoothing) its sum of w_c * lp_c -> acc[u]; the
//                      row's chunk-0 block also stores the merged state -> row (ce::kRow*);
//   ce_forward_finish  one thread per row: that stored state, acc summed in chunk order, then the row's
//                      results as ce_forward's (ce::row_result); for mean / sum one block of
//                      kReduceThreads that then reduces them as ce_loss_reduce does.
// Fixed-order combines, no atomics: the bits depend on (N, C, S) and the alignment only.
template <class T, class I>
__global__ void __launch_bounds__(256)
ce_forward_stats(const T* x, const I* target, double* part, long long N, long long C, long long S,
                 long long chunk, int vec) {
  typedef math_t<T> M;
  __shared__ M smax[32];
  __shared__ M ssum[32];
  for (i64 u = blockIdx.x; u < N * S; u += gridDim.x) {
    const i64 i = u / S, c0 = (u % S) * chunk;
    const i64 len = C - c0 < chunk ? C - c0 : chunk;
    const T* xr = x + i * C + c0;
    MaxSum<M> st;
    st.max = neg_inf<M>();
    st.sum = M(0);
    bool nan_seen = false;
    auto acc_max = [&](i64, M v) {
      st = maxsum_add(st, v);
      nan_seen |= v != v;
    };
    ce::row_read(xr, len, vec, threadIdx.x, blockDim.x, acc_max);
    st = ce::block_maxsum(st, smax, ssum);
    const bool nan_any = __syncthreads_or(nan_seen);
    if (threadIdx.x == 0) {
      const i64 k = u % S;
      part[(ce::kPartMax * S + k) * N + i] = (double)st.max;
      part[(ce::kPartSum * S + k) * N + i] = (double)st.sum;
      part[(ce::kPartNan * S + k) * N + i] = nan_any ? 1.0 : 0.0;
      const i64 t = (i64)target[i];
      if (t >= c0 && t < c0 + len) part[ce::kPartFields * S * N + i] = (double)load(xr, t - c0);
    }
  }
}

template <class T, class I>
__global__ void __launch_bounds__(256)
ce_forward_write(const T* x, const float* weight, T* log_prob, const double* part, double* acc_out,
                 double* row, long long N, long long C, long long S, long long chunk, double label_smoothing, int vec) {
  typedef math_t<T> M;
  __shared__ M scratch[32];
  const bool smooth = label_smoothing != 0.0;
  for (i64 u = blockIdx.x; u < N * S; u += gridDim.x) {
    const i64 i = u / S, c0 = (u % S) * chunk;
    const i64 len = C - c0 < chunk ? C - c0 : chunk;
    bool nan_any;
    const MaxSum<M> st = ce::merge_parts<M>(part, S, N, i, nan_any);
    if (u % S == 0 && threadIdx.x == 0) {   // the row's merged state, for ce_forward_finish
      row[ce::kRowMax * N + i] = (double)st.max;
      row[ce::kRowSum * N + i] = (double)st.sum;
      row[ce::kRowNan * N + i] = nan_any ? 1.0 : 0.0;
    }
    const M mx = st.max, logsum = ce::m_log(st.sum) + (mx - mx);  // as ce_forward
    M acc = M(0);
    auto write_lp = [&](i64 j, M v) -> M {
      const M l = (v - mx) - logsum;
      if (smooth) acc += (weight ? (M)weight[c0 + j] : M(1)) * l;
      return l;
    };
    ce::row_map(x + i * C + c0, log_prob + i * C + c0, len, vec, threadIdx.x, blockDim.x, write_lp);
    if (smooth) {
      acc = block_sum(acc, scratch);
      if (threadIdx.x == 0) acc_out[(u % S) * N + i] = (double)acc;   // row-fastest, as part
    }
  }
}

template <class T, class I>
__global__ void __launch_bounds__(256)
ce_forward_finish(const I* target, const float* weight, const double* part, const double* acc_in,
                  const double* row, T* loss_none,
                  double* rows, T* zloss_none, T* lse_out, long long N, long long C, long long S,
                  long long ignore_index, double label_smoothing, double zscale, int reduction, T* loss_out,
                  T* zloss_out) {
  typedef math_t<T> M;
  for (i64 i = global_thread(); i < N; i += grid_threads()) {
    // ce_forward_write's merged state (float -> double -> float is exact): the same bits as its blocks
    MaxSum<M> st;
    st.max = (M)row[ce::kRowMax * N + i];
    st.sum = (M)row[ce::kRowSum * N + i];
    const M mx = st.max, logsum = ce::m_log(st.sum) + (mx - mx);
    const bool inf_row = !(st.max > neg_inf<M>() && st.max < pos_inf<M>());
    M acc = M(0);
    if (label_smoothing != 0.0) {
      for (i64 k = 0; k < S; ++k) acc += (M)acc_in[k * N + i];
    }
    const bool nan_any = row[ce::kRowNan * N + i] != 0.0;   // (read after the log: no spill on sm_80)
    auto xt_of = [&](i64) -> M { return (M)part[ce::kPartFields * S * N + i]; };
    ce::row_result<T>(i, (i64)target[i], weight, C, ignore_index, label_smoothing, zscale, mx, logsum, inf_row,
                      nan_any, acc, xt_of, loss_none, rows, zloss_none, lse_out, N);
  }
  if (reduction != 0) {   // one block: its rows[] stores are visible to the block after the barrier
    __syncthreads();
    ce::reduce_rows<T>(rows, N, reduction, loss_out, zscale != 0.0, zloss_out);
  }
}

// reduction 1 mean (D == 0 -> sum * 0: 0, or NaN when a bad row is in), 2 sum. One block of
// kReduceThreads (ce::reduce_rows).
template <class T>
__global__ void __launch_bounds__(ce::kReduceThreads)
ce_loss_reduce(const double* rows, long long N, int reduction, T* out, int zl, T* zloss_out) {
  ce::reduce_rows<T>(rows, N, reduction, out, zl, zloss_out);
}
