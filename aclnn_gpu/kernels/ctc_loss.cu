// ctc_loss.cu -- CTC loss forward (alpha recursion) and backward (beta recursion + gradient rows).
//
// Layouts: log_probs / out (T, N, C) contiguous; log_alpha (N, T, X); grad_out, nll (N,).
// Targets: 1-D concatenated (tgt_stride == 0, sample b starts at tiling offset) or 2-D padded
// (row stride tgt_stride, offset b * tgt_stride). Tiling (int64, workspace head), per sample b:
//   tiling[3b] = input length Lin, tiling[3b+1] = target length L, tiling[3b+2] = target offset.
// Nothing is trusted: lengths are clamped/validated against T, max_l and the target extent; a label
// outside [0, C) is never used as an index and turns the whole sample NaN.
//
// Backward = ctc_beta (per sample: the beta recursion; beta lives in registers, PER consecutive
// states per thread, neighbours via warp shuffles and a 3-value boundary slot per warp in shared
// memory; one __syncthreads per time step) writing, per step, the occupancy of every state
// exp(alpha + beta - lp + nll) to a compact (T, N, W) buffer (W: 2*maxL+1 rounded up to 32 bytes,
// host: launch.occ_width), plus the sample's status
// and label tables (ctc::Tables), followed on the same stream by ctc_grad (one block per row (t, b):
// exp(lp) * g over the row, coalesced, then the blank and label columns overwritten with
// (exp(lp) - occupancy) * g, where occupancy(t, c) sums the states s with l'(s) == c in a fixed
// order: blank = block_sum over the even states, a label = its occurrences in target order). The
// recursion's step thus carries no column gather, no reduction and no scattered store. No atomics.
//
// Forward = ctc_alpha: the same design for alpha (neighbours s-1, s-2), writing the whole
// (T, X) slice of log_alpha (-inf where unreachable) and the loss.
//
// 16-bit storage: the backward reads neither the log_alpha nor the loss it is given for its math (both
// rounded to 16 bits) and runs the forward's recursion again in fp32 (AlphaStore below). Register
// path: ctc_recursions_math, alpha (T, N, W) and the losses in fp32 in one half of its blocks, beta
// (T, N, W) in fp32 in the other, side by side; ctc_grad forms the occupancies from both. Long path:
// ctc_alpha_math_long (alpha in fp32 in the occupancy buffer) then ctc_beta_math_long, which
// overwrites it with the occupancies.
#include "common.cuh"

