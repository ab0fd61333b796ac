// ctc_loss.cu -- CTC loss forward (alpha recursion) and backward (dense pass + beta recursion).
//
// Layouts: log_probs / out (T, N, C) contiguous; log_alpha (N, T, X); grad_out, nll (N,).
// Targets: 1-D concatenated (tgt_stride == 0, sample b starts at tiling offset) or 2-D padded
// (row stride tgt_stride, offset b * tgt_stride). Tiling (int64, workspace head), per sample b:
//   tiling[3b] = input length Lin, tiling[3b+1] = target length L, tiling[3b+2] = target offset.
// Nothing is trusted: lengths are clamped/validated against T, max_l and the target extent; a label
// outside [0, C) is never used as an index and turns the whole sample NaN.
//
// Backward = ctc_dense (every element: exp(lp) * g, rows t >= Lin and zero-infinity samples 0)
// followed, on the same stream, by ctc_beta (per sample: the beta recursion; beta lives in
// registers, PER consecutive states per thread, neighbours via warp shuffles and a 3-value
// boundary slot per warp in shared memory; one __syncthreads per time step). The blank and label
// columns of rows t < Lin are then overwritten with (exp(lp) - occupancy) * g, where
// occupancy(t, c) = sum over states s with l'(s) == c of exp(alpha + beta - lp + nll), summed in a
// fixed order (blank: per-warp butterfly partials, then warps in order; a label: its occurrences
// in target order, walked by the thread owning the first occurrence). No atomics.
//
// Forward = ctc_alpha: the same design for alpha (neighbours s-1, s-2), writing the whole
// (T, X) slice of log_alpha (-inf where unreachable) and the loss.
#include "common.cuh"

