// common.cuh -- the device helpers every aclnn_gpu kernel is written on.
//
// Owns: the math type of each storage type (fp32 for fp16/bf16/fp32, fp64 for fp64), typed loads
// and stores with round-to-nearest-even, 16-byte vector access, the index arithmetic of strided and
// broadcast tensors (rank <= 8, descriptors read from the "tiling" block at the head of the
// workspace), and deterministic warp / block reductions (fixed butterfly order, no atomics).
//
// Everything here compiles with NVRTC for sm_80/sm_90 and, unchanged, with the CPU emulator
// (kernels/emulator/emu.h), so it stays inside what the emulator models: no inline PTX, no
// cooperative groups, no tensor-core intrinsics.
#pragma once
#include <cuda_fp16.h>
#include <cuda_bf16.h>

namespace aclg {

typedef long long i64;

constexpr int kMaxRank = 8;
constexpr int kWarp = 32;
constexpr unsigned kFullMask = 0xffffffffu;

// ------------------------------------------------------------------------------ math type
template <class T> struct MathOf { typedef float type; };
template <> struct MathOf<double> { typedef double type; };
template <class T> using math_t = typename MathOf<T>::type;

__device__ __forceinline__ float to_math(float v) { return v; }
__device__ __forceinline__ double to_math(double v) { return v; }
__device__ __forceinline__ float to_math(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_math(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class T> __device__ __forceinline__ T from_math(math_t<T> v);
template <> __device__ __forceinline__ float from_math<float>(float v) { return v; }
template <> __device__ __forceinline__ double from_math<double>(double v) { return v; }
template <> __device__ __forceinline__ __half from_math<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_math<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// Typed element access: storage type T in memory, math type in registers.
template <class T> __device__ __forceinline__ math_t<T> load(const T* p, i64 i) { return to_math(p[i]); }
template <class T> __device__ __forceinline__ void store(T* p, i64 i, math_t<T> v) { p[i] = from_math<T>(v); }

// Converting load from any storage type into a chosen math type (mixed-dtype operators).
template <class M, class T> __device__ __forceinline__ M load_as(const T* p, i64 i) {
  return static_cast<M>(to_math(p[i]));
}

template <class M> __device__ __forceinline__ M quiet_nan();
template <> __device__ __forceinline__ float quiet_nan<float>() { return __int_as_float(0x7fc00000); }
template <> __device__ __forceinline__ double quiet_nan<double>() {
  return __longlong_as_double(0x7ff8000000000000LL);
}
template <class M> __device__ __forceinline__ M neg_inf();
template <> __device__ __forceinline__ float neg_inf<float>() { return __int_as_float(0xff800000); }
template <> __device__ __forceinline__ double neg_inf<double>() {
  return __longlong_as_double((long long)0xfff0000000000000ULL);
}
template <class M> __device__ __forceinline__ M pos_inf() { return -neg_inf<M>(); }
// by comparisons (not isfinite): the same code in NVRTC and in the emulator's host compiler
template <class M> __device__ __forceinline__ bool is_finite(M x) {
  return x == x && x != pos_inf<M>() && x != neg_inf<M>();
}

// ------------------------------------------------------------------------------ 16-byte vectors
// A 16-byte packet of storage elements: 4 x fp32, 8 x fp16/bf16, 2 x fp64. The host only selects a
// vector path when every pointer involved is 16-byte aligned; the scalar tail is the caller's.
template <class T> struct __align__(16) Vec16 {
  static constexpr int N = 16 / sizeof(T);
  T v[N];
};
template <class T> __device__ __forceinline__ Vec16<T> load16(const T* p, i64 vec_index) {
  return reinterpret_cast<const Vec16<T>*>(p)[vec_index];
}
template <class T> __device__ __forceinline__ void store16(T* p, i64 vec_index, const Vec16<T>& v) {
  reinterpret_cast<Vec16<T>*>(p)[vec_index] = v;
}

// ------------------------------------------------------------------------------ grid-stride loops
__device__ __forceinline__ i64 global_thread() { return (i64)blockIdx.x * blockDim.x + threadIdx.x; }
__device__ __forceinline__ i64 grid_threads() { return (i64)gridDim.x * blockDim.x; }

// ------------------------------------------------------------------------------ strided indexing
// A strided/broadcast iteration space as the host lays it out in the tiling block (int64 words):
//   [rank, size[0..7], then for each operand k: stride_k[0..7]]
// Strides are in elements; a broadcast dimension has stride 0. Unused dimensions have size 1.
struct Shape {
  int rank;
  i64 size[kMaxRank];
};

__device__ __forceinline__ Shape load_shape(const i64* tiling) {
  Shape s;
  s.rank = (int)tiling[0];
#pragma unroll
  for (int d = 0; d < kMaxRank; ++d) s.size[d] = tiling[1 + d];
  return s;
}
__device__ __forceinline__ const i64* operand_strides(const i64* tiling, int operand) {
  return tiling + 1 + kMaxRank + operand * kMaxRank;
}

// Element offset of the linear (row-major) index `linear` of the iteration space in an operand.
__device__ __forceinline__ i64 strided_offset(const Shape& s, const i64* stride, i64 linear) {
  i64 off = 0;
  for (int d = s.rank - 1; d >= 0; --d) {
    const i64 n = s.size[d];
    const i64 q = linear / n;
    off += (linear - q * n) * stride[d];
    linear = q;
  }
  return off;
}

// ------------------------------------------------------------------------------ reductions
// Butterfly reductions: every lane ends with the same value, summed in the same fixed order on every
// run, so results are bit-reproducible.
template <class A> __device__ __forceinline__ A warp_sum(A v) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}
template <class A> __device__ __forceinline__ A warp_max(A v) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o >>= 1) {
    const A w = __shfl_xor_sync(kFullMask, v, o);
    v = w > v ? w : v;
  }
  return v;
}