namespace aclg {
namespace ctc {

// Max states per thread (registers under __launch_bounds__(512), i.e. <= 128 registers, no spills):
// S = 2*maxL+1 <= kPerOf<M> * 512, i.e. 4096 states for fp32 math and 2560 (maxL <= 1279) for fp64.
template <class M> struct PerOf { static constexpr int value = sizeof(M) == 8 ? 5 : 8; };
constexpr int kMaxWarps = 16;

// Prefetch distance of the register recursions, in time steps, by P (the compile-time maximum of
// states per thread; the kernels are instantiated for P = 1 and P = PerOf<M>). A step's work is
// about 0.1 us (a barrier, a shuffle, lse3) while a log-prob column load from DRAM takes ~0.3-0.6 us:
// a load issued one step ahead stalls the recursion every step, one issued RingOf<P> steps ahead does
// not (aclnn_gpu/profile/latency.py models it). The ring costs RingOf<P> * P registers per prefetched
// operand (the backward has two: log-probs and alpha), so the distance is long only where P is small;
// at P = PerOf<M> the recursions already use ~128 registers and keep the one-step prefetch.
// host: launch.RING, profile/latency.py reads this table.
template <int P> struct RingOf { static constexpr int value = P == 1 ? 8 : 1; };

// Where an alpha recursion writes (kWs false: the forward's log_alpha (N, T, X) in the storage type;
// kWs true: the backward's own recursion for 16-bit storage, alpha (T, N, W) in fp32 in the occupancy
// buffer and the loss in fp32 in the workspace, so that the gradient never reads a log_alpha or a
// loss rounded to 16 bits: a half ulp of alpha ~ 30 is 1.6% (fp16) or 12% (bf16) of an occupancy).
template <bool kWs, class T> struct AlphaStore { typedef T type; };
template <class T> struct AlphaStore<true, T> { typedef math_t<T> type; };

template <class M> __device__ __forceinline__ M lse3(M a, M b, M c) {
  M m = a > b ? a : b;
  m = m > c ? m : c;
  if (m == neg_inf<M>()) m = M(0);
  return log(exp(a - m) + exp(b - m) + exp(c - m)) + m;
}

// Shared-memory layout shared by ctc_alpha / ctc_beta (host: shared_bytes()).
template <class M> struct Smem {
  M* bnd;    // [2][kMaxWarps + 1][3] warp boundary values of the previous step
  M* fin;    // [2] alpha at (Lin-1, 2L) and (Lin-1, 2L-1) (forward)
  int* lab;  // [max_l] labels (0 where invalid; forward)
  int* misc; // [4] bad flag, first occurrence of a label equal to blank
};

template <class M> __device__ __forceinline__ Smem<M> carve(unsigned char* base, long long max_l) {
  Smem<M> s;
  M* m = reinterpret_cast<M*>(base);
  s.bnd = m;
  m += 2 * (kMaxWarps + 1) * 3;
  s.fin = m;
  m += 2;
  int* p = reinterpret_cast<int*>(m);
  s.lab = p;
  p += max_l;
  s.misc = p;
  return s;
}

// What the beta recursion leaves for ctc_grad, in the workspace (host: launch.tables_bytes):
// status[N] (kOk / kBad: NaN slice / kZero: zero_infinity zeroes the slice), first[N] (first
// occurrence of a label equal to blank, -1 if none), and per sample rows of max_l: lab, fst (1 at
// the first occurrence of a label), nxt (its next occurrence, -1 at the end).
enum : int { kOk = 0, kBad = 1, kZero = 2 };
struct Tables {
  int* status;
  int* first;
  int* lab;
  int* fst;
  int* nxt;
};
__device__ __forceinline__ Tables tables_at(int* base, long long N, long long max_l) {
  Tables tb;
  tb.status = base;
  tb.first = base + N;
  tb.lab = base + 2 * N;
  tb.fst = tb.lab + N * max_l;
  tb.nxt = tb.fst + N * max_l;
  return tb;
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


// The forward of a sample whose tiling row or labels are out of range: log_alpha slice and loss NaN.
template <class T>
__device__ __forceinline__ void poison_alpha(T* la, T* nll_out, long long b, long long Tn, long long X) {
  for (long long i = threadIdx.x; i < Tn * X; i += blockDim.x) store(la, i, quiet_nan<math_t<T>>());
  if (threadIdx.x == 0) store(nll_out, b, quiet_nan<math_t<T>>());
}

// The forward's end of a sample (after the last step's barrier): rows t >= Lin of its log_alpha slice
// -inf (clear_rows; the backward's own recursion into its workspace leaves them, never read), and its loss from alpha at (Lin-1, 2L) and (Lin-1, 2L-1) (*a2l, *a2l1; a2l1 null: -inf),
// read by thread 0 only and only when Lin > 0.
template <class T, class M>
__device__ __forceinline__ void finish_alpha(T* la, T* nll_out, long long b, long long Tn, long long X, long long lin,
                                             long long L, const M* a2l, const M* a2l1, int zero_inf, bool clear_rows) {
  const M NINF = neg_inf<M>();
  if (clear_rows)
    for (long long i = lin * X + threadIdx.x; i < Tn * X; i += blockDim.x) store(la, i, NINF);
  if (threadIdx.x != 0) return;
  M nll;
  if (lin == 0) {
    nll = L == 0 ? M(0) : pos_inf<M>();
  } else {
    const M l1 = *a2l, l2 = a2l1 ? *a2l1 : NINF;
    M m = l1 > l2 ? l1 : l2;
    if (m == NINF) m = M(0);
    nll = -(log(exp(l1 - m) + exp(l2 - m)) + m);
  }
  if (zero_inf && nll == pos_inf<M>()) nll = M(0);
  store(nll_out, b, nll);
}

}  // namespace ctc

// PyTorch's exp(lcab + nll - lp) at a column without states is exp(-inf + nll): NaN when nll is
// +inf or NaN, else 0. Returns the factor (1 or NaN) the dense value is multiplied by.
template <class M> __device__ __forceinline__ M nan_if(M nll) {
  return (nll == pos_inf<M>() || nll != nll) ? quiet_nan<M>() : M(1);
}

// PyTorch's value at a column without states, exp(lp) - exp(-inf + nll - lp), times g: NaN where lp is
// -inf (-inf - -inf), else exp(lp) * g (g carries nan_if(nll)). exp(lp) > 0 for a finite lp even where
// it underflows (or is flushed to zero: CuPy compiles with -ftz=true), so an infinite g gives g, not
// 0 * inf = NaN.
template <class M> __device__ __forceinline__ M dense_grad(M lp, M g) {
  if (lp == neg_inf<M>()) return quiet_nan<M>();
  const M e = exp(lp);
  return (e == M(0) && !is_finite(g) && g == g) ? g : e * g;
}

// The occupancy of state s at a sample's last step (t == Lin-1) where PyTorch reads no alpha/beta
// of s: its column's term there is exp(lcab + nll - lp) with lcab -inf where no final state shares
// the column. early (s < 2L-1): exp(-inf - lp + shift), i.e. NaN where lp is -inf (-inf + inf), 0
// otherwise (+inf included: alpha +inf and beta -inf must not make it NaN), whatever logAlpha holds
// at s. Not early (2L dropped: the last label is blank, PyTorch overwrites that column's term with
// state 2L-1's): 0.
template <class M> __device__ __forceinline__ M last_step_occupancy(bool early, M lp, M shift) {
  return early ? exp(neg_inf<M>() - lp + shift) : M(0);
}

// ------------------------------------------------------------------------------ backward: beta
// Sample prologue of the beta recursions: status, labels (into the tables) and their chains. Alpha
// of sample b at (t, s) is log_alpha[b * a_sample + t * a_step + s] (either layout of AlphaStore);
// a null log_alpha (beta alone, in parallel with alpha) leaves the test of a sample that cannot
// align to ctc_grad.
// Returns false when the sample has no recursion to run (status written). Ends with a barrier.
// zero_inf zeroes the slice (kZero) when the nll given is +inf, and also when the sample cannot
// align whatever nll is given (CANN's forward returns 0 for it): alpha at both final states
// (Lin-1, 2L) and (Lin-1, 2L-1) is -inf. Every thread reads those two values: the return is uniform.
template <class I, class A>
__device__ __forceinline__ bool beta_prologue(const long long* tiling, const I* targets, const A* log_alpha,
                                             long long a_sample, long long a_step,
                                             const ctc::Tables& tb, long long b, long long Tn, long long C,
                                             long long max_l, long long tgt_numel, long long tgt_stride, long long X,
                                             long long blank, long long cap, math_t<A> nll, int zero_inf, int* misc,
                                             ctc::Sample& sp) {
  typedef math_t<A> M;
  using namespace ctc;
  if (zero_inf && nll == pos_inf<M>()) {           // ctc_grad zeroes the slice
    if (threadIdx.x == 0) tb.status[b] = kZero;
    return false;
  }
  int* lab = tb.lab + b * max_l;
  sp = load_sample<I>(tiling, targets, b, Tn, C, max_l, tgt_numel, tgt_stride, X, blank, cap, lab, misc);
  bool zero = false;
  if (zero_inf && log_alpha && !sp.bad && sp.lin > 0) {   // not bad: 2L < X, Lin in [1, T]
    const A* fin = log_alpha + b * a_sample + (sp.lin - 1) * a_step + 2 * sp.L;
    zero = load(fin, 0) == neg_inf<M>() && (sp.L == 0 || load(fin, -1) == neg_inf<M>());
  }
  if (threadIdx.x == 0) tb.status[b] = sp.bad ? kBad : zero ? kZero : kOk;
  if (sp.bad || zero || sp.lin == 0) return false;
  build_chains(lab, tb.fst + b * max_l, tb.nxt + b * max_l, misc, sp.L, blank);
  __syncthreads();
  if (threadIdx.x == 0) tb.first[b] = misc[1];
  return true;
}

// The beta recursion of the register path over alpha of either AlphaStore layout, for samples blk,
// blk + nblk, ...; nll_ws (or null): the sample losses in fp32 that the occupancies are scaled by, in
// place of the given nll_in (which still decides zero_inf's +inf test). kBetaOnly: no alpha (log_alpha
// null), beta itself written to `occ` (T, N, W) for ctc_grad to form the occupancies (the 16-bit
// backward, alpha computed beside it by other blocks of the launch).
template <class T, class I, int P, class A, bool kBetaOnly>
__device__ __forceinline__ void beta_steps(const T* lp, const T* nll_in, const math_t<T>* nll_ws, const A* log_alpha,
                                           long long a_sample, long long a_step, const I* targets,
                                           const long long* tiling, int* tables, math_t<T>* occ, long long W,
                                           long long Tn, long long N, long long C, long long X, long long blank,
                                           long long max_l, long long tgt_numel, long long tgt_stride, int zero_inf,
                                           int per, unsigned char* ctc_smem, long long blk, long long nblk) {
  typedef math_t<T> M;
  using namespace ctc;
  constexpr int kPer = P;                   // per <= P (host: launch.recursion_geometry)
  constexpr int kD = RingOf<P>::value;      // prefetch distance in steps
  const Smem<M> sm = carve<M>(ctc_smem, max_l);
  const Tables tb = tables_at(tables, N, max_l);
  const int tid = threadIdx.x, lane = tid % kWarp, warp = tid / kWarp;
  const int cap = per * (int)blockDim.x;
  const M NINF = neg_inf<M>();

  for (long long b = blk; b < N; b += nblk) {
    __syncthreads();  // the previous sample's readers are done with shared memory
    const M nll = load(nll_in, b);
    Sample sp = {0, 0, 0, true};
    if (!beta_prologue<I, A>(tiling, targets, log_alpha, a_sample, a_step, tb, b, Tn, C, max_l, tgt_numel,
                             tgt_stride, X, blank, cap, nll, zero_inf, sm.misc, sp))
      continue;
    const long long L = sp.L, lin = sp.lin, S = 2 * L + 1;
    const int* lab = tb.lab + b * max_l;
    for (int i = tid; i < 2 * (kMaxWarps + 1) * 3; i += blockDim.x) sm.bnd[i] = NINF;
    __syncthreads();
    const M nll_m = kBetaOnly ? M(0) : nll_ws ? nll_ws[b] : nll;
    const M shift = is_finite(nll_m) ? nll_m : M(0);
    const A* alpha_b = log_alpha + b * a_sample;
    const bool drop_2l = L > 0 && lab[L - 1] == blank;
    // per-thread states s0 .. s0+per-1, labels and transitions
    const long long s0 = (long long)tid * per;
    int lab_s[kPer];
    bool skip_s[kPer];   // s <- s+2 allowed
    // rings of alpha and log-probs: slot j holds step k = lin-1-t with k % kD == j (static indices
    // after the unrolled j loop below, so the ring stays in registers)
    M beta[kPer], a_ring[kD][kPer], l_ring[kD][kPer];
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const long long s = s0 + i;
      const bool in = i < per && s < S;
      lab_s[i] = (in && (s & 1)) ? lab[s >> 1] : (int)blank;
      skip_s[i] = in && (s & 1) && s + 2 < S && lab[(s >> 1) + 1] != lab[s >> 1];
      beta[i] = NINF;
#pragma unroll
      for (int j = 0; j < kD; ++j) {
        a_ring[j][i] = NINF;
        l_ring[j][i] = NINF;
        if (in && j < lin) {
          if (!kBetaOnly) a_ring[j][i] = load(alpha_b, (lin - 1 - j) * a_step + s);
          l_ring[j][i] = load(lp, ((lin - 1 - j) * N + b) * C + lab_s[i]);
        }
      }
    }
    for (long long k0 = 0; k0 < lin; k0 += kD) {
#pragma unroll
    for (int j = 0; j < kD; ++j) {
      const long long t = lin - 1 - (k0 + j);
      if (t < 0) break;   // uniform over the block
      const int buf = (int)(t & 1), pbuf = buf ^ 1;
      M a[kPer], l[kPer];
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        a[i] = a_ring[j][i];
        l[i] = l_ring[j][i];
      }
      if (t >= kD) {   // refill the slot with step t - kD: kD steps in flight
#pragma unroll
        for (int i = 0; i < kPer; ++i) {
          const long long s = s0 + i;
          if (i < per && s < S) {
            if (!kBetaOnly) a_ring[j][i] = load(alpha_b, (t - kD) * a_step + s);
            l_ring[j][i] = load(lp, ((t - kD) * N + b) * C + lab_s[i]);
          }
        }
      }
      // neighbours s0+per and s0+per+1 at t+1
      const M v0 = __shfl_down_sync(kFullMask, beta[0], 1);
      const M v1 = __shfl_down_sync(kFullMask, per >= 2 ? beta[kPer > 1 ? 1 : 0] : beta[0], per >= 2 ? 1 : 2);
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
          mine[1] = beta[kPer > 1 ? 1 : 0];   // read only when per >= 2 (then kPer > 1)
        } else {
          mine[2] = beta[0];
        }
      }
      // occupancies of row (t, b): consecutive states per thread, contiguous across the block. At
      // P = 1 after the barrier, so that their exp is off the recursion's path: it overlaps the next
      // step's shuffles and lse3 (beta[] changes only in that step's update). At P = PerOf<M> before
      // it: a[], l[] live across the barrier cost registers there (16-bit types spilled on sm_80).
      // at the last step PyTorch reads logAlpha at the two final states only (last_step_occupancy)
      auto store_occupancies = [&]() {
        M* orow = occ + (t * N + b) * W;
#pragma unroll
        for (int i = 0; i < kPer; ++i) {
          const long long s = s0 + i;
          if (i < per && s < S)
            orow[s] = kBetaOnly ? beta[i]
                                : (t == lin - 1 && (s < 2 * L - 1 || (drop_2l && s == 2 * L)))
                                      ? last_step_occupancy(s < 2 * L - 1, l[i], shift)
                                      : exp(a[i] + beta[i] - l[i] + shift);
        }
      };
      if (P != 1) store_occupancies();
      __syncthreads();
      if (P == 1) store_occupancies();
    }
    }
  }
}