namespace aclg {
namespace ctc {

// Max states per thread (registers under __launch_bounds__(512), i.e. <= 128 registers, no spills):
// S = 2*maxL+1 <= kPerOf<M> * 512, i.e. 4096 states for fp32 math and 2560 (maxL <= 1279) for fp64.
template <class M> struct PerOf { static constexpr int value = sizeof(M) == 8 ? 5 : 8; };
constexpr int kMaxWarps = 16;

template <class M> __device__ __forceinline__ M lse3(M a, M b, M c) {
  M m = a > b ? a : b;
  m = m > c ? m : c;
  if (m == neg_inf<M>()) m = M(0);
  return log(exp(a - m) + exp(b - m) + exp(c - m)) + m;
}

template <class M> __device__ __forceinline__ bool is_finite(M x) {
  return x == x && x != pos_inf<M>() && x != neg_inf<M>();
}

// Shared-memory layout shared by ctc_alpha / ctc_beta (host: shared_bytes()).
template <class M> struct Smem {
  M* bnd;    // [2][kMaxWarps + 1][3] warp boundary values of the previous step
  M* bpart;  // [2][kMaxWarps] per-warp blank occupancy partials (backward)
  M* fin;    // [2] alpha at (Lin-1, 2L) and (Lin-1, 2L-1) (forward)
  M* occ;    // [2][max_l] occupancy of odd states (backward)
  int* lab;  // [max_l] labels (0 where invalid)
  int* nxt;  // [max_l] next occurrence of the same label, -1 at the end
  int* fst;  // [max_l] 1 where k is the first occurrence of its label
  int* misc; // [4] bad flag, first occurrence of a label equal to blank
};

template <class M> __device__ __forceinline__ Smem<M> carve(unsigned char* base, long long max_l) {
  Smem<M> s;
  M* m = reinterpret_cast<M*>(base);
  s.bnd = m;
  m += 2 * (kMaxWarps + 1) * 3;
  s.bpart = m;
  m += 2 * kMaxWarps;
  s.fin = m;
  m += 2;
  s.occ = m;
  m += 2 * max_l;
  int* p = reinterpret_cast<int*>(m);
  s.lab = p;
  p += max_l;
  s.nxt = p;
  p += max_l;
  s.fst = p;
  p += max_l;
  s.misc = p;
  return s;
}

struct Sample {
  long long lin, L, off;
  bool bad;
};

// Reads the sample's tiling row and labels into shared memory; returns bad when anything is out of
// range (then nothing else of the sample may be trusted). Ends with a barrier.
template <class I>
__device__ __forceinline__ Sample load_sample(const long long* tiling, const I* targets, long long b,
                                             long long T, long long C, long long max_l, long long tgt_numel,
                                             long long tgt_stride, long long X, long long blank, long long states_cap,
                                             int* lab, int* misc) {
  Sample sp;
  sp.lin = tiling[3 * b];
  sp.L = tiling[3 * b + 1];
  sp.off = tgt_stride > 0 ? b * tgt_stride : tiling[3 * b + 2];
  bool bad = sp.lin < 0 || sp.lin > T || sp.L < 0 || sp.L > max_l || 2 * sp.L + 1 > states_cap ||
             2 * sp.L + 1 > X || blank < 0 || blank >= C ||
             sp.off < 0 || sp.off > tgt_numel || sp.L > tgt_numel - sp.off ||
             (tgt_stride > 0 && sp.L > tgt_stride);
  if (threadIdx.x == 0) {
    misc[0] = bad ? 1 : 0;
    misc[1] = -1;
  }
  __syncthreads();
  if (!bad) {
    for (long long k = threadIdx.x; k < sp.L; k += blockDim.x) {
      const long long v = (long long)targets[sp.off + k];
      const bool ok = v >= 0 && v < C;
      lab[k] = ok ? (int)v : 0;
      if (!ok) misc[0] = 1;  // benign race: every writer stores 1
    }
  }
  __syncthreads();
  sp.bad = misc[0] != 0;
  if (sp.lin > T) sp.lin = T;
  if (sp.lin < 0) sp.lin = 0;
  return sp;
}


// A sample whose tiling row or labels are out of range: its whole (T, C) gradient slice is NaN.
template <class T>
__device__ __forceinline__ void poison_sample(T* out, long long b, long long Tn, long long N, long long C) {
  for (long long i = threadIdx.x; i < Tn * C; i += blockDim.x) {
    const long long t = i / C;
    store(out, (t * N + b) * C + (i - t * C), quiet_nan<math_t<T>>());
  }
}

// Next-occurrence chains of the labels (the fixed order in which a label's occupancies are summed):
// fst[k] = 1 where k is the first occurrence of its label, nxt[k] the next one (-1 at the end), and
// misc[1] the first occurrence of a label equal to blank. The caller synchronises before reading.
__device__ __forceinline__ void build_chains(const int* lab, int* fst, int* nxt, int* misc, long long L,
                                             long long blank) {
  for (long long k = threadIdx.x; k < L; k += blockDim.x) {
    const int c = lab[k];
    long long j = k - 1;
    while (j >= 0 && lab[j] != c) --j;
    fst[k] = j < 0;
    j = k + 1;
    while (j < L && lab[j] != c) ++j;
    nxt[k] = j < L ? (int)j : -1;
    if (c == blank && fst[k]) misc[1] = (int)k;   // unique writer
  }
}

// The blank and label columns of one row (offset `row` = (t * N + b) * C) from the step's
// occupancies: occ[k] of odd state 2k+1, bpart[w] the per-warp blank partials (summed in warp order).
// Item L = blank, item k < L = label k when it is the label's first occurrence and not blank.
template <class T, class M>
__device__ __forceinline__ void write_columns(const T* lp, T* out, const M* occ, const M* bpart, int warps,
                                              const int* lab, const int* fst, const int* nxt, int blank_first,
                                              long long L, long long blank, long long row, bool nll_fin, M nll,
                                              M g) {
  for (long long k = threadIdx.x; k <= L; k += blockDim.x) {
    long long c;
    M sum = M(0);
    int j;
    if (k == L) {
      c = blank;
      for (int w = 0; w < warps; ++w) sum += bpart[w];
      j = blank_first;
    } else {
      c = lab[k];
      if (!fst[k] || c == blank) continue;
      j = (int)k;
    }
    for (; j >= 0; j = nxt[j]) sum += occ[j];
    const M x = load(lp, row + c);
    const M term = nll_fin ? sum : exp(log(sum) + nll);
    store(out, row + c, (exp(x) - term) * g);
  }
}

}  // namespace ctc

// PyTorch's exp(lcab + nll - lp) at a column without states is exp(-inf + nll): NaN when nll is
// +inf or NaN, else 0. Returns the factor (1 or NaN) the dense value is multiplied by.
template <class M> __device__ __forceinline__ M nan_if(M nll) {
  return (nll == pos_inf<M>() || nll != nll) ? quiet_nan<M>() : M(1);
}

// PyTorch's value at a column without states, exp(lp) - exp(-inf + nll - lp), times g: NaN where lp is
// -inf (-inf - -inf), else exp(lp) * g (g carries nan_if(nll)).
template <class M> __device__ __forceinline__ M dense_grad(M lp, M g) {
  return lp == neg_inf<M>() ? quiet_nan<M>() : exp(lp) * g;
}

// ------------------------------------------------------------------------------ dense pass
// out = exp(lp) * g (NaN where lp = -inf) for t < Lin, 0 for t >= Lin or (zero_inf and nll == +inf). vec != 0: the host
// checked that C is a multiple of 16/sizeof(T) and that lp and out are 16-byte aligned.
template <class T>
__global__ void ctc_dense(const T* __restrict__ lp, const T* __restrict__ grad_out, const T* __restrict__ nll,
                          T* __restrict__ out, const long long* __restrict__ tiling, long long Tn, long long N,
                          long long C, int zero_inf, int vec) {
  typedef math_t<T> M;
  if (vec) {
    constexpr int V = Vec16<T>::N;
    const long long cv = C / V, total = Tn * N * cv;
    for (long long p = global_thread(); p < total; p += grid_threads()) {
      const long long row = p / cv, t = row / N, n = row - t * N;
      const M nl = load(nll, n);
      const bool zero = t >= tiling[3 * n] || (zero_inf && nl == pos_inf<M>());
      const M g = load(grad_out, n) * nan_if(nl);
      Vec16<T> x = load16(lp, p);
#pragma unroll
      for (int j = 0; j < V; ++j) x.v[j] = from_math<T>(zero ? M(0) : dense_grad(to_math(x.v[j]), g));
      store16(out, p, x);
    }
  } else {
    const long long total = Tn * N * C;
    for (long long i = global_thread(); i < total; i += grid_threads()) {
      const long long row = i / C, t = row / N, n = row - t * N;
      const M nl = load(nll, n);
      const bool zero = t >= tiling[3 * n] || (zero_inf && nl == pos_inf<M>());
      store(out, i, zero ? M(0) : dense_grad(load(lp, i), load(grad_out, n) * nan_if(nl)));
    }
  }
}

// ------------------------------------------------------------------------------ backward: beta
template <class T, class I>
__global__ void __launch_bounds__(512) ctc_beta(const T* __restrict__ lp, const T* __restrict__ grad_out, const T* __restrict__ nll_in,
                         const T* __restrict__ log_alpha, const I* __restrict__ targets, T* __restrict__ out,
                         const long long* __restrict__ tiling, long long Tn, long long N, long long C, long long X,
                         long long blank, long long max_l, long long tgt_numel, long long tgt_stride, int zero_inf,
                         int per) {
  typedef math_t<T> M;
  using namespace ctc;
  constexpr int kPer = PerOf<M>::value;
  extern __shared__ __align__(16) unsigned char ctc_smem[];
  const Smem<M> sm = carve<M>(ctc_smem, max_l);
  const int tid = threadIdx.x, lane = tid % kWarp, warp = tid / kWarp, warps = blockDim.x / kWarp;
  const int cap = per * (int)blockDim.x;
  const M NINF = neg_inf<M>();

  for (long long b = blockIdx.x; b < N; b += gridDim.x) {
    __syncthreads();  // the previous sample's readers are done with shared memory
    const M nll = load(nll_in, b);
    if (zero_inf && nll == pos_inf<M>()) continue;     // ctc_dense wrote the zero slice
    const Sample sp = load_sample<I>(tiling, targets, b, Tn, C, max_l, tgt_numel, tgt_stride,
                                     X, blank, cap, sm.lab, sm.misc);
    if (sp.bad) {
      poison_sample(out, b, Tn, N, C);
      continue;
    }
    const long long L = sp.L, lin = sp.lin, S = 2 * L + 1;
    if (lin == 0) continue;
    build_chains(sm.lab, sm.fst, sm.nxt, sm.misc, L, blank);
    for (int i = tid; i < 2 * (kMaxWarps + 1) * 3; i += blockDim.x) sm.bnd[i] = NINF;
    __syncthreads();
    const int blank_first = sm.misc[1];
    const bool nll_fin = is_finite(nll);
    const M shift = nll_fin ? nll : M(0);
    const M g = load(grad_out, b);
    const bool drop_2l = L > 0 && sm.lab[L - 1] == blank;
    // per-thread states s0 .. s0+per-1, labels and transitions
    const long long s0 = (long long)tid * per;
    int lab_s[kPer];
    bool skip_s[kPer];   // s <- s+2 allowed
    M beta[kPer], a_nx[kPer], l_nx[kPer];
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const long long s = s0 + i;
      const bool in = i < per && s < S;
      lab_s[i] = (in && (s & 1)) ? sm.lab[s >> 1] : (int)blank;
      skip_s[i] = in && (s & 1) && s + 2 < S && sm.lab[(s >> 1) + 1] != sm.lab[s >> 1];
      beta[i] = NINF;
      a_nx[i] = NINF;
      l_nx[i] = NINF;
      if (in) {
        a_nx[i] = load(log_alpha, (b * Tn + (lin - 1)) * X + s);
        l_nx[i] = load(lp, ((lin - 1) * N + b) * C + lab_s[i]);
      }
    }
    for (long long t = lin - 1; t >= 0; --t) {
      const int buf = (int)(t & 1), pbuf = buf ^ 1;
      M a[kPer], l[kPer];
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        a[i] = a_nx[i];
        l[i] = l_nx[i];
      }
      if (t > 0) {   // prefetch the next step's alpha and log-probs
#pragma unroll
        for (int i = 0; i < kPer; ++i) {
          const long long s = s0 + i;
          if (i < per && s < S) {
            a_nx[i] = load(log_alpha, (b * Tn + (t - 1)) * X + s);
            l_nx[i] = load(lp, ((t - 1) * N + b) * C + lab_s[i]);
          }
        }
      }
      // neighbours s0+per and s0+per+1 at t+1
      const M v0 = __shfl_down_sync(kFullMask, beta[0], 1);
      const M v1 = __shfl_down_sync(kFullMask, per >= 2 ? beta[1] : beta[0], per >= 2 ? 1 : 2);
      const M* nb = sm.bnd + (pbuf * (kMaxWarps + 1) + warp + 1) * 3;   // next warp's lanes 0/1
      const M e0 = lane == kWarp - 1 ? nb[0] : v0;
      const M e1 = per >= 2 ? (lane == kWarp - 1 ? nb[1] : v1)
                            : (lane == kWarp - 1 ? nb[2] : (lane == kWarp - 2 ? nb[0] : v1));
      if (t == lin - 1) {
#pragma unroll
        for (int i = 0; i < kPer; ++i) {
          const long long s = s0 + i;
          beta[i] = (i < per && s < S && s >= 2 * L - 1) ? l[i] : NINF;
        }
      } else {
#pragma unroll
        for (int i = 0; i < kPer; ++i) {   // ascending, in place: uses old beta[i+1], beta[i+2]
          const long long s = s0 + i;
          const M n1 = i + 1 < kPer ? (i + 1 < per ? beta[i + 1 < kPer ? i + 1 : 0] : (i + 1 == per ? e0 : e1)) : e0;
          const M n2 = i + 2 < kPer ? (i + 2 < per ? beta[i + 2 < kPer ? i + 2 : 0] : (i + 2 == per ? e0 : e1))
                                    : (i + 2 == per ? e0 : e1);
          const M r = lse3(beta[i], s + 1 < S ? n1 : NINF, skip_s[i] ? n2 : NINF) + l[i];
          beta[i] = (i < per && s < S) ? r : NINF;
        }
      }
      if (lane < 2) {
        M* mine = sm.bnd + (buf * (kMaxWarps + 1) + warp) * 3;
        if (lane == 0) {
          mine[0] = beta[0];
          mine[1] = beta[1];
        } else {
          mine[2] = beta[0];
        }
      }
      // occupancies
      M part = M(0);
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        const long long s = s0 + i;
        if (i < per && s < S) {
          M e = exp(a[i] + beta[i] - l[i] + shift);
          if (t == lin - 1 && drop_2l && s == 2 * L) e = M(0);
          if (s & 1) sm.occ[buf * max_l + (s >> 1)] = e;
          else part += e;
        }
      }
      part = warp_sum(part);
      if (lane == 0) sm.bpart[buf * kMaxWarps + warp] = part;
      __syncthreads();
      write_columns(lp, out, sm.occ + buf * max_l, sm.bpart + buf * kMaxWarps, warps, sm.lab, sm.fst, sm.nxt,
                    blank_first, L, blank, (t * N + b) * C, nll_fin, nll, g);
    }
  }
}