// Block-wide sum, result returned to every thread. `scratch` holds blockDim.x/32 values in shared
// memory. blockDim.x must be a multiple of 32. Ends with a barrier so the scratch can be reused.
template <class A> __device__ __forceinline__ A block_sum(A v, A* scratch) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  v = warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  A t = lane < warps ? scratch[lane] : A(0);
  t = warp_sum(t);
  __syncthreads();
  return t;
}
template <class A> __device__ __forceinline__ A block_max(A v, A* scratch) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  v = warp_max(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  A t = lane < warps ? scratch[lane] : neg_inf<A>();
  t = warp_max(t);
  __syncthreads();
  return t;
}

// ------------------------------------------------------------------------------ log-space helpers
// log(exp(a) + exp(b)) that stays -inf when both are -inf (no NaN from inf - inf).
template <class A> __device__ __forceinline__ A log_add(A a, A b) {
  const A m = a > b ? a : b;
  if (m == neg_inf<A>()) return m;
  return m + log(exp(a - m) + exp(b - m));
}

// Online softmax state: running max and the sum of exp(x - max).
template <class A> struct MaxSum {
  A max, sum;
};
template <class A> __device__ __forceinline__ MaxSum<A> maxsum_add(MaxSum<A> s, A x) {
  if (x > s.max) {
    s.sum = s.sum * exp(s.max - x) + A(1);
    s.max = x;
  } else if (x != neg_inf<A>()) {
    s.sum += exp(x - s.max);
  }
  return s;
}
// Merge of two states, symmetric in its arguments (so a butterfly leaves the same bits in every
// lane) and NaN-keeping: maxsum_add leaves max at -inf for a NaN element (NaN > m is false) and
// makes sum NaN, so a state with max == -inf holds sum 0, or NaN when it saw a NaN; adding the sums
// (rather than dropping that state) keeps the NaN for the whole row, as PyTorch's softmax does.
template <class A> __device__ __forceinline__ MaxSum<A> maxsum_merge(MaxSum<A> a, MaxSum<A> b) {
  if (b.max == neg_inf<A>()) return {a.max, a.sum + b.sum};
  if (a.max == neg_inf<A>()) return {b.max, b.sum + a.sum};
  if (a.max >= b.max) return {a.max, a.sum + b.sum * exp(b.max - a.max)};
  return {b.max, b.sum + a.sum * exp(a.max - b.max)};
}

// ------------------------------------------------------------------------------ runtime dtypes
// ACL dtype codes (aclDataType) of the storage types kernels handle. Mixed-dtype operators whose
// general path is memory bound take a code per operand and load/store through a switch instead
// of instantiating every dtype combination; an unknown code reads NaN and writes nothing.
constexpr int kAclFloat = 0;
constexpr int kAclFloat16 = 1;
constexpr int kAclDouble = 11;
constexpr int kAclBf16 = 27;

template <class M> __device__ __forceinline__ M load_dyn(const void* p, i64 i, int dtype) {
  switch (dtype) {
    case kAclFloat: return static_cast<M>(static_cast<const float*>(p)[i]);
    case kAclFloat16: return static_cast<M>(__half2float(static_cast<const __half*>(p)[i]));
    case kAclBf16: return static_cast<M>(__bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]));
    case kAclDouble: return static_cast<M>(static_cast<const double*>(p)[i]);
    default: return quiet_nan<M>();
  }
}
// fp16/bf16 are rounded from fp32 (a double math value is first rounded to fp32).
template <class M> __device__ __forceinline__ void store_dyn(void* p, i64 i, int dtype, M v) {
  switch (dtype) {
    case kAclFloat: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case kAclFloat16: static_cast<__half*>(p)[i] = __float2half_rn(static_cast<float>(v)); break;
    case kAclBf16: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(static_cast<float>(v)); break;
    case kAclDouble: static_cast<double*>(p)[i] = static_cast<double>(v); break;
    default: break;
  }
}

// Element offsets of the linear (row-major) index `linear` in NOPS operands at once (one division
// per dimension shared by all operands), reading the tiling layout
// [rank, size[0..7], stride_0[0..7], ..., stride_{NOPS-1}[0..7]] straight from `tiling` (uniform,
// cached loads; fully unrolled, so no per-thread local-memory copy of the shape).
template <int NOPS> __device__ __forceinline__ void strided_offsets(const i64* tiling, i64 linear, i64 (&off)[NOPS]) {
  const int rank = (int)tiling[0];
#pragma unroll
  for (int k = 0; k < NOPS; ++k) off[k] = 0;
#pragma unroll
  for (int d = kMaxRank - 1; d >= 0; --d) {
    if (d < rank) {
      const i64 n = tiling[1 + d];
      const i64 q = linear / n;
      const i64 c = linear - q * n;
#pragma unroll
      for (int k = 0; k < NOPS; ++k) off[k] += c * tiling[1 + kMaxRank + k * kMaxRank + d];
      linear = q;
    }
  }
}

}  // namespace aclg