template <class T, class I, int P>
__global__ void __launch_bounds__(512, 1) ctc_beta(const T* __restrict__ lp, const T* __restrict__ nll_in,
                         const T* __restrict__ log_alpha, const I* __restrict__ targets,
                         const long long* __restrict__ tiling, int* tables, math_t<T>* __restrict__ occ,
                         long long W, long long Tn, long long N, long long C, long long X, long long blank,
                         long long max_l, long long tgt_numel, long long tgt_stride, int zero_inf, int per) {
  extern __shared__ __align__(16) unsigned char ctc_smem[];
  beta_steps<T, I, P, T, false>(lp, nll_in, nullptr, log_alpha, Tn * X, X, targets, tiling, tables, occ, W, Tn, N, C,
                                X, blank, max_l, tgt_numel, tgt_stride, zero_inf, per, ctc_smem, blockIdx.x, gridDim.x);
}

// ctc_grad's rare path: exp(l) - term scaled by e^64 where both underflowed (the comment at its call),
// out of line so that its registers do not weigh on the common path (inlined, fp64 spilled on sm_90).
// blank_column: the blank's term, which adds the even states' occupancies to the chain from j0.
template <class T>
__device__ __noinline__ math_t<T> underflowed_difference(const math_t<T>* a, const math_t<T>* o, const T* lrow,
                                                         const int* lab, const int* nxt, long long blank, long long L,
                                                         bool blank_column, int j0, bool drop_2l, math_t<T> shift,
                                                         math_t<T> l, math_t<T> nl, bool nll_fin) {
  typedef math_t<T> M;
  const M up = M(64);
  auto scaled_occupancy = [&](long long st) -> M {
    if (!a) return o[st] * exp(up);
    if (drop_2l && st == 2 * L) return M(0);
    return exp(a[st] + o[st] - load(lrow, (st & 1) ? (long long)lab[st >> 1] : blank) + shift + up);
  };
  M big = M(0);
  if (blank_column) {
    for (long long st = 0; st <= 2 * L; st += 2) big += scaled_occupancy(st);
  }
  for (int jj = j0; jj >= 0; jj = nxt[jj]) big += scaled_occupancy(2 * jj + 1);
  return exp(l + up) - (nll_fin ? big : exp(log(big) + nl));
}

// ------------------------------------------------------------------------------ backward: gradient rows
// One block per row (t, b), grid-stride over rows. The whole row first: exp(lp) * g (NaN where lp is
// -inf), 0 for t >= Lin or a zeroed sample, NaN for a bad one; then, after a barrier (it orders the
// block's global stores, so the overwrite lands last), the blank and label columns of rows t < Lin
// from the occupancy row. vec != 0: the host checked that C is a multiple of 16/sizeof(T) and that
// lp and out are 16-byte aligned. blockDim.x is a multiple of 32, at most 256. nll_ws (or null): the
// fp32 losses of the backward's own alpha recursion (16-bit storage), used in place of nll_in.
// alpha_ws (or null; 16-bit storage, register path): alpha (T, N, W) in fp32 and `occ` beta itself
// (ctc_recursions_math): the occupancy of state s is formed here, exp(alpha + beta - lp + nll) as the
// beta recursion forms it otherwise (same operands, same order), and a sample that cannot align
// (nll_ws +inf) is zeroed under zero_inf.
template <class T>
__global__ void __launch_bounds__(256) ctc_grad(const T* __restrict__ lp, const T* __restrict__ grad_out,
                         const T* __restrict__ nll_in, const math_t<T>* __restrict__ nll_ws,
                         const math_t<T>* __restrict__ alpha_ws, T* __restrict__ out,
                         const long long* __restrict__ tiling,
                         const int* __restrict__ tables, const math_t<T>* __restrict__ occ, long long W,
                         long long Tn, long long N, long long C, long long blank, long long max_l, int zero_inf,
                         int vec) {
  typedef math_t<T> M;
  using namespace ctc;
  __shared__ M scratch[256 / kWarp];
  const Tables tb = tables_at(const_cast<int*>(tables), N, max_l);
  for (long long row = blockIdx.x; row < Tn * N; row += gridDim.x) {
    const long long t = row / N, b = row - t * N;
    const M nl = nll_ws ? nll_ws[b] : load(nll_in, b);
    int status = tb.status[b];
    if (alpha_ws && zero_inf && status == kOk && nl == pos_inf<M>()) status = kZero;
    const bool live = status == kOk && t < tiling[3 * b];   // status kOk: tiling[3b] in [0, T]
    const M fill = status == kBad ? quiet_nan<M>() : M(0);
    // the blank and label columns carry the nll in their own term, exp(lcab + nll - lp) (an nll of
    // +inf gives -inf there, not NaN); the columns without states take nan_if's factor
    const M g_label = load(grad_out, b);
    const M g = g_label * nan_if(nl);
    const T* lrow = lp + row * C;
    T* orow = out + row * C;
    if (vec) {
      constexpr int V = Vec16<T>::N;
      for (long long p = threadIdx.x; p < C / V; p += blockDim.x) {
        Vec16<T> x = load16(lrow, p);
#pragma unroll
        for (int j = 0; j < V; ++j) x.v[j] = from_math<T>(live ? dense_grad(to_math(x.v[j]), g) : fill);
        store16(orow, p, x);
      }
    } else {
      for (long long c = threadIdx.x; c < C; c += blockDim.x) store(orow, c, live ? dense_grad(load(lrow, c), g) : fill);
    }
    if (!live) continue;   // uniform over the block
    const long long L = tiling[3 * b + 1];
    const M* o = occ + row * W;
    const int* lab = tb.lab + b * max_l;
    const M* a = alpha_ws ? alpha_ws + row * W : nullptr;
    const bool drop_2l = t == tiling[3 * b] - 1 && L > 0 && lab[L - 1] == blank;
    const M shift = is_finite(nl) ? nl : M(0);
    // at the last step alpha_ws holds -inf at the states before the final two (alpha_steps), so
    // that their occupancy is last_step_occupancy's, whatever alpha is there
    auto occupancy = [&](long long s) -> M {   // of state s in row (t, b)
      if (!a) return o[s];
      if (drop_2l && s == 2 * L) return M(0);
      return exp(a[s] + o[s] - load(lrow, (s & 1) ? (long long)lab[s >> 1] : blank) + shift);
    };
    M even = M(0);
    for (long long s = 2 * (long long)threadIdx.x; s <= 2 * L; s += 2 * (long long)blockDim.x) even += occupancy(s);
    even = block_sum(even, scratch);   // barrier: the row's dense stores are done
    const int* fst = tb.fst + b * max_l;
    const int* nxt = tb.nxt + b * max_l;
    const bool nll_fin = is_finite(nl);
    for (long long k = threadIdx.x; k <= L; k += blockDim.x) {
      long long c;
      M sum = M(0);
      int j;
      if (k == L) {
        c = blank;
        sum = even;
        j = tb.first[b];
      } else {
        c = lab[k];
        if (!fst[k] || c == blank) continue;
        j = (int)k;
      }
      const int j0 = j;
      for (; j >= 0; j = nxt[j]) sum += occupancy(2 * j + 1);
      const M term = nll_fin ? sum : exp(log(sum) + nl);
      const M l = load(lrow, c);
      const M d = exp(l) - term;
      M v = d * g_label;
      if (d == M(0) && !is_finite(g_label) && g_label == g_label && l > neg_inf<M>()) {
        // exp(lp) and the term both underflowed (or were flushed to zero: CuPy's -ftz=true) where an
        // infinite gradient needs the sign of their difference, which PyTorch's float64 keeps: the two
        // compared scaled by e^64, the term formed again from its states' occupancies each scaled (an
        // occupancy below FLT_MIN counts; a rare path, so the blank's sum over the even states is one
        // thread's serial loop here). The long path's occupancies come formed (alpha_ws null): those
        // scaled as they are, one already flushed counting as 0.
        const M scaled = underflowed_difference<T>(a, o, lrow, lab, nxt, blank, L, k == L, j0, drop_2l, shift, l, nl,
                                                   nll_fin);
        v = scaled > M(0) ? g_label : scaled < M(0) ? -g_label : quiet_nan<M>();
      }
      store(orow, c, v);
    }
  }
}