// ------------------------------------------------------------------------------ forward: alpha
template <class T, class I>
__global__ void __launch_bounds__(512) ctc_alpha(const T* __restrict__ lp, const I* __restrict__ targets, T* __restrict__ nll_out,
                          T* __restrict__ log_alpha, const long long* __restrict__ tiling, long long Tn, long long N,
                          long long C, long long X, long long blank, long long max_l, long long tgt_numel,
                          long long tgt_stride, int zero_inf, int per) {
  typedef math_t<T> M;
  using namespace ctc;
  constexpr int kPer = PerOf<M>::value;
  extern __shared__ __align__(16) unsigned char ctc_smem[];
  const Smem<M> sm = carve<M>(ctc_smem, max_l);
  const int tid = threadIdx.x, lane = tid % kWarp, warp = tid / kWarp;
  const int cap = per * (int)blockDim.x;
  const M NINF = neg_inf<M>();

  for (long long b = blockIdx.x; b < N; b += gridDim.x) {
    __syncthreads();
    const Sample sp = load_sample<I>(tiling, targets, b, Tn, C, max_l, tgt_numel, tgt_stride,
                                     X, blank, cap, sm.lab, sm.misc);
    T* la = log_alpha + b * Tn * X;
    if (sp.bad) {
      for (long long i = tid; i < Tn * X; i += blockDim.x) store(la, i, quiet_nan<M>());
      if (tid == 0) store(nll_out, b, quiet_nan<M>());
      continue;
    }
    const long long L = sp.L, lin = sp.lin, S = 2 * L + 1;
    for (int i = tid; i < 2 * (kMaxWarps + 1) * 3; i += blockDim.x) sm.bnd[i] = NINF;
    if (tid == 0) {
      sm.fin[0] = NINF;
      sm.fin[1] = NINF;
    }
    __syncthreads();
    const long long s0 = (long long)tid * per;
    int lab_s[kPer];
    bool skip_s[kPer];   // s-2 -> s allowed
    M alpha[kPer], l_nx[kPer];
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const long long s = s0 + i;
      const bool in = i < per && s < S;
      lab_s[i] = (in && (s & 1)) ? sm.lab[s >> 1] : (int)blank;
      skip_s[i] = in && (s & 1) && s >= 3 && sm.lab[s >> 1] != sm.lab[(s >> 1) - 1];
      alpha[i] = NINF;
      l_nx[i] = (in && lin > 0) ? load(lp, b * C + lab_s[i]) : NINF;
    }
    for (long long t = 0; t < lin; ++t) {
      const int buf = (int)(t & 1), pbuf = buf ^ 1;
      M l[kPer];
#pragma unroll
      for (int i = 0; i < kPer; ++i) l[i] = l_nx[i];
      if (t + 1 < lin) {
#pragma unroll
        for (int i = 0; i < kPer; ++i) {
          const long long s = s0 + i;
          if (i < per && s < S) l_nx[i] = load(lp, ((t + 1) * N + b) * C + lab_s[i]);
        }
      }
      // previous states s0-1 and s0-2 at t-1
      M last = alpha[0], last2 = NINF;
#pragma unroll
      for (int i = 1; i < kPer; ++i)
        if (i == per - 1) {
          last = alpha[i];
          last2 = alpha[i - 1];
        }
      const M v0 = __shfl_up_sync(kFullMask, last, 1);
      const M v1 = __shfl_up_sync(kFullMask, per >= 2 ? last2 : last, per >= 2 ? 1 : 2);
      const M* pb = sm.bnd + (pbuf * (kMaxWarps + 1) + warp) * 3;   // previous warp's lanes 31/30
      const M p0 = lane == 0 ? pb[0] : v0;
      const M p1 = per >= 2 ? (lane == 0 ? pb[1] : v1) : (lane == 0 ? pb[2] : (lane == 1 ? pb[0] : v1));
      if (t == 0) {
#pragma unroll
        for (int i = 0; i < kPer; ++i) {
          const long long s = s0 + i;
          alpha[i] = (i < per && s < S && s <= 1) ? l[i] : NINF;
        }
      } else {
#pragma unroll
        for (int i = kPer - 1; i >= 0; --i) {   // descending, in place: uses old alpha[i-1], alpha[i-2]
          const long long s = s0 + i;
          const M n1 = i >= 1 ? alpha[i >= 1 ? i - 1 : 0] : p0;
          const M n2 = i >= 2 ? alpha[i >= 2 ? i - 2 : 0] : (i == 1 ? p0 : p1);
          const M r = lse3(alpha[i], n1, skip_s[i] ? n2 : NINF) + l[i];
          alpha[i] = (i < per && s < S) ? r : NINF;
        }
      }
      M last_n = alpha[0], last2_n = NINF;
#pragma unroll
      for (int i = 1; i < kPer; ++i)
        if (i == per - 1) {
          last_n = alpha[i];
          last2_n = alpha[i - 1];
        }
      if (lane >= kWarp - 2) {
        M* mine = sm.bnd + (buf * (kMaxWarps + 1) + warp + 1) * 3;
        if (lane == kWarp - 1) {
          mine[0] = last_n;
          mine[1] = last2_n;
        } else {
          mine[2] = last_n;
        }
      }
      T* row = la + t * X;
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        const long long s = s0 + i;
        if (i < per && s < X) store(row, s, alpha[i]);
        if (t == lin - 1 && i < per && (s == 2 * L || s == 2 * L - 1)) sm.fin[s == 2 * L ? 0 : 1] = alpha[i];
      }
      for (long long s = cap + tid; s < X; s += blockDim.x) store(row, s, NINF);
      __syncthreads();
    }
    for (long long i = lin * X + tid; i < Tn * X; i += blockDim.x) store(la, i, NINF);
    if (tid == 0) {
      M nll;
      if (lin == 0) {
        nll = L == 0 ? M(0) : pos_inf<M>();
      } else {
        const M l1 = sm.fin[0], l2 = sm.fin[1];
        M m = l1 > l2 ? l1 : l2;
        if (m == NINF) m = M(0);
        nll = -(log(exp(l1 - m) + exp(l2 - m)) + m);
      }
      if (zero_inf && nll == pos_inf<M>()) nll = M(0);
      store(nll_out, b, nll);
    }
  }
}