// ------------------------------------------------------------------------------ forward: alpha
// The alpha recursion of the register path for samples blk, blk + nblk, ..., writing the
// AlphaStore<kWs> layout: kWs false, the forward's
// log_alpha (N, T, X) and loss in the storage type, -inf outside the sample's states; kWs true, alpha
// (T, N, X = W) and the loss in fp32 (the backward of 16-bit storage: rows t >= Lin and states > 2L
// are left unwritten, never read; the host passes zero_inf = 0, so the loss keeps its +inf).
template <class T, class I, int P, bool kWs>
__device__ __forceinline__ void alpha_steps(const T* lp, const I* targets, typename ctc::AlphaStore<kWs, T>::type* nll_out,
                                            typename ctc::AlphaStore<kWs, T>::type* log_alpha,
                                            const long long* tiling, long long Tn, long long N, long long C, long long X,
                                            long long blank, long long max_l, long long tgt_numel, long long tgt_stride,
                                            int zero_inf, int per, unsigned char* ctc_smem, long long blk,
                                            long long nblk) {
  typedef math_t<T> M;
  typedef typename ctc::AlphaStore<kWs, T>::type A;
  using namespace ctc;
  constexpr int kPer = P;                   // per <= P (host: launch.recursion_geometry)
  constexpr int kD = RingOf<P>::value;      // prefetch distance in steps
  const long long a_step = kWs ? N * X : X;
  const Smem<M> sm = carve<M>(ctc_smem, max_l);
  const int tid = threadIdx.x, lane = tid % kWarp, warp = tid / kWarp;
  const int cap = per * (int)blockDim.x;
  const M NINF = neg_inf<M>();

  for (long long b = blk; b < N; b += nblk) {
    __syncthreads();
    const Sample sp = load_sample<I>(tiling, targets, b, Tn, C, max_l, tgt_numel, tgt_stride,
                                     X, blank, cap, sm.lab, sm.misc);
    A* la = log_alpha + b * (kWs ? X : Tn * X);
    if (sp.bad) {
      if (!kWs) poison_alpha(la, nll_out, b, Tn, X);
      else if (tid == 0) store(nll_out, b, quiet_nan<M>());   // the beta's prologue marks the sample bad
      continue;
    }
    const long long L = sp.L, lin = sp.lin, S = 2 * L + 1;
    const long long row_end = kWs ? S : X;   // columns written per row
    for (int i = tid; i < 2 * (kMaxWarps + 1) * 3; i += blockDim.x) sm.bnd[i] = NINF;
    if (tid == 0) {
      sm.fin[0] = NINF;
      sm.fin[1] = NINF;
    }
    __syncthreads();
    const long long s0 = (long long)tid * per;
    int lab_s[kPer];
    bool skip_s[kPer];   // s-2 -> s allowed
    M alpha[kPer], l_ring[kD][kPer];   // slot j: log-probs of step t with t % kD == j
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const long long s = s0 + i;
      const bool in = i < per && s < S;
      lab_s[i] = (in && (s & 1)) ? sm.lab[s >> 1] : (int)blank;
      skip_s[i] = in && (s & 1) && s >= 3 && sm.lab[s >> 1] != sm.lab[(s >> 1) - 1];
      alpha[i] = NINF;
#pragma unroll
      for (int j = 0; j < kD; ++j) l_ring[j][i] = (in && j < lin) ? load(lp, (j * N + b) * C + lab_s[i]) : NINF;
    }
    for (long long t0 = 0; t0 < lin; t0 += kD) {
#pragma unroll
    for (int j = 0; j < kD; ++j) {
      const long long t = t0 + j;
      if (t >= lin) break;   // uniform over the block
      const int buf = (int)(t & 1), pbuf = buf ^ 1;
      M l[kPer];
#pragma unroll
      for (int i = 0; i < kPer; ++i) l[i] = l_ring[j][i];
      if (t + kD < lin) {   // refill the slot with step t + kD: kD steps in flight
#pragma unroll
        for (int i = 0; i < kPer; ++i) {
          const long long s = s0 + i;
          if (i < per && s < S) l_ring[j][i] = load(lp, ((t + kD) * N + b) * C + lab_s[i]);
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
      A* row = la + t * a_step;
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        const long long s = s0 + i;
        // kWs: at the last step -inf before the final two states, what ctc_grad's occupancy needs
        // there (last_step_occupancy: exp(-inf + -inf beta - lp + nll)); nothing else reads it
        if (i < per && s < row_end) store(row, s, (kWs && t == lin - 1 && s < 2 * L - 1) ? NINF : alpha[i]);
        if (t == lin - 1 && i < per && (s == 2 * L || s == 2 * L - 1)) sm.fin[s == 2 * L ? 0 : 1] = alpha[i];
      }
      for (long long s = cap + tid; s < row_end; s += blockDim.x) store(row, s, NINF);
      __syncthreads();
    }
    }
    finish_alpha(la, nll_out, b, Tn, X, lin, L, sm.fin, sm.fin + 1, zero_inf, !kWs);
  }
}

template <class T, class I, int P>
__global__ void __launch_bounds__(512, 1) ctc_alpha(const T* __restrict__ lp, const I* __restrict__ targets, T* __restrict__ nll_out,
                          T* __restrict__ log_alpha, const long long* __restrict__ tiling, long long Tn, long long N,
                          long long C, long long X, long long blank, long long max_l, long long tgt_numel,
                          long long tgt_stride, int zero_inf, int per) {
  extern __shared__ __align__(16) unsigned char ctc_smem[];
  alpha_steps<T, I, P, false>(lp, targets, nll_out, log_alpha, tiling, Tn, N, C, X, blank, max_l, tgt_numel,
                              tgt_stride, zero_inf, per, ctc_smem, blockIdx.x, gridDim.x);
}

// The backward's two recursions for 16-bit storage in one launch, side by side: blocks [0, G) run
// alpha (AlphaStore<true>: alpha (T, N, W) in fp32 into alpha_ws, the fp32 losses into nll_ws), blocks
// [G, 2G) run beta alone into beta_ws (T, N, W) with the tables; ctc_grad forms the occupancies from
// both. Neither reads what the other writes, so the T steps of the two recursions overlap instead of
// adding up, and neither reads the 16-bit log_alpha or loss given.
template <class T, class I, int P>
__global__ void __launch_bounds__(512, 1) ctc_recursions_math(const T* __restrict__ lp, const T* __restrict__ nll_in,
                          const I* __restrict__ targets, const long long* __restrict__ tiling, int* tables,
                          math_t<T>* __restrict__ nll_ws, math_t<T>* __restrict__ alpha_ws,
                          math_t<T>* __restrict__ beta_ws, long long W, long long Tn, long long N, long long C,
                          long long blank, long long max_l, long long tgt_numel, long long tgt_stride, int zero_inf,
                          int per) {
  extern __shared__ __align__(16) unsigned char ctc_smem[];
  const long long G = gridDim.x / 2;
  if (blockIdx.x < G)
    alpha_steps<T, I, P, true>(lp, targets, nll_ws, alpha_ws, tiling, Tn, N, C, W, blank, max_l, tgt_numel,
                               tgt_stride, 0, per, ctc_smem, blockIdx.x, G);
  else
    beta_steps<T, I, P, math_t<T>, true>(lp, nll_in, nullptr, (const math_t<T>*)nullptr, 0, 0, targets, tiling,
                                         tables, beta_ws, W, Tn, N, C, W, blank, max_l, tgt_numel, tgt_stride,
                                         zero_inf, per, ctc_smem, blockIdx.x - G, G);
}


// ------------------------------------------------------------------------------ long targets
// Targets beyond the register recursion (2*maxL+1 > PerOf<M> * 512 states): the same recursions
// with alpha/beta of two steps (and the forward's labels) in a per-block slot of the workspace
// (ctc::LongSlot, host: launch.long_slot_bytes), states strided over the block, one __syncthreads
// per time step (it orders the slot's global stores for the whole block). Every state is computed
// by the same lse3 with the same operands as on the register path, and the occupancies feed the
// same ctc_grad, so every result is bit-identical to that path's.
namespace ctc {
constexpr int kLongThreads = 512;   // host: launch.MAX_THREADS
// A thread's states of a step are processed kLongChunk at a time: every load of the chunk (labels,
// log-probs, alpha, the previous step's values) is issued before its first lse3, so the chunk waits
// on memory once, not once per state (profile/latency.py: the long path's serial term).
constexpr int kLongChunk = 4;       // host: launch.LONG_CHUNK

template <class M> struct LongSlot {
  M* rec;    // [2][2*max_l+1] alpha or beta at the previous / current step (math precision)
  int* lab;  // [max_l] labels (forward)
};

template <class M>
__device__ __forceinline__ LongSlot<M> long_slot(unsigned char* scratch, long long slot_bytes, long long max_l) {
  LongSlot<M> ls;
  M* m = reinterpret_cast<M*>(scratch + (long long)blockIdx.x * slot_bytes);
  ls.rec = m;
  ls.lab = reinterpret_cast<int*>(m + 2 * (2 * max_l + 1));
  return ls;
}
}  // namespace ctc