// ------------------------------------------------------------------------------ long targets
// Targets beyond the register recursion (2*maxL+1 > PerOf<M> * 512 states, or per-label tables over
// 48 KiB of shared memory): the same recursions with alpha/beta, occupancies and label tables in a
// per-block slot of the workspace (ctc::LongSlot, host: launch.long_slot_bytes), states strided over
// the block, one __syncthreads per time step (it orders the slot's global writes for the whole
// block). Every state is computed by the same lse3 with the same operands as on the short path, so
// log_alpha, the loss, beta and the label columns are bit-identical to it; only the blank column's
// sum runs in another order (per thread over its strided states, warp butterfly, warps in order).
namespace ctc {
constexpr int kLongThreads = 512;   // host: launch.MAX_THREADS

template <class M> struct LongSlot {
  M* rec;    // [2][2*max_l+1] alpha or beta at the previous / current step (math precision)
  M* occ;    // [2][max_l] occupancy of odd states (backward)
  int* lab;  // [max_l]
  int* nxt;  // [max_l]
  int* fst;  // [max_l]
};

template <class M>
__device__ __forceinline__ LongSlot<M> long_slot(unsigned char* scratch, long long slot_bytes, long long max_l) {
  LongSlot<M> ls;
  M* m = reinterpret_cast<M*>(scratch + (long long)blockIdx.x * slot_bytes);
  ls.rec = m;
  m += 2 * (2 * max_l + 1);
  ls.occ = m;
  m += 2 * max_l;
  int* p = reinterpret_cast<int*>(m);
  ls.lab = p;
  ls.nxt = p + max_l;
  ls.fst = p + 2 * max_l;
  return ls;
}
}  // namespace ctc