// The long path's alpha recursion, writing the AlphaStore<kWs> layout (as alpha_steps).
template <class T, class I, bool kWs>
__device__ __forceinline__ void alpha_long_steps(const T* lp, const I* targets,
                          typename ctc::AlphaStore<kWs, T>::type* nll_out, typename ctc::AlphaStore<kWs, T>::type* log_alpha,
                          const long long* tiling, long long Tn, long long N, long long C, long long X, long long blank,
                          long long max_l, long long tgt_numel, long long tgt_stride, int zero_inf,
                          unsigned char* scratch, long long slot_bytes) {
  typedef typename ctc::AlphaStore<kWs, T>::type A;
  const long long a_step = kWs ? N * X : X;
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
    A* la = log_alpha + b * (kWs ? X : Tn * X);
    if (sp.bad) {
      if (!kWs) poison_alpha(la, nll_out, b, Tn, X);
      else if (tid == 0) store(nll_out, b, quiet_nan<M>());
      continue;
    }
    const long long L = sp.L, lin = sp.lin, S = 2 * L + 1;
    for (long long t = 0; t < lin; ++t) {
      M* cur = ls.rec + (t & 1) * width;
      const M* prev = ls.rec + ((t & 1) ^ 1) * width;
      A* row = la + t * a_step;
      for (long long s0 = tid; s0 < S; s0 += kLongChunk * (long long)blockDim.x) {
        M l[kLongChunk], p0[kLongChunk], p1[kLongChunk], p2[kLongChunk];
#pragma unroll
        for (int j = 0; j < kLongChunk; ++j) {   // the chunk's loads, all in flight together
          const long long s = s0 + j * (long long)blockDim.x;
          const int k = (int)(s >> 1);
          const bool in = s < S;
          const bool skip = in && (s & 1) && s >= 3 && ls.lab[k] != ls.lab[k - 1];
          l[j] = in ? load(lp, (t * N + b) * C + ((s & 1) ? ls.lab[k] : blank)) : NINF;
          p0[j] = in && t > 0 ? prev[s] : NINF;
          p1[j] = in && t > 0 && s >= 1 ? prev[s - 1] : NINF;
          p2[j] = skip && t > 0 ? prev[s - 2] : NINF;
        }
#pragma unroll
        for (int j = 0; j < kLongChunk; ++j) {
          const long long s = s0 + j * (long long)blockDim.x;
          if (s >= S) break;
          const M r = t == 0 ? (s <= 1 ? l[j] : NINF) : lse3(p0[j], p1[j], p2[j]) + l[j];
          cur[s] = r;
          store(row, s, r);
        }
      }
      if (!kWs)
        for (long long s = S + tid; s < X; s += blockDim.x) store(row, s, NINF);
      __syncthreads();
    }
    const M* fin = ls.rec + ((lin - 1) & 1) * width;   // dereferenced only when lin > 0
    finish_alpha(la, nll_out, b, Tn, X, lin, L, fin + 2 * L, L > 0 ? fin + 2 * L - 1 : nullptr, zero_inf, !kWs);
  }
}

template <class T, class I>
__global__ void __launch_bounds__(ctc::kLongThreads, 1) ctc_alpha_long(const T* __restrict__ lp, const I* __restrict__ targets,
                          T* __restrict__ nll_out, T* __restrict__ log_alpha, const long long* __restrict__ tiling,
                          long long Tn, long long N, long long C, long long X, long long blank, long long max_l,
                          long long tgt_numel, long long tgt_stride, int zero_inf, unsigned char* scratch,
                          long long slot_bytes) {
  alpha_long_steps<T, I, false>(lp, targets, nll_out, log_alpha, tiling, Tn, N, C, X, blank, max_l, tgt_numel,
                                tgt_stride, zero_inf, scratch, slot_bytes);
}

// The long path's alpha of the 16-bit backward: alpha (T, N, W) and the losses in fp32
// (AlphaStore<true>) into the occupancy buffer and the workspace, for ctc_beta_math_long.
template <class T, class I>
__global__ void __launch_bounds__(ctc::kLongThreads, 1) ctc_alpha_math_long(const T* __restrict__ lp,
                          const I* __restrict__ targets, math_t<T>* __restrict__ nll_ws, math_t<T>* __restrict__ occ,
                          const long long* __restrict__ tiling, long long Tn, long long N, long long C, long long W,
                          long long blank, long long max_l, long long tgt_numel, long long tgt_stride,
                          unsigned char* scratch, long long slot_bytes) {
  alpha_long_steps<T, I, true>(lp, targets, nll_ws, occ, tiling, Tn, N, C, W, blank, max_l, tgt_numel, tgt_stride, 0,
                               scratch, slot_bytes);
}

// The long path's beta recursion over alpha of either AlphaStore layout (as beta_steps). In the
// AlphaStore<true> layout log_alpha and occ are one buffer: each thread reads its chunk's alpha
// before it writes their occupancies there, and no thread reads those states again.
template <class T, class I, class A>
__device__ __forceinline__ void beta_long_steps(const T* lp, const T* nll_in, const math_t<T>* nll_ws,
                         const A* log_alpha, long long a_sample, long long a_step, const I* targets,
                         const long long* tiling, int* tables, math_t<T>* occ, long long W, long long Tn, long long N,
                         long long C, long long X, long long blank, long long max_l, long long tgt_numel,
                         long long tgt_stride, int zero_inf, unsigned char* scratch, long long slot_bytes) {
  typedef math_t<T> M;
  using namespace ctc;
  __shared__ int misc[4];
  const LongSlot<M> ls = long_slot<M>(scratch, slot_bytes, max_l);
  const Tables tb = tables_at(tables, N, max_l);
  const long long tid = threadIdx.x, width = 2 * max_l + 1;
  const M NINF = neg_inf<M>();

  for (long long b = blockIdx.x; b < N; b += gridDim.x) {
    __syncthreads();
    const M nll = load(nll_in, b);
    Sample sp = {0, 0, 0, true};
    if (!beta_prologue<I, A>(tiling, targets, log_alpha, a_sample, a_step, tb, b, Tn, C, max_l, tgt_numel,
                             tgt_stride, X, blank, width, nll, zero_inf, misc, sp))
      continue;
    const long long L = sp.L, lin = sp.lin, S = 2 * L + 1;
    const int* lab = tb.lab + b * max_l;
    const M nll_m = nll_ws ? nll_ws[b] : nll;
    const M shift = is_finite(nll_m) ? nll_m : M(0);
    const A* alpha_b = log_alpha + b * a_sample;
    const bool drop_2l = L > 0 && lab[L - 1] == blank;
    for (long long t = lin - 1; t >= 0; --t) {
      M* cur = ls.rec + (t & 1) * width;
      const M* later = ls.rec + ((t & 1) ^ 1) * width;   // beta at t+1
      M* orow = occ + (t * N + b) * W;
      for (long long s0 = tid; s0 < S; s0 += kLongChunk * (long long)blockDim.x) {
        M l[kLongChunk], a[kLongChunk], n0[kLongChunk], n1[kLongChunk], n2[kLongChunk];
#pragma unroll
        for (int j = 0; j < kLongChunk; ++j) {   // the chunk's loads, all in flight together
          const long long s = s0 + j * (long long)blockDim.x;
          const int k = (int)(s >> 1);
          const bool in = s < S, step = in && t < lin - 1;
          const bool skip = step && (s & 1) && s + 2 < S && lab[k + 1] != lab[k];
          l[j] = in ? load(lp, (t * N + b) * C + ((s & 1) ? lab[k] : blank)) : NINF;
          a[j] = in ? load(alpha_b, t * a_step + s) : NINF;
          n0[j] = step ? later[s] : NINF;
          n1[j] = step && s + 1 < S ? later[s + 1] : NINF;
          n2[j] = skip ? later[s + 2] : NINF;
        }
#pragma unroll
        for (int j = 0; j < kLongChunk; ++j) {
          const long long s = s0 + j * (long long)blockDim.x;
          if (s >= S) break;
          const M r = t == lin - 1 ? (s >= 2 * L - 1 ? l[j] : NINF) : lse3(n0[j], n1[j], n2[j]) + l[j];
          cur[s] = r;
          // the last step: only the two final states (as in ctc_beta)
          orow[s] = (t == lin - 1 && (s < 2 * L - 1 || (drop_2l && s == 2 * L)))
                        ? last_step_occupancy(s < 2 * L - 1, l[j], shift)
                        : exp(a[j] + r - l[j] + shift);
        }
      }
      __syncthreads();
    }
  }
}