template <class T, class I>
__global__ void __launch_bounds__(ctc::kLongThreads, 1) ctc_alpha_long(const T* __restrict__ lp, const I* __restrict__ targets,
                          T* __restrict__ nll_out, T* __restrict__ log_alpha, const long long* __restrict__ tiling,
                          long long Tn, long long N, long long C, long long X, long long blank, long long max_l,
                          long long tgt_numel, long long tgt_stride, int zero_inf, unsigned char* scratch,
                          long long slot_bytes) {
  typedef math_t<T> M;
  using namespace ctc;
  __shared__ int misc[4];
  const LongSlot<M> ls = long_slot<M>(scratch, slot_bytes, max_l);
  const long long tid = threadIdx.x, width = 2 * max_l + 1;
  const M NINF = neg_inf<M>();

  for (long long b = blockIdx.x; b < N; b += gridDim.x) {
    __syncthreads();
    const Sample sp = load_sample<I>(tiling, targets, b, Tn, C, max_l, tgt_numel, tgt_stride, X, blank, width,
                                     ls.lab, misc);
    T* la = log_alpha + b * Tn * X;
    if (sp.bad) {
      for (long long i = tid; i < Tn * X; i += blockDim.x) store(la, i, quiet_nan<M>());
      if (tid == 0) store(nll_out, b, quiet_nan<M>());
      continue;
    }
    const long long L = sp.L, lin = sp.lin, S = 2 * L + 1;
    for (long long t = 0; t < lin; ++t) {
      M* cur = ls.rec + (t & 1) * width;
      const M* prev = ls.rec + ((t & 1) ^ 1) * width;
      T* row = la + t * X;
      for (long long s = tid; s < S; s += blockDim.x) {
        const int k = (int)(s >> 1);
        const long long c = (s & 1) ? ls.lab[k] : blank;
        const M l = load(lp, (t * N + b) * C + c);
        M r;
        if (t == 0) {
          r = s <= 1 ? l : NINF;
        } else {
          const bool skip = (s & 1) && s >= 3 && ls.lab[k] != ls.lab[k - 1];
          r = lse3(prev[s], s >= 1 ? prev[s - 1] : NINF, skip ? prev[s - 2] : NINF) + l;
        }
        cur[s] = r;
        store(row, s, r);
      }
      for (long long s = S + tid; s < X; s += blockDim.x) store(row, s, NINF);
      __syncthreads();
    }
    for (long long i = lin * X + tid; i < Tn * X; i += blockDim.x) store(la, i, NINF);
    if (tid == 0) {
      M nll;
      if (lin == 0) {
        nll = L == 0 ? M(0) : pos_inf<M>();
      } else {
        const M* fin = ls.rec + ((lin - 1) & 1) * width;
        const M l1 = fin[2 * L], l2 = L > 0 ? fin[2 * L - 1] : NINF;
        M m = l1 > l2 ? l1 : l2;
        if (m == NINF) m = M(0);
        nll = -(log(exp(l1 - m) + exp(l2 - m)) + m);
      }
      if (zero_inf && nll == pos_inf<M>()) nll = M(0);
      store(nll_out, b, nll);
    }
  }
}