template <class T, class I>
__global__ void __launch_bounds__(ctc::kLongThreads, 1) ctc_beta_long(const T* __restrict__ lp,
                         const T* __restrict__ nll_in, const T* __restrict__ log_alpha,
                         const I* __restrict__ targets, const long long* __restrict__ tiling, int* tables,
                         math_t<T>* __restrict__ occ, long long W, long long Tn, long long N, long long C, long long X,
                         long long blank, long long max_l, long long tgt_numel, long long tgt_stride, int zero_inf,
                         unsigned char* scratch, long long slot_bytes) {
  beta_long_steps<T, I, T>(lp, nll_in, nullptr, log_alpha, Tn * X, X, targets, tiling, tables, occ, W, Tn, N, C, X,
                           blank, max_l, tgt_numel, tgt_stride, zero_inf, scratch, slot_bytes);
}

// The long path's beta of the 16-bit backward: alpha in fp32 in `occ` (ctc_alpha_math_long's),
// overwritten by the occupancies; nll_ws the fp32 losses.
template <class T, class I>
__global__ void __launch_bounds__(ctc::kLongThreads, 1) ctc_beta_math_long(const T* __restrict__ lp,
                         const T* __restrict__ nll_in, const math_t<T>* __restrict__ nll_ws,
                         const I* __restrict__ targets, const long long* __restrict__ tiling, int* tables,
                         math_t<T>* occ, long long W, long long Tn, long long N, long long C, long long blank,
                         long long max_l, long long tgt_numel, long long tgt_stride, int zero_inf,
                         unsigned char* scratch, long long slot_bytes) {
  beta_long_steps<T, I, math_t<T>>(lp, nll_in, nll_ws, occ, W, N * W, targets, tiling, tables, occ, W, Tn, N, C, W,
                                   blank, max_l, tgt_numel, tgt_stride, zero_inf, scratch, slot_bytes);
}

// ------------------------------------------------------------------------------ split recursions
// Few samples (host: launch.recursion_split): each sample's states are cut into J chunks of `cs`
// consecutive states (2 <= cs <= 32), one warp-sized block per (sample, chunk), one state per lane, so
// that the recursions of a few samples spread over many SMs. Unit u of the recursion's units runs
// sample u / J; alpha runs chunk u % J (states s depend on s-1, s-2: chunk j on chunk j-1 at the step
// before), beta chunk J-1 - u % J (s on s+1, s+2: chunk j on chunk j+1 at the step after), so a unit
// only ever waits for unit u-1. Forward progress: a block does not run unit blockIdx.x but the unit of
// its ticket (lane 0's atomicAdd on sync[0] when the block starts), so the unit a block waits for was
// taken by a block that had already started, and a started block runs to its end without waiting on a
// later one (the rule of CUB's decoupled look-back): no assumption on residency or dispatch order.
// Each step, a chunk publishes the two states its neighbour needs to `xchg` (math precision, every
// step kept: [unit][T][2]), then, every kSplitPublish steps and at its last, the count of its
// published steps to counts[unit] (a release store by lane 0 after a __syncwarp); the neighbour's lane
// 0 polls that count with acquire loads, backing off with __nanosleep, and the warp reads a batch of
// up to kSplitBatch steps of boundary values at once. A wait that lasts longer than `timeout_ns`
// (%globaltimer) sets the launch's abort word sync[1], which every waiting block also polls: such a
// block, and every block that ends with the word set, marks its sample failed (NaN loss / status kBad)
// instead of trapping, which would poison the context. The host zeroes sync = [ticket, abort,
// counts...] with the tiling table's upload. Every state is computed by the same lse3 with the same
// operands as on the register path, and the occupancies feed the same ctc_grad, so every result is
// bit-identical to that path's, for any J.
namespace ctc {
constexpr int kSplitThreads = 32;   // host: launch.SPLIT_THREADS
constexpr int kSplitBatch = 32;     // boundary steps read per wait
constexpr int kSplitPublish = 4;    // steps per published count (a release store each): host: launch.SPLIT_PUBLISH
constexpr int kSyncWords = 2;       // sync[0] the ticket, sync[1] the abort word, then the counts: host: launch.SYNC_WORDS

// %globaltimer (ns), ld.acquire.gpu and st.release.gpu (sm_70+); the emulator's stand-ins in emu.h
__device__ __forceinline__ unsigned long long timer_ns() {
#ifdef __CUDA_ARCH__
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
#else
  return emu::global_timer_ns();
#endif
}
__device__ __forceinline__ int load_acquire(const int* p) {
#ifdef __CUDA_ARCH__
  int v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
#else
  return emu::load_acquire(p);
#endif
}
__device__ __forceinline__ void store_release(int* p, int v) {
#ifdef __CUDA_ARCH__
  asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
#else
  emu::store_release(p, v);
#endif
}

// The unit of this block: lane 0 takes the next ticket, the warp gets its value.
__device__ __forceinline__ long long take_ticket(int* sync) {
  int t = 0;
  if (threadIdx.x == 0) t = atomicAdd(sync, 1);
  return __shfl_sync(kFullMask, t, 0);
}

// Whether the launch's abort word is set (every lane loads it: uniform after the __syncwarp).
__device__ __forceinline__ bool aborted(int* sync) {
  __syncwarp();
  return load_acquire(sync + 1) != 0;
}

// Waits until counts[unit] >= need; returns the count seen, or -1 where the wait ran past timeout_ns or
// found the abort word set (lane 0 spins, the warp gets its value).
__device__ __forceinline__ long long wait_count(int* sync, const int* counts, long long unit, long long need,
                                                long long timeout_ns, int* seen) {
  if (threadIdx.x == 0) {
    int v = load_acquire(counts + unit);
    if (v < need) {
      const unsigned long long t0 = timer_ns();
      unsigned ns = 32;   // back-off: 32 ns doubling to 1 us, so that spinners leave the producer's L2 slice alone
      while ((v = load_acquire(counts + unit)) < need) {
        if (load_acquire(sync + 1) != 0 || (long long)(timer_ns() - t0) > timeout_ns) {
          store_release(sync + 1, 1);
          v = -1;
          break;
        }
        __nanosleep(ns);
        if (ns < 1024) ns *= 2;
      }
    }
    *seen = v;
  }
  __syncwarp();
  const long long v = *seen;
  __syncwarp();
  return v;
}

// Publishes step count `count` of `unit` after this warp's stores (xchg, the output rows): the
// __syncwarp orders the lanes' stores before lane 0's release store.
__device__ __forceinline__ void publish_count(int* counts, long long unit, long long count) {
  __syncwarp();
  if (threadIdx.x == 0) store_release(counts + unit, (int)count);
}

// The boundary values of `steps` consecutive published steps, from step q0 on (in the order the
// recursion visits them: dir +1 alpha, -1 beta), into bq[k] = step q0 + dir * k.
template <class M>
__device__ __forceinline__ void load_boundary(const M* xchg_unit, long long q0, int dir, long long steps, M (*bq)[2]) {
  const int lane = threadIdx.x;
  if (lane < steps) {
    const volatile M* x = xchg_unit + (q0 + dir * lane) * 2;   // L2, not a stale L1 line
    bq[lane][0] = x[0];
    bq[lane][1] = x[1];
  }
  __syncwarp();
}

// The forward's loss from alpha at (Lin-1, 2L) and (Lin-1, 2L-1), as finish_alpha forms it.
template <class M> __device__ __forceinline__ M alpha_nll(long long lin, long long L, M l1, M l2, int zero_inf) {
  const M NINF = neg_inf<M>();
  M nll;
  if (lin == 0) {
    nll = L == 0 ? M(0) : pos_inf<M>();
  } else {
    M m = l1 > l2 ? l1 : l2;
    if (m == NINF) m = M(0);
    nll = -(log(exp(l1 - m) + exp(l2 - m)) + m);
  }
  if (zero_inf && nll == pos_inf<M>()) nll = M(0);
  return nll;
}
}  // namespace ctc

// The alpha recursion of (sample, chunk) unit u (AlphaStore<kWs> layout, as alpha_steps): lab and misc
// in shared memory. sync: the launch's ticket and abort word; counts / xchg: the recursion's own ([N*J]
// counts, [N*J][T][2] values). A failed wait: the sample's loss NaN.
template <class T, class I, bool kWs>
__device__ __forceinline__ void alpha_split_steps(const T* lp, const I* targets,
                                                  typename ctc::AlphaStore<kWs, T>::type* nll_out,
                                                  typename ctc::AlphaStore<kWs, T>::type* log_alpha,
                                                  const long long* tiling, long long Tn, long long N, long long C,
                                                  long long X, long long blank, long long max_l, long long tgt_numel,
                                                  long long tgt_stride, int zero_inf, long long J, long long cs,
                                                  int* sync, int* counts, math_t<T>* xchg, long long timeout_ns,
                                                  long long u, int* lab) {
  typedef math_t<T> M;
  typedef typename ctc::AlphaStore<kWs, T>::type A;
  using namespace ctc;
  __shared__ int misc[4];
  __shared__ int seen;
  __shared__ M bq[kSplitBatch][2];
  constexpr int kD = RingOf<1>::value;   // the register path's prefetch distance at one state per thread
  const M NINF = neg_inf<M>();
  const long long a_step = kWs ? N * X : X;
  // 32-bit divisions (units and chunks fit an int: the host launches at most the resident blocks); a
  // 64-bit one is a subroutine call whose saved registers spill
  const long long b = (int)u / (int)J, j = (int)u % (int)J, c_lo = j * cs;
  const int lane = threadIdx.x;
  const Sample sp = load_sample<I>(tiling, targets, b, Tn, C, max_l, tgt_numel, tgt_stride, X, blank, J * cs, lab,
                                   misc);
  A* la = log_alpha + b * (kWs ? X : Tn * X);
  const long long col_hi = j == J - 1 ? X : c_lo + cs;   // the last chunk also writes the padding columns
  if (sp.bad) {   // uniform over the sample's chunks: none publishes, none waits
    if (!kWs)
      for (long long t = 0; t < Tn; ++t)
        for (long long s = c_lo + lane; s < col_hi; s += kSplitThreads) store(la, t * X + s, quiet_nan<M>());
    if (j == 0 && lane == 0) store(nll_out, b, quiet_nan<M>());
    return;
  }
  const long long L = sp.L, lin = sp.lin, S = 2 * L + 1;
  const long long row_end = kWs ? S : X;
  const long long s = c_lo + lane;
  const bool in = lane < cs && s < S;
  const int lab_s = (in && (s & 1)) ? lab[s >> 1] : (int)blank;
  const bool skip = in && (s & 1) && s >= 3 && lab[s >> 1] != lab[(s >> 1) - 1];
  const M* xin = xchg + (j > 0 ? u - 1 : u) * Tn * 2;   // the previous chunk's boundary (read when j > 0)
  M* xout = xchg + u * Tn * 2;
  long long q0 = 0, nq = 0;                // bq holds boundary steps [q0, q0 + nq)
  M alpha = NINF;
  M l_ring[kD];   // slot q: the log-prob of step t with t % kD == q, loaded kD steps ahead
#pragma unroll
  for (int q = 0; q < kD; ++q) l_ring[q] = (in && q < lin) ? load(lp, (q * N + b) * C + lab_s) : NINF;
  for (long long t0 = 0; t0 < lin; t0 += kD) {
#pragma unroll
  for (int q = 0; q < kD; ++q) {
    const long long t = t0 + q;
    if (t >= lin) break;   // uniform over the block
    const M l = l_ring[q];
    if (in && t + kD < lin) l_ring[q] = load(lp, ((t + kD) * N + b) * C + lab_s);
    M p0 = NINF, p1 = NINF;   // alpha at t-1 of states c_lo-1, c_lo-2 (the previous chunk's top two)
    if (j > 0 && t > 0) {
      if (t - 1 >= q0 + nq) {
        const long long seen_n = wait_count(sync, counts, u - 1, t, timeout_ns, &seen);
        if (seen_n < 0) {   // uniform over the block
          if (lane == 0) store(nll_out, b, quiet_nan<M>());
          return;
        }
        q0 = t - 1;
        nq = seen_n - q0 < kSplitBatch ? seen_n - q0 : kSplitBatch;
        load_boundary(xin, q0, 1, nq, bq);
      }
      p0 = bq[t - 1 - q0][0];
      p1 = bq[t - 1 - q0][1];
    }
    const M v1 = __shfl_up_sync(kFullMask, alpha, 1);
    const M v2 = __shfl_up_sync(kFullMask, alpha, 2);
    const M n1 = lane == 0 ? p0 : v1;
    const M n2 = lane == 0 ? p1 : lane == 1 ? p0 : v2;
    if (t == 0) {
      alpha = (in && s <= 1) ? l : NINF;
    } else {
      const M r = lse3(alpha, n1, skip ? n2 : NINF) + l;
      alpha = in ? r : NINF;
    }
    if (j < J - 1) {   // the boundary first: the next chunk waits for it, not for the row below
      if (lane == cs - 1) xout[t * 2] = alpha;
      if (lane == cs - 2) xout[t * 2 + 1] = alpha;
      if ((t + 1) % kSplitPublish == 0 || t == lin - 1) publish_count(counts, u, t + 1);
    }
    A* row = la + t * a_step;
    if (lane < cs && s < row_end) store(row, s, (kWs && t == lin - 1 && s < 2 * L - 1) ? NINF : alpha);
    for (long long c = c_lo + cs + lane; c < col_hi && c < row_end; c += kSplitThreads) store(row, c, NINF);
  }
  }
  // rows t >= Lin of this chunk's columns -inf (not in the workspace layout: never read there)
  if (!kWs)
    for (long long t = lin; t < Tn; ++t)
      for (long long c = c_lo + lane; c < col_hi; c += kSplitThreads) store(la, t * X + c, NINF);
  // the loss: the chunk that holds state 2L (alpha at 2L-1 from its lane below, or the previous chunk)
  const long long s_fin = 2 * L;
  if ((int)s_fin / (int)cs != j) return;   // uniform over the block
  const M a2l = __shfl_sync(kFullMask, alpha, (int)(s_fin - c_lo));
  M a2l1 = __shfl_sync(kFullMask, alpha, (int)(s_fin - c_lo > 0 ? s_fin - c_lo - 1 : 0));
  if (L == 0) {
    a2l1 = NINF;
  } else if (s_fin == c_lo && lin > 0) {   // 2L-1 is the previous chunk's top state at Lin-1
    if (lin - 1 >= q0 + nq) {
      if (wait_count(sync, counts, u - 1, lin, timeout_ns, &seen) < 0) {
        if (lane == 0) store(nll_out, b, quiet_nan<M>());
        return;
      }
      q0 = lin - 1;
      nq = 1;
      load_boundary(xin, q0, 1, nq, bq);
    }
    a2l1 = bq[lin - 1 - q0][0];
  }
  if (lane == 0) store(nll_out, b, alpha_nll<M>(lin, L, a2l, a2l1, zero_inf));
  // a block of this sample that failed its wait may have written NaN before this store
  if (aborted(sync) && lane == 0) store(nll_out, b, quiet_nan<M>());
}