template <class T, class I>
__global__ void __launch_bounds__(ctc::kLongThreads, 1) ctc_beta_long(const T* __restrict__ lp, const T* __restrict__ grad_out,
                         const T* __restrict__ nll_in, const T* __restrict__ log_alpha,
                         const I* __restrict__ targets, T* __restrict__ out, const long long* __restrict__ tiling,
                         long long Tn, long long N, long long C, long long X, long long blank, long long max_l,
                         long long tgt_numel, long long tgt_stride, int zero_inf, unsigned char* scratch,
                         long long slot_bytes) {
  typedef math_t<T> M;
  using namespace ctc;
  __shared__ int misc[4];
  __shared__ M bpart[2][kMaxWarps];
  const LongSlot<M> ls = long_slot<M>(scratch, slot_bytes, max_l);
  const long long tid = threadIdx.x, width = 2 * max_l + 1;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  const M NINF = neg_inf<M>();

  for (long long b = blockIdx.x; b < N; b += gridDim.x) {
    __syncthreads();
    const M nll = load(nll_in, b);
    if (zero_inf && nll == pos_inf<M>()) continue;     // ctc_dense wrote the zero slice
    const Sample sp = load_sample<I>(tiling, targets, b, Tn, C, max_l, tgt_numel, tgt_stride, X, blank, width,
                                     ls.lab, misc);
    if (sp.bad) {
      poison_sample(out, b, Tn, N, C);
      continue;
    }
    const long long L = sp.L, lin = sp.lin, S = 2 * L + 1;
    if (lin == 0) continue;
    build_chains(ls.lab, ls.fst, ls.nxt, misc, L, blank);
    __syncthreads();
    const int blank_first = misc[1];
    const bool nll_fin = is_finite(nll);
    const M shift = nll_fin ? nll : M(0);
    const M g = load(grad_out, b);
    const bool drop_2l = L > 0 && ls.lab[L - 1] == blank;
    for (long long t = lin - 1; t >= 0; --t) {
      const int buf = (int)(t & 1);
      M* cur = ls.rec + buf * width;
      const M* later = ls.rec + (buf ^ 1) * width;   // beta at t+1
      M* occ = ls.occ + buf * max_l;
      M part = M(0);
      for (long long s = tid; s < S; s += blockDim.x) {
        const int k = (int)(s >> 1);
        const long long c = (s & 1) ? ls.lab[k] : blank;
        const M l = load(lp, (t * N + b) * C + c);
        const M a = load(log_alpha, (b * Tn + t) * X + s);
        M r;
        if (t == lin - 1) {
          r = s >= 2 * L - 1 ? l : NINF;
        } else {
          const bool skip = (s & 1) && s + 2 < S && ls.lab[k + 1] != ls.lab[k];
          r = lse3(later[s], s + 1 < S ? later[s + 1] : NINF, skip ? later[s + 2] : NINF) + l;
        }
        cur[s] = r;
        M e = exp(a + r - l + shift);
        if (t == lin - 1 && drop_2l && s == 2 * L) e = M(0);
        if (s & 1) occ[k] = e;
        else part += e;
      }
      part = warp_sum(part);
      if (lane == 0) bpart[buf][warp] = part;
      __syncthreads();
      write_columns(lp, out, occ, bpart[buf], warps, ls.lab, ls.fst, ls.nxt, blank_first, L, blank,
                    (t * N + b) * C, nll_fin, nll, g);
    }
  }
}

}  // namespace aclg

// ------------------------------------------------------------------------------ target cast
// BOOL / FLOAT / FLOAT16 targets -> int64 (CANN casts them before its kernels): truncation toward
// zero; NaN, +-inf or a magnitude >= 2^62 become -1, a label out of range (that sample turns NaN).
// src is contiguous; is_bool != 0: one byte per element, else load_dyn's dtype code.
namespace aclg {
__global__ void __launch_bounds__(256) ctc_cast_targets(const void* __restrict__ src, long long* __restrict__ dst,
                                                        long long n, int dtype, int is_bool) {
  for (long long i = global_thread(); i < n; i += grid_threads()) {
    if (is_bool) {
      dst[i] = static_cast<const unsigned char*>(src)[i] != 0 ? 1 : 0;
    } else {
      const float v = load_dyn<float>(src, i, dtype);
      const bool ok = v == v && v < 4.6116860184e18f && v > -4.6116860184e18f;
      dst[i] = ok ? (long long)v : -1;
    }
  }
}
}  // namespace aclg