// The beta recursion of (sample, chunk) unit u (as beta_steps; kBetaOnly: beta itself into occ). The
// sample's first unit (chunk J-1) writes its tables; every unit reads the labels from shared memory.
// A failed wait: the sample's status kBad (ctc_grad's NaN slice).
template <class T, class I, class A, bool kBetaOnly>
__device__ __forceinline__ void beta_split_steps(const T* lp, const T* nll_in, const math_t<T>* nll_ws,
                                                 const A* log_alpha, long long a_sample, long long a_step,
                                                 const I* targets, const long long* tiling, int* tables,
                                                 math_t<T>* occ, long long W, long long Tn, long long N, long long C,
                                                 long long X, long long blank, long long max_l, long long tgt_numel,
                                                 long long tgt_stride, int zero_inf, long long J, long long cs,
                                                 int* sync, int* counts, math_t<T>* xchg, long long timeout_ns,
                                                 long long u, int* lab) {
  typedef math_t<T> M;
  using namespace ctc;
  __shared__ int misc[4];
  __shared__ int seen;
  __shared__ M bq[kSplitBatch][2];
  constexpr int kD = RingOf<1>::value;   // the register path's prefetch distance at one state per thread
  const M NINF = neg_inf<M>();
  const Tables tb = tables_at(tables, N, max_l);
  const long long b = (int)u / (int)J, k = (int)u % (int)J, j = J - 1 - k, c_lo = j * cs;   // 32-bit: as alpha
  const bool writer = k == 0;
  const int lane = threadIdx.x;
  const M nll = load(nll_in, b);
  if (zero_inf && nll == pos_inf<M>()) {   // ctc_grad zeroes the slice
    if (writer && lane == 0) tb.status[b] = kZero;
    return;
  }
  const Sample sp = load_sample<I>(tiling, targets, b, Tn, C, max_l, tgt_numel, tgt_stride, X, blank, J * cs, lab,
                                   misc);
  bool zero = false;
  if (zero_inf && log_alpha && !sp.bad && sp.lin > 0) {   // as beta_prologue
    const A* fin = log_alpha + b * a_sample + (sp.lin - 1) * a_step + 2 * sp.L;
    zero = load(fin, 0) == neg_inf<M>() && (sp.L == 0 || load(fin, -1) == neg_inf<M>());
  }
  if (writer && lane == 0) tb.status[b] = sp.bad ? kBad : zero ? kZero : kOk;
  if (sp.bad || zero || sp.lin == 0) return;
  const long long L = sp.L, lin = sp.lin, S = 2 * L + 1;
  if (writer) {
    int* tlab = tb.lab + b * max_l;
    for (long long q = lane; q < L; q += kSplitThreads) tlab[q] = lab[q];
    build_chains(lab, tb.fst + b * max_l, tb.nxt + b * max_l, misc, L, blank);
    __syncwarp();
    if (lane == 0) tb.first[b] = misc[1];
  }
  const M nll_m = kBetaOnly ? M(0) : nll_ws ? nll_ws[b] : nll;
  const M shift = is_finite(nll_m) ? nll_m : M(0);
  const A* alpha_b = log_alpha + b * a_sample;
  const bool drop_2l = L > 0 && lab[L - 1] == blank;
  const long long s = c_lo + lane;
  const bool in = lane < cs && s < S;
  const int lab_s = (in && (s & 1)) ? lab[s >> 1] : (int)blank;
  const bool skip = in && (s & 1) && s + 2 < S && lab[(s >> 1) + 1] != lab[s >> 1];
  const M* xin = xchg + (k > 0 ? u - 1 : u) * Tn * 2;   // the next chunk's lowest two states (read when k > 0)
  M* xout = xchg + u * Tn * 2;
  long long q0 = 0, nq = 0;                // bq holds boundary steps q0, q0-1, ..., q0-nq+1
  M beta = NINF;
  M a_ring[kD], l_ring[kD];   // slot q: step lin-1-k with k % kD == q, loaded kD steps ahead
#pragma unroll
  for (int q = 0; q < kD; ++q) {
    a_ring[q] = NINF;
    l_ring[q] = NINF;
    if (in && q < lin) {
      if (!kBetaOnly) a_ring[q] = load(alpha_b, (lin - 1 - q) * a_step + s);
      l_ring[q] = load(lp, ((lin - 1 - q) * N + b) * C + lab_s);
    }
  }
  for (long long k0 = 0; k0 < lin; k0 += kD) {
#pragma unroll
  for (int q = 0; q < kD; ++q) {
    const long long t = lin - 1 - (k0 + q);
    if (t < 0) break;   // uniform over the block
    const M a = a_ring[q], l = l_ring[q];
    if (in && t >= kD) {
      if (!kBetaOnly) a_ring[q] = load(alpha_b, (t - kD) * a_step + s);
      l_ring[q] = load(lp, ((t - kD) * N + b) * C + lab_s);
    }
    M e0 = NINF, e1 = NINF;   // beta at t+1 of states c_lo+cs, c_lo+cs+1 (the next chunk's lowest two)
    if (j < J - 1 && t < lin - 1) {
      if (nq == 0 || t + 1 < q0 - nq + 1) {
        // the next chunk has published steps lin-1 down to lin-count: step t+1 needs count >= lin-1-t
        const long long seen_n = wait_count(sync, counts, u - 1, lin - 1 - t, timeout_ns, &seen);
        if (seen_n < 0) {   // uniform over the block
          if (lane == 0) tb.status[b] = kBad;
          return;
        }
        q0 = t + 1;
        const long long low = lin - seen_n;   // its lowest published step
        nq = q0 - low + 1 < kSplitBatch ? q0 - low + 1 : kSplitBatch;
        load_boundary(xin, q0, -1, nq, bq);
      }
      e0 = bq[q0 - (t + 1)][0];
      e1 = bq[q0 - (t + 1)][1];
    }
    const M v1 = __shfl_down_sync(kFullMask, beta, 1);
    const M v2 = __shfl_down_sync(kFullMask, beta, 2);
    const M n1 = lane == cs - 1 ? e0 : v1;
    const M n2 = lane == cs - 1 ? e1 : lane == cs - 2 ? e0 : v2;
    if (t == lin - 1) {
      beta = (in && s >= 2 * L - 1) ? l : NINF;
    } else {
      const M r = lse3(beta, s + 1 < S ? n1 : NINF, skip ? n2 : NINF) + l;
      beta = in ? r : NINF;
    }
    if (j > 0) {   // the boundary first: the previous chunk waits for it, not for the occupancies
      if (lane == 0) xout[t * 2] = beta;
      if (lane == 1) xout[t * 2 + 1] = beta;
      if ((lin - t) % kSplitPublish == 0 || t == 0) publish_count(counts, u, lin - t);
    }
    if (in) {
      M* orow = occ + (t * N + b) * W;
      orow[s] = kBetaOnly ? beta
                          : (t == lin - 1 && (s < 2 * L - 1 || (drop_2l && s == 2 * L)))
                                ? last_step_occupancy(s < 2 * L - 1, l, shift)
                                : exp(a + beta - l + shift);
    }
  }
  }
  // a block of this sample that failed its wait may have marked it before the status above
  if (writer && aborted(sync) && lane == 0) tb.status[b] = kBad;
}

// sync: [ticket, abort, counts of the N*J units] (zeroed by the host); timeout_ns: the longest wait.
template <class T, class I>
__global__ void __launch_bounds__(ctc::kSplitThreads, 1) ctc_alpha_split(const T* __restrict__ lp,
                          const I* __restrict__ targets, T* __restrict__ nll_out, T* __restrict__ log_alpha,
                          const long long* __restrict__ tiling, long long Tn, long long N, long long C, long long X,
                          long long blank, long long max_l, long long tgt_numel, long long tgt_stride, int zero_inf,
                          long long J, long long cs, int* sync, math_t<T>* xchg, long long timeout_ns) {
  extern __shared__ __align__(16) unsigned char ctc_smem[];
  const long long u = ctc::take_ticket(sync);
  if (u >= (long long)gridDim.x) return;   // (a ticket past the grid: only where the host starts the ticket above 0)
  alpha_split_steps<T, I, false>(lp, targets, nll_out, log_alpha, tiling, Tn, N, C, X, blank, max_l, tgt_numel,
                                 tgt_stride, zero_inf, J, cs, sync, sync + ctc::kSyncWords, xchg, timeout_ns, u,
                                 (int*)ctc_smem);
}

template <class T, class I>
__global__ void __launch_bounds__(ctc::kSplitThreads, 1) ctc_beta_split(const T* __restrict__ lp,
                         const T* __restrict__ nll_in, const T* __restrict__ log_alpha,
                         const I* __restrict__ targets, const long long* __restrict__ tiling, int* tables,
                         math_t<T>* __restrict__ occ, long long W, long long Tn, long long N, long long C, long long X,
                         long long blank, long long max_l, long long tgt_numel, long long tgt_stride, int zero_inf,
                         long long J, long long cs, int* sync, math_t<T>* xchg, long long timeout_ns) {
  extern __shared__ __align__(16) unsigned char ctc_smem[];
  const long long u = ctc::take_ticket(sync);
  if (u >= (long long)gridDim.x) return;
  beta_split_steps<T, I, T, false>(lp, nll_in, nullptr, log_alpha, Tn * X, X, targets, tiling, tables, occ, W, Tn, N,
                                   C, X, blank, max_l, tgt_numel, tgt_stride, zero_inf, J, cs, sync,
                                   sync + ctc::kSyncWords, xchg, timeout_ns, u, (int*)ctc_smem);
}

// ctc_recursions_math split: units [0, N*J) alpha, [N*J, 2*N*J) beta (one ticket over both), each with
// its own counts and xchg halves (counts + N*J, xchg + N*J*T*2 for beta).
template <class T, class I>
__global__ void __launch_bounds__(ctc::kSplitThreads, 1) ctc_recursions_math_split(const T* __restrict__ lp,
                          const T* __restrict__ nll_in, const I* __restrict__ targets,
                          const long long* __restrict__ tiling, int* tables, math_t<T>* __restrict__ nll_ws,
                          math_t<T>* __restrict__ alpha_ws, math_t<T>* __restrict__ beta_ws, long long W, long long Tn,
                          long long N, long long C, long long blank, long long max_l, long long tgt_numel,
                          long long tgt_stride, int zero_inf, long long J, long long cs, int* sync,
                          math_t<T>* xchg, long long timeout_ns) {
  extern __shared__ __align__(16) unsigned char ctc_smem[];
  const long long G = N * J;
  const long long u = ctc::take_ticket(sync);
  int* counts = sync + ctc::kSyncWords;
  if (u >= (long long)gridDim.x) return;
  if (u < G)
    alpha_split_steps<T, I, true>(lp, targets, nll_ws, alpha_ws, tiling, Tn, N, C, W, blank, max_l, tgt_numel,
                                  tgt_stride, 0, J, cs, sync, counts, xchg, timeout_ns, u, (int*)ctc_smem);
  else
    beta_split_steps<T, I, math_t<T>, true>(lp, nll_in, nullptr, (const math_t<T>*)nullptr, 0, 0, targets, tiling,
                                            tables, beta_ws, W, Tn, N, C, W, blank, max_l, tgt_numel, tgt_stride,
                                            zero_inf, J, cs, sync, counts + G, xchg + G * Tn * 2, timeout_ns, u - G,
                                            (int*)ctc_smem);
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
