// emu.h -- run unchanged CUDA C++ kernel source on the CPU (g++ >= 12, -std=c++20).
//
// Owns: the CUDA device-side language as the project's kernels use it (qualifiers, built-in
// variables, __syncthreads and its _count/_and/_or forms, warp shuffles/votes, atomics, static and
// dynamic shared memory, __half / __nv_bfloat16 with round-to-nearest-even, float math overloads),
// and `emu::launch`, the entry point the generated glue calls for each kernel launch.
// The Python side (driver.py) owns building, caching, argument packing and locking.
//
// Force-included:  g++ -std=c++20 -include emu.h -I emulator/include -I kernels kernel.cu
// (include/ has stand-in cuda_fp16.h / cuda_bf16.h / cuda_runtime.h so kernel files compile unchanged).
//
// Execution model. Blocks run one after another, in grid order (x fastest). Inside a block:
//   default      : every CUDA thread is a fiber; all fibers of a block run on the launching OS thread
//                  and switch only at __syncthreads / warp intrinsics / exit. Deterministic.
//                  EMU_SCHED_REVERSE=1 (environment, read per launch) runs fibers in reverse order to
//                  shake out ordering assumptions. x86-64 uses a 20-line register switch (glibc's
//                  swapcontext does a signal-mask syscall per switch, ~20x slower); other CPUs use
//                  ucontext. Under AddressSanitizer the switches are annotated for ASan.
//   -DEMU_THREADS: one std::thread per CUDA thread and std::barrier for __syncthreads: real
//                  concurrency, so -fsanitize=thread reports a missing __syncthreads as a data race.
//                  Only used in standalone executables (TSan cannot be loaded into Python).
// Only one launch per shared library runs at a time (the driver holds a per-library lock), so the
// per-launch state below is plain globals in fiber mode (no TLS lookups in kernel code).
//
// Shared memory. `__shared__` = function-local `static` storage (valid because only one block of
// a library is alive at a time); the driver finds every such object in the built library (CUDA
// forbids other function-local statics in device code) and registers it with
// emu_set_static_shared, so each block starts with static AND dynamic shared memory poisoned
// (0xFF bytes: NaN for every float type, -1 for integers), as undefined as on the GPU.
// `extern __shared__ T a[];` is rewritten by the driver to a pointer into the per-launch buffer.
//
// Errors (bad launch configuration, argument size mismatch, a deadlock: a barrier or shuffle that
// not every thread it waits for can reach, __trap) make emu::launch return non-zero with a message
// in emu_last_error(); fibers of a failed block are abandoned, never resumed. In thread mode an
// error is printed and the process aborts (standalone executables only).
//
// NOT emulated: inline PTX (asm; kernels guard it with #ifdef __CUDA_ARCH__ and call the emu:: stand-ins
// below: global_timer_ns, load_acquire, store_release), tensor cores (wmma/mma/wgmma), cp.async/TMA, textures/surfaces,
// dynamic parallelism, grid-wide sync, clusters/DSMEM, cooperative_groups, spin-waits on other
// threads (fibers never pre-empt), implicit warp-synchronous code, the GPU's weak memory model,
// fast-math ulp differences (__expf etc. map to accurate libm).
#pragma once
#include <algorithm>
#include <atomic>
#include <barrier>
#include <bit>
#include <cassert>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>
// <math.h> after <cmath>: libstdc++'s wrapper brings the float/long double overloads of std::exp,
// std::log, ... into the global namespace, so `exp(x)` on a float calls expf as on the GPU (with
// <cmath> alone an unqualified exp(float) would silently compute in double).
#include <math.h>
#include <sys/mman.h>
#if !defined(__x86_64__) && !defined(EMU_THREADS)
#include <ucontext.h>
#endif
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#define __CUDACC_EMU__ 1
#define EMU_EXPORT extern "C" __attribute__((visibility("default")))

// Profiling build (build mode "profile", clang++ -fsanitize-coverage=...,trace-loads,trace-stores
// -DEMU_PROFILE): the launch tells the memory-trace runtime (profile_rt.cpp, uninstrumented, loaded
// once per process) where shared memory is, when blocks start and end, and which CUDA thread runs.
#ifdef EMU_PROFILE
extern "C" {
void emu_prof_launch_begin(unsigned nthreads, const void* const* shared, const size_t* shared_sizes, int nshared);
void emu_prof_block_begin();
void emu_prof_thread(int tid);  // -1: no CUDA thread runs (scheduler code is not traced)
void emu_prof_block_end();
void emu_prof_launch_end();
}
#define EMU_PROF(call) call
#else
#define EMU_PROF(call) ((void)0)
#endif
// ---------------------------------------------------------------- qualifiers
#define __global__
#define __device__
#define __host__
#define __constant__
#define __managed__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __shared__ static
// __launch_bounds__(maxThreads[, minBlocks]) is rewritten by build.py into a check at the top of
// the kernel body (emu::launch_bounds), so a launch with more threads per block fails as on a GPU.
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __grid_constant__

#ifdef EMU_THREADS
#define EMU_TLS thread_local
#else
#define EMU_TLS
#endif

// ---------------------------------------------------------------- built-in vector types
struct uint3 { unsigned x, y, z; };
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
  constexpr dim3(uint3 u) : x(u.x), y(u.y), z(u.z) {}
  constexpr operator uint3() const { return {x, y, z}; }
};
#define EMU_VEC2(T, N) struct __attribute__((aligned(2 * sizeof(T)))) N##2 { T x, y; }; \
  inline N##2 make_##N##2(T a, T b) { return {a, b}; }
#define EMU_VEC4(T, N) struct __attribute__((aligned(4 * sizeof(T) > 16 ? 16 : 4 * sizeof(T)))) N##4 { T x, y, z, w; }; \
  inline N##4 make_##N##4(T a, T b, T c, T d) { return {a, b, c, d}; }
EMU_VEC2(float, float) EMU_VEC4(float, float) EMU_VEC2(int, int) EMU_VEC4(int, int)
EMU_VEC2(unsigned, uint) EMU_VEC4(unsigned, uint) EMU_VEC2(double, double)
EMU_VEC2(long long, longlong)
struct float3 { float x, y, z; };
inline float3 make_float3(float a, float b, float c) { return {a, b, c}; }

inline EMU_TLS uint3 threadIdx;
inline EMU_TLS uint3 blockIdx;
inline EMU_TLS dim3 blockDim;
inline EMU_TLS dim3 gridDim;
constexpr int warpSize = 32;

namespace emu {
// ---------------------------------------------------------------- errors
inline char g_error[4096];
inline void set_error(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
inline void set_error(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(g_error, sizeof g_error, fmt, ap);
  va_end(ap);
}
[[noreturn]] void fail_in_kernel();  // defined below: abandons the block (fibers) or aborts (threads)

// Kernels run with denormals flushed to zero (MXCSR FTZ bit 15 and DAZ bit 6 on top of the default
// 0x1F80), as CuPy compiles every kernel with -ftz=true: fp32 arithmetic flushes subnormal inputs and
// results like the GPU's .ftz instructions. Each fiber starts with this control word (thread mode: each
// thread sets it); the launching thread's own MXCSR is saved and restored by the fiber switch, so host
// code keeps IEEE semantics. (fp64 is not flushed on a GPU either way; SSE flushes it too: a known
// difference for fp64 subnormals.)
constexpr unsigned long long kKernelMxcsr = 0x1F80ull | 0x8000ull | 0x0040ull;

// Launch statistics, read by the driver after each launch (the TSan replay filter uses them).
struct Stats { unsigned long long block_barriers, warp_syncs, blocks; };
inline Stats g_stats;

inline EMU_TLS int tl_lane = 0, tl_warp = 0;
// Counters only the fiber scheduler reads; in thread mode they would be racy writes, so they vanish.
#ifdef EMU_THREADS
#define EMU_COUNT(x) ((void)0)
#else
#define EMU_COUNT(x) (++(x))
#endif
// Fibers: bumped on every arrival / release / exit; a scheduler round without progress = deadlock.
inline unsigned long long g_progress = 0;
// Threads: bumped on every completed barrier phase / warp sync / thread exit; the launch watchdog
// declares a deadlock only after 30 s without any (slow sanitized replays are not deadlocks).
inline std::atomic<unsigned long long> g_thread_progress{0};

#ifndef EMU_THREADS
void fiber_yield();
#endif

// ---------------------------------------------------------------- warps
// A warp = exchange slots + barriers keyed by the participating-lane mask. A shuffle, vote or
// __syncwarp whose mask names a lane that has exited is undefined behaviour on a GPU (a full-mask
// reduction after an early `return` of some lanes): it is an error here, whether the lane exited
// before the call or exits while others wait in it. Lanes beyond the block's last thread (a partial
// last warp) were never launched and are simply not waited for.
struct Warp {
  uint64_t slot[32] = {};
  unsigned live = 0, launched = 0;
  struct Phase { unsigned mask = 0, arrived = 0, gen = 0; bool used = false; };
  static constexpr int kPhases = 8;   // distinct masks in flight at once; more is an error
  Phase phases[kPhases];
#ifdef EMU_THREADS
  std::mutex m;
  std::condition_variable cv;
#endif
  Phase& phase(unsigned mask) {
    for (auto& p : phases) if (p.used && p.mask == mask) return p;
    for (auto& p : phases) if (!p.used) { p.used = true; p.mask = mask; return p; }
    set_error("more than %d distinct shuffle/sync masks in flight in one warp", kPhases);
    fail_in_kernel();
  }
  void release_ready() {
    for (auto& ph : phases)
      if (ph.used && ph.arrived && ph.arrived >= (unsigned)std::popcount(ph.mask & live)) {
        ph.arrived = 0; ++ph.gen; EMU_COUNT(g_progress);
      }
  }
  void sync(unsigned mask) {
    if (!(mask & (1u << tl_lane))) {
      set_error("warp sync/shuffle with mask %08x called by lane %d, which the mask does not name", mask, tl_lane);
      fail_in_kernel();
    }
    if (unsigned gone = mask & launched & ~live) {
      set_error("warp shuffle/vote/__syncwarp with mask %08x called by lane %d names lanes %08x that have already "
                "exited (undefined behaviour on a GPU: use __activemask() or keep the lanes alive)", mask, tl_lane, gone);
      fail_in_kernel();
    }
#ifdef EMU_THREADS
    std::unique_lock lk(m);
#endif
    Phase& ph = phase(mask);
    unsigned g = ph.gen;
    EMU_COUNT(g_progress);
    if (++ph.arrived >= (unsigned)std::popcount(mask & live)) {
      ph.arrived = 0; ++ph.gen; EMU_COUNT(g_stats.warp_syncs);
#ifdef EMU_THREADS
      g_thread_progress.fetch_add(1, std::memory_order_relaxed);
      cv.notify_all();
#endif
      return;
    }
#ifdef EMU_THREADS
    for (unsigned long long seen = g_thread_progress.load(); !cv.wait_for(lk, std::chrono::seconds(30), [&] { return ph.gen != g; });) {
      const unsigned long long now = g_thread_progress.load();
      if (now == seen) {
        std::fprintf(stderr, "emu: warp sync deadlock (mask %08x, live %08x)\n", mask, live);
        std::abort();
      }
      seen = now;
    }
#else
    while (ph.gen == g) fiber_yield();
#endif
  }
  void exit_lane(int lane) {
    for (auto& ph : phases)
      if (ph.used && ph.arrived && (ph.mask & (1u << lane))) {
        set_error("lane %d exits while other lanes wait in a warp shuffle/vote/__syncwarp with mask %08x that names "
                  "it (undefined behaviour on a GPU)", lane, ph.mask);
        fail_in_kernel();
      }
#ifdef EMU_THREADS
    std::lock_guard lk(m);
#endif
    live &= ~(1u << lane);
    release_ready();
#ifdef EMU_THREADS
    cv.notify_all();
#endif
  }
};

// ---------------------------------------------------------------- blocks
struct Block {
  std::vector<Warp> warps;
  std::atomic<int> count{0};
#ifdef EMU_THREADS
  struct OnPhase { void operator()() noexcept { g_thread_progress.fetch_add(1, std::memory_order_relaxed); } };
  std::barrier<OnPhase> bar;
  explicit Block(unsigned n) : warps((n + 31) / 32), bar((std::ptrdiff_t)n) { init(n); }
  void sync() { bar.arrive_and_wait(); }
  void exit_thread() { bar.arrive_and_drop(); }
#else
  unsigned live, arrived = 0, gen = 0;
  explicit Block(unsigned n) : warps((n + 31) / 32), live(n) { init(n); }
  void sync() {
    unsigned g = gen;
    ++g_progress;
    if (++arrived >= live) { arrived = 0; ++gen; ++g_stats.block_barriers; return; }
    while (gen == g) fiber_yield();
  }
  void exit_thread() {  // exited threads stop counting for __syncthreads
    --live; ++g_progress;
    if (arrived && arrived >= live) { arrived = 0; ++gen; ++g_stats.block_barriers; }
  }
#endif
  void init(unsigned n) {
    for (unsigned w = 0; w < warps.size(); ++w) {
      unsigned lanes = std::min(32u, n - 32 * w);
      warps[w].live = warps[w].launched = lanes == 32 ? 0xffffffffu : ((1u << lanes) - 1);
    }
  }
};

inline EMU_TLS Block* tl_block = nullptr;
inline unsigned char* g_dyn_smem = nullptr;  // one block alive at a time

inline Warp& warp() { return tl_block->warps[tl_warp]; }

template <class T> T* dyn_smem() {
  if (!tl_block) {
    set_error("extern __shared__ must be declared inside a kernel/device function");
    fail_in_kernel();
  }
  return reinterpret_cast<T*>(g_dyn_smem);
}

// Static shared memory objects of this library (registered by the driver, see top of file). Never
// destroyed: the library keeps no object with a destructor, so a launch still running while the
// process exits (exit() runs the destructors of loaded libraries) never reads freed memory.
struct Region { unsigned char* p; size_t n; };
inline std::vector<Region>& g_static_shared = *new std::vector<Region>;
#if defined(__SANITIZE_ADDRESS__)
__attribute__((no_sanitize("address")))
#endif
inline void poison(unsigned char* p, size_t n) {
  volatile unsigned char* q = p;  // byte loop: never runs over ASan redzones, never a libc call
  for (size_t i = 0; i < n; ++i) q[i] = 0xFF;
}

template <class T> inline uint64_t to_bits(T v) { static_assert(sizeof(T) <= 8); uint64_t b = 0; std::memcpy(&b, &v, sizeof(T)); return b; }
template <class T> inline T from_bits(uint64_t b) { T v; std::memcpy(&v, &b, sizeof(T)); return v; }

template <class T, class F> inline T shfl(unsigned mask, T v, F src_of) {
  Warp& w = warp();
  w.slot[tl_lane] = to_bits(v);
  w.sync(mask);
  int src = src_of(tl_lane);
  T r = from_bits<T>(w.slot[src & 31]);
  w.sync(mask);  // nobody overwrites a slot before everybody has read
  return r;
}
}  // namespace emu

// ---------------------------------------------------------------- synchronisation
inline void __syncthreads() { emu::tl_block->sync(); }
inline int __syncthreads_count(int p) {
  auto* b = emu::tl_block;
  b->sync();
  if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) b->count = 0;
  b->sync();
  if (p) b->count.fetch_add(1);
  b->sync();
  int r = b->count.load();
  b->sync();
  return r;
}
inline int __syncthreads_and(int p) { return __syncthreads_count(!!p) == (int)(blockDim.x * blockDim.y * blockDim.z); }
inline int __syncthreads_or(int p) { return __syncthreads_count(!!p) != 0; }
inline void __syncwarp(unsigned mask = 0xffffffffu) { emu::warp().sync(mask); }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_block() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline unsigned __activemask() { return emu::warp().live; }
namespace emu {
// The check build.py inserts at the top of a kernel declared __launch_bounds__(max_threads, ...).
inline void launch_bounds(long long max_threads) {
  const unsigned long long n = (unsigned long long)blockDim.x * blockDim.y * blockDim.z;
  if (n > (unsigned long long)max_threads) {
    set_error("launch with %llu threads per block exceeds the kernel's __launch_bounds__(%lld) (a GPU refuses the "
              "launch: too many resources requested)", n, max_threads);
    fail_in_kernel();
  }
}
}  // namespace emu
[[noreturn]] inline void __trap() { emu::set_error("__trap() called"); emu::fail_in_kernel(); }
inline long long clock64() { return std::chrono::steady_clock::now().time_since_epoch().count(); }
inline void __nanosleep(unsigned ns) { std::this_thread::sleep_for(std::chrono::nanoseconds(ns)); }
namespace emu {
// Stand-ins for the inline PTX a kernel guards with #ifdef __CUDA_ARCH__ (emulated code never sees it):
// %globaltimer (ns, monotonic), ld.acquire.gpu.u32 and st.release.gpu.u32.
inline unsigned long long global_timer_ns() {
  return (unsigned long long)std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::steady_clock::now().time_since_epoch()).count();
}
inline int load_acquire(const int* p) { return std::atomic_ref<int>(*const_cast<int*>(p)).load(std::memory_order_acquire); }
inline void store_release(int* p, int v) { std::atomic_ref<int>(*p).store(v, std::memory_order_release); }
}  // namespace emu

// ---------------------------------------------------------------- warp intrinsics
template <class T> T __shfl_sync(unsigned m, T v, int src, int width = 32) {
  return emu::shfl(m, v, [&](int l) { return (l & ~(width - 1)) + (src & (width - 1)); });
}
template <class T> T __shfl_xor_sync(unsigned m, T v, int lm, int width = 32) {
  return emu::shfl(m, v, [&](int l) { int s = l ^ lm; return s >= ((l / width) + 1) * width ? l : s; });
}
template <class T> T __shfl_up_sync(unsigned m, T v, unsigned d, int width = 32) {
  return emu::shfl(m, v, [&](int l) { int s = l - (int)d; return s < (l & ~(width - 1)) ? l : s; });
}
template <class T> T __shfl_down_sync(unsigned m, T v, unsigned d, int width = 32) {
  return emu::shfl(m, v, [&](int l) { int s = l + (int)d; return s >= (l & ~(width - 1)) + width ? l : s; });
}
inline unsigned __ballot_sync(unsigned m, int p) {
  auto& w = emu::warp();
  w.slot[emu::tl_lane] = p ? 1 : 0;
  w.sync(m);
  unsigned r = 0;
  for (int l = 0; l < 32; ++l) if ((m & w.live & (1u << l)) && w.slot[l]) r |= 1u << l;
  w.sync(m);
  return r;
}
inline int __any_sync(unsigned m, int p) { return __ballot_sync(m, p) != 0; }
inline int __all_sync(unsigned m, int p) { return __ballot_sync(m, p) == (m & emu::warp().live); }
inline unsigned __reduce_add_sync(unsigned m, unsigned v) { unsigned s = 0; for (int o = 0; o < 32; ++o) s += __shfl_sync(m, v, o); return s; }

// ---------------------------------------------------------------- atomics (std::atomic_ref)
template <class T> T atomicAdd(T* p, T v) {
  if constexpr (std::is_arithmetic_v<T>) return std::atomic_ref<T>(*p).fetch_add(v);
  else {  // __half / __nv_bfloat16: CAS loop on the raw bits
    static_assert(sizeof(T) == 2);
    std::atomic_ref<uint16_t> a(*reinterpret_cast<uint16_t*>(p));
    uint16_t old = a.load(), nw;
    do { T o = std::bit_cast<T>(old); nw = std::bit_cast<uint16_t>(T(float(o) + float(v))); } while (!a.compare_exchange_weak(old, nw));
    return std::bit_cast<T>(old);
  }
}
template <class T> T atomicSub(T* p, T v) { return std::atomic_ref<T>(*p).fetch_sub(v); }
template <class T> T atomicExch(T* p, T v) { return std::atomic_ref<T>(*p).exchange(v); }
template <class T> T atomicCAS(T* p, T cmp, T v) { std::atomic_ref<T>(*p).compare_exchange_strong(cmp, v); return cmp; }
template <class T> T atomicAnd(T* p, T v) { return std::atomic_ref<T>(*p).fetch_and(v); }
template <class T> T atomicOr(T* p, T v) { return std::atomic_ref<T>(*p).fetch_or(v); }
template <class T> T atomicXor(T* p, T v) { return std::atomic_ref<T>(*p).fetch_xor(v); }
template <class T> T atomicMax(T* p, T v) { std::atomic_ref<T> a(*p); T o = a.load(); while (o < v && !a.compare_exchange_weak(o, v)) {} return o; }
template <class T> T atomicMin(T* p, T v) { std::atomic_ref<T> a(*p); T o = a.load(); while (v < o && !a.compare_exchange_weak(o, v)) {} return o; }
inline unsigned atomicInc(unsigned* p, unsigned lim) {
  std::atomic_ref<unsigned> a(*p); unsigned o = a.load();
  while (!a.compare_exchange_weak(o, o >= lim ? 0u : o + 1)) {}
  return o;
}
#define atomicAdd_block atomicAdd
#define atomicAdd_system atomicAdd

// ---------------------------------------------------------------- integer / float intrinsics
inline int __popc(unsigned x) { return std::popcount(x); }
inline int __popcll(unsigned long long x) { return std::popcount(x); }
inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) { unsigned r = 0; for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i); return r; }
inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((uint64_t)a * b) >> 32); }
inline int __mulhi(int a, int b) { return (int)(((int64_t)a * b) >> 32); }
inline long long __mul64hi(long long a, long long b) { return (long long)(((__int128)a * b) >> 64); }
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) { return (unsigned long long)(((unsigned __int128)a * b) >> 64); }
inline int __float_as_int(float f) { return std::bit_cast<int>(f); }
inline unsigned __float_as_uint(float f) { return std::bit_cast<unsigned>(f); }
inline float __int_as_float(int i) { return std::bit_cast<float>(i); }
inline float __uint_as_float(unsigned i) { return std::bit_cast<float>(i); }
inline long long __double_as_longlong(double d) { return std::bit_cast<long long>(d); }
inline double __longlong_as_double(long long i) { return std::bit_cast<double>(i); }
// fast-math intrinsics map to the accurate libm versions (results may differ from GPU in last ulps)
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __log2f(float x) { return std::log2(x); }
inline float __sinf(float x) { return std::sin(x); }
inline float __cosf(float x) { return std::cos(x); }
inline float __tanf(float x) { return std::tan(x); }
inline float __powf(float a, float b) { return std::pow(a, b); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return std::sqrt(x); }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline double __fma_rn(double a, double b, double c) { return std::fma(a, b, c); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline float __saturatef(float x) { return x < 0.f ? 0.f : (x > 1.f ? 1.f : (x == x ? x : 0.f)); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float exp10f(float x) { return std::pow(10.0f, x); }
inline void sincosf(float x, float* s, float* c) { *s = std::sin(x); *c = std::cos(x); }
inline float normcdff(float x) { return 0.5f * std::erfc(-x * 0.70710678118654752f); }
template <class T> inline T __ldg(const T* p) { return *p; }
template <class T> inline T __ldcs(const T* p) { return *p; }
template <class T> inline T __ldcg(const T* p) { return *p; }
template <class T> inline void __stcs(T* p, T v) { *p = v; }
template <class T> inline void __stcg(T* p, T v) { *p = v; }
// CUDA's overloaded device min/max (mixed int/unsigned follows the usual conversions)
template <class A, class B> inline auto min(A a, B b) { using C = std::common_type_t<A, B>; return (C)b < (C)a ? (C)b : (C)a; }
template <class A, class B> inline auto max(A a, B b) { using C = std::common_type_t<A, B>; return (C)a < (C)b ? (C)b : (C)a; }

// ---------------------------------------------------------------- __half / __nv_bfloat16 (round-to-nearest-even)
namespace emu {
inline uint16_t f2h_rne(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return sign | (ax > 0x7f800000u ? 0x7e00u : 0x7c00u);  // NaN / Inf
  if (ax >= 0x477ff000u) return sign | 0x7c00u;                                   // overflow -> Inf
  if (ax < 0x38800000u) {                                                        // subnormal / zero
    if (ax <= 0x33000000u) return sign;                                          // <= 2^-25 -> +-0 (tie to even)
    uint32_t m = (ax & 0x7fffffu) | 0x800000u; int e = (int)(ax >> 23);
    int shift = 126 - e;                                                         // 14..24
    uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return sign | r;
  }
  uint32_t r = ((ax - 0x38000000u) >> 13), rem = ax & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
  return sign | r;
}
inline float h2f(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ffu;
  if (e == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (m << 13));
  if (e == 0) { float v = std::ldexp((float)m, -24); return sign ? -v : v; }
  return std::bit_cast<float>(sign | ((e + 112) << 23) | (m << 13));
}
inline uint16_t f2bf_rne(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);  // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}
inline float bf2f(uint16_t b) { return std::bit_cast<float>((uint32_t)b << 16); }
}  // namespace emu

#define EMU_HALF_TYPE(NAME, TOBITS, TOFLOAT)                                                \
  struct NAME {                                                                             \
    uint16_t __x;                                                                           \
    NAME() = default;                                                                       \
    NAME(float f) : __x(emu::TOBITS(f)) {}                                                  \
    NAME(double f) : __x(emu::TOBITS((float)f)) {}                                          \
    NAME(int i) : __x(emu::TOBITS((float)i)) {}                                             \
    operator float() const { return emu::TOFLOAT(__x); }                                    \
    static NAME raw(uint16_t b) { NAME h; h.__x = b; return h; }                            \
    NAME& operator+=(NAME o) { return *this = NAME(float(*this) + float(o)); }              \
    NAME& operator-=(NAME o) { return *this = NAME(float(*this) - float(o)); }              \
    NAME& operator*=(NAME o) { return *this = NAME(float(*this) * float(o)); }              \
    NAME& operator/=(NAME o) { return *this = NAME(float(*this) / float(o)); }              \
  };                                                                                        \
  inline NAME operator+(NAME a, NAME b) { return NAME(float(a) + float(b)); }               \
  inline NAME operator-(NAME a, NAME b) { return NAME(float(a) - float(b)); }               \
  inline NAME operator*(NAME a, NAME b) { return NAME(float(a) * float(b)); }               \
  inline NAME operator/(NAME a, NAME b) { return NAME(float(a) / float(b)); }               \
  inline NAME operator-(NAME a) { return NAME::raw(a.__x ^ 0x8000u); }                      \
  inline bool operator<(NAME a, NAME b) { return float(a) < float(b); }                     \
  inline bool operator>(NAME a, NAME b) { return float(a) > float(b); }                     \
  inline bool operator<=(NAME a, NAME b) { return float(a) <= float(b); }                   \
  inline bool operator>=(NAME a, NAME b) { return float(a) >= float(b); }                   \
  inline bool operator==(NAME a, NAME b) { return float(a) == float(b); }                   \
  inline bool operator!=(NAME a, NAME b) { return float(a) != float(b); }                   \
  inline NAME __hadd(NAME a, NAME b) { return a + b; }                                      \
  inline NAME __hsub(NAME a, NAME b) { return a - b; }                                      \
  inline NAME __hmul(NAME a, NAME b) { return a * b; }                                      \
  inline NAME __hdiv(NAME a, NAME b) { return a / b; }                                      \
  inline NAME __hfma(NAME a, NAME b, NAME c) { return NAME(std::fma(float(a), float(b), float(c))); } \
  inline NAME __hmax(NAME a, NAME b) { return float(a) < float(b) ? b : a; }                \
  inline NAME __hmin(NAME a, NAME b) { return float(b) < float(a) ? b : a; }                \
  inline NAME __habs(NAME a) { return NAME::raw(a.__x & 0x7fffu); }                         \
  inline NAME __hneg(NAME a) { return -a; }                                                 \
  inline bool __hisnan(NAME a) { return std::isnan(float(a)); }
EMU_HALF_TYPE(__half, f2h_rne, h2f)
EMU_HALF_TYPE(__nv_bfloat16, f2bf_rne, bf2f)
using half = __half;
inline __half __float2half(float f) { return __half(f); }
inline __half __float2half_rn(float f) { return __half(f); }
inline float __half2float(__half h) { return float(h); }
inline __half __ushort_as_half(unsigned short b) { return __half::raw(b); }
inline unsigned short __half_as_ushort(__half h) { return h.__x; }
inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
inline float __bfloat162float(__nv_bfloat16 h) { return float(h); }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short b) { return __nv_bfloat16::raw(b); }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
struct __align__(4) __half2 { __half x, y; };
inline __half2 __halves2half2(__half a, __half b) { return {a, b}; }
inline __half2 __floats2half2_rn(float a, float b) { return {__half(a), __half(b)}; }
inline float2 __half22float2(__half2 h) { return {float(h.x), float(h.y)}; }
inline __half2 __hadd2(__half2 a, __half2 b) { return {a.x + b.x, a.y + b.y}; }
inline __half2 __hmul2(__half2 a, __half2 b) { return {a.x * b.x, a.y * b.y}; }

// ---------------------------------------------------------------- fibers
#ifndef EMU_THREADS
namespace emu {
#if defined(__x86_64__)
// switch(save, to): pushes the callee-saved registers and the SSE/x87 control words of the running
// context on its stack, stores its stack pointer in *save, and resumes the context whose stack
// pointer is `to`. A new fiber's stack is laid out so that the first switch "returns" into
// fiber_entry (see Fiber::prepare).
extern "C" void emu_fiber_switch(void** save, void* to);
asm(R"(
  .text
  .weak emu_fiber_switch
  .hidden emu_fiber_switch
  .type emu_fiber_switch,@function
emu_fiber_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size emu_fiber_switch, .-emu_fiber_switch
)");
#endif

struct Fiber {
#if defined(__x86_64__)
  void* sp = nullptr;
#else
  ucontext_t ctx;
#endif
  unsigned char* stack = nullptr;
  size_t stack_size = 0;
  unsigned tid = 0;
  bool finished = false;
};

// Scheduler state of the running launch (one launch per library at a time).
inline Fiber g_sched;             // the launching OS thread's own context
inline Fiber* g_cur = nullptr;    // the fiber running now
inline bool g_failed = false;     // set by fail_in_kernel; the block is abandoned
inline void (*g_body)(unsigned tid) = nullptr;
#if defined(__SANITIZE_ADDRESS__)
inline const void* g_sched_stack_bottom = nullptr;
inline size_t g_sched_stack_size = 0;
#endif

inline void raw_switch(Fiber& from, Fiber& to) {
#if defined(__x86_64__)
  emu_fiber_switch(&from.sp, to.sp);
#else
  swapcontext(&from.ctx, &to.ctx);
#endif
}

// Switch from the scheduler into fiber f, and back (ASan is told about both stack changes).
inline void enter_fiber(Fiber& f) {
  g_cur = &f;
#if defined(__SANITIZE_ADDRESS__)
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, f.stack, f.stack_size);
  raw_switch(g_sched, f);
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#else
  raw_switch(g_sched, f);
#endif
  g_cur = nullptr;
}
// From fiber code back to the scheduler. `final`: this fiber will never run again.
inline void leave_fiber(bool final) {
  Fiber& f = *g_cur;
#if defined(__SANITIZE_ADDRESS__)
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(final ? nullptr : &fake, g_sched_stack_bottom, g_sched_stack_size);
  raw_switch(f, g_sched);
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#else
  (void)final;
  raw_switch(f, g_sched);
#endif
}
inline void fiber_yield() { leave_fiber(false); }

// Not [[noreturn]]: under ASan a call to a noreturn function is preceded by __asan_handle_no_return,
// which must not run before __sanitizer_finish_switch_fiber has told ASan about this stack.
#if defined(__SANITIZE_ADDRESS__)
__attribute__((no_sanitize("address"), noinline))
#endif
inline void fiber_main() {
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_finish_switch_fiber(nullptr, &g_sched_stack_bottom, &g_sched_stack_size);
#endif
  Fiber& f = *g_cur;
  g_body(f.tid);
  f.finished = true;
  leave_fiber(true);
  __builtin_unreachable();
}
#if defined(__x86_64__)
extern "C"
#if defined(__SANITIZE_ADDRESS__)
__attribute__((no_sanitize("address")))
#endif
inline void emu_fiber_entry() { fiber_main(); }
#endif

// Fiber stacks: one mapping per library, grown on demand, reused by every block and launch (a fresh
// mmap per launch costs a page fault per stack page touched). Each stack has a PROT_NONE guard page
// below it, so an overflow faults instead of silently corrupting the neighbouring fiber's stack.
// Under ASan the pool's shadow is cleared before it is unmapped: every fiber ends inside a frame that
// never returns (leave_fiber's final switch), whose redzones stay poisoned, and munmap leaves the
// shadow as it is. Whatever was mapped there next (a pymalloc arena) then read as a
// "stack-buffer-underflow" to ASan's memcpy check, which aborted the ASan+UBSan CI run.
struct StackPool {
  unsigned char* base = nullptr;
  size_t stride = 0, count = 0;
  size_t stack_bytes() {
    static size_t kb = [] { const char* e = std::getenv("EMU_STACK_KB"); return e ? (size_t)std::atoi(e) : (size_t)128; }();
    return kb * 1024;
  }
  unsigned char* get(unsigned n) {  // -> base of stack 0 (usable bytes: stack_bytes())
    if (n > count) {
      if (base) {
#if defined(__SANITIZE_ADDRESS__)
        __asan_unpoison_memory_region(base, stride * count);
#endif
        munmap(base, stride * count);
      }
      stride = stack_bytes() + 4096;
      base = (unsigned char*)mmap(nullptr, stride * n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (base == MAP_FAILED) { base = nullptr; count = 0; return nullptr; }
      for (unsigned i = 0; i < n; ++i) mprotect(base + i * stride, 4096, PROT_NONE);
      count = n;
    }
    return base;
  }
  unsigned char* stack(unsigned i) { return base + i * stride + 4096; }
};
inline StackPool g_stacks;
// Exported by each library (EMU_LIBRARY_EXPORTS): where its pool is mapped (tests check its shadow).
#define EMU_STACK_POOL_EXPORT \
  EMU_EXPORT void emu_stack_pool(void** base, size_t* bytes) { *base = emu::g_stacks.base; *bytes = emu::g_stacks.stride * emu::g_stacks.count; }

inline void prepare(Fiber& f, unsigned tid, unsigned char* stack, size_t size) {
  f.tid = tid; f.finished = false; f.stack = stack; f.stack_size = size;
#if defined(__x86_64__)
  uintptr_t top = ((uintptr_t)stack + size) & ~(uintptr_t)15;
  uint64_t* s = (uint64_t*)top;
  s[-1] = 0;                                   // fake return address of fiber_entry (never used)
  s[-2] = (uint64_t)(uintptr_t)&emu_fiber_entry;  // `ret` of the first switch lands here
  for (int r = 3; r <= 8; ++r) s[-r] = 0;      // rbp rbx r12 r13 r14 r15
  s[-9] = kKernelMxcsr | (0x037Full << 32);    // kernel MXCSR (FTZ+DAZ), x87 control word
  f.sp = &s[-9];
#else
  getcontext(&f.ctx);
  f.ctx.uc_stack.ss_sp = stack;
  f.ctx.uc_stack.ss_size = size;
  f.ctx.uc_link = nullptr;
  makecontext(&f.ctx, (void (*)())fiber_main, 0);
#endif
}
}  // namespace emu
#endif  // !EMU_THREADS

namespace emu {
[[noreturn]] inline void fail_in_kernel() {
#ifdef EMU_THREADS
  std::fprintf(stderr, "emu: %s\n", g_error);
  std::abort();
#else
  g_failed = true;
  ++g_progress;
  leave_fiber(true);
  __builtin_unreachable();
#endif
}

// ---------------------------------------------------------------- launch
template <class... A, std::size_t... I>
inline void call_unpacked(void (*fn)(A...), void** args, std::index_sequence<I...>) {
  fn(*static_cast<std::remove_cvref_t<A>*>(args[I])...);
}

// Byte size of each kernel parameter and whether it is a pointer (the driver's argument check, and
// the launch recorder, which must know which arguments point into memory). Returns the count.
template <class... A> int signature(void (*)(A...), size_t* out, unsigned char* is_ptr, int cap) {
  const size_t want[] = {sizeof(std::remove_cvref_t<A>)..., 0};
  const unsigned char ptr[] = {(unsigned char)std::is_pointer_v<std::remove_cvref_t<A>>..., 0};
  for (int i = 0; i < (int)sizeof...(A) && i < cap; ++i) { out[i] = want[i]; is_ptr[i] = ptr[i]; }
  return (int)sizeof...(A);
}

struct LaunchLimits { size_t max_dynamic_smem; };
constexpr size_t kDefaultSmem = 48 * 1024, kMaxOptinSmem = 227 * 1024;

inline bool env_flag(const char* n) { const char* e = std::getenv(n); return e && e[0] == '1'; }

// args: like cudaLaunchKernel, args[i] points at the value of parameter i; sizes[i] = its byte size.
// Returns 0 on success, non-zero with emu_last_error() set otherwise.
template <class... A>
int launch(const char* name, void (*fn)(A...), dim3 grid, dim3 block, size_t smem, void** args,
           const size_t* sizes, int nargs, size_t max_dynamic_smem = kDefaultSmem) {
  g_error[0] = 0;
  g_stats = {};
  constexpr size_t want[] = {sizeof(std::remove_cvref_t<A>)..., 0};
  if (nargs != (int)sizeof...(A)) { set_error("%s takes %zu arguments, got %d", name, sizeof...(A), nargs); return 1; }
  for (int i = 0; i < nargs; ++i)
    if (sizes[i] != want[i]) {
      set_error("%s argument %d is %zu bytes, got %zu (pass numpy scalars of the exact type)", name, i, want[i], sizes[i]);
      return 1;
    }
  const unsigned long long nthr_ll = (unsigned long long)block.x * block.y * block.z;
  if (block.x == 0 || block.y == 0 || block.z == 0 || block.x > 1024 || block.y > 1024 || block.z > 64 || nthr_ll > 1024) {
    set_error("%s: invalid block (%u,%u,%u): each dimension >= 1, x,y <= 1024, z <= 64, at most 1024 threads",
              name, block.x, block.y, block.z);
    return 2;
  }
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535) {
    set_error("%s: invalid grid (%u,%u,%u)", name, grid.x, grid.y, grid.z);
    return 2;
  }
  if (smem > std::min(max_dynamic_smem, kMaxOptinSmem)) {
    set_error("%s: %zu bytes of dynamic shared memory exceed the kernel's limit of %zu (48 KiB unless raised with "
              "max_dynamic_shared_size_bytes, at most %zu)", name, smem, std::min(max_dynamic_smem, kMaxOptinSmem), kMaxOptinSmem);
    return 2;
  }
  const unsigned nthr = (unsigned)nthr_ll;
  std::vector<unsigned char> dyn(smem);
  g_dyn_smem = smem ? dyn.data() : nullptr;
  // Thread mode (sanitizer replays): EMU_MAX_BLOCKS=n runs only the first n blocks of the grid
  // (gridDim unchanged), enough to expose intra-block races at a fraction of the cost.
  unsigned long long max_blocks = ~0ull;
  if (const char* e = std::getenv("EMU_MAX_BLOCKS")) max_blocks = std::strtoull(e, nullptr, 10);
  unsigned long long nblocks = 0;
  auto enter = [&](Block& blk, unsigned t, unsigned bx, unsigned by, unsigned bz) {
    threadIdx = {t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
    blockIdx = {bx, by, bz};
    blockDim = block;
    gridDim = grid;
    tl_block = &blk;
    tl_lane = (int)(t % 32);
    tl_warp = (int)(t / 32);
  };
#ifndef EMU_THREADS
  const bool reverse = env_flag("EMU_SCHED_REVERSE");
  unsigned char* stacks = g_stacks.get(nthr);
  if (!stacks) { set_error("%s: cannot map %u fiber stacks", name, nthr); return 3; }
  std::vector<Fiber> fibers(nthr);
#ifdef EMU_PROFILE
  {
    std::vector<const void*> sp;
    std::vector<size_t> sn;
    for (auto& r : g_static_shared) { sp.push_back(r.p); sn.push_back(r.n); }
    if (smem) { sp.push_back(dyn.data()); sn.push_back(smem); }
    emu_prof_launch_begin(nthr, sp.data(), sn.data(), (int)sp.size());
  }
#endif
  Block* cur_blk = nullptr;
  unsigned cur_bx = 0, cur_by = 0, cur_bz = 0;
  static void (*s_fn)(A...);
  static void** s_args;
  static Block** s_blk;
  s_fn = fn; s_args = args; s_blk = &cur_blk;
  // Fiber body: plain function pointer (no std::function allocation per thread).
  g_body = [](unsigned) {
    call_unpacked(s_fn, s_args, std::index_sequence_for<A...>{});
    (*s_blk)->exit_thread();
    (*s_blk)->warps[tl_warp].exit_lane(tl_lane);
  };
  (void)cur_bx; (void)cur_by; (void)cur_bz;
#endif
  int rc = 0;
  for (unsigned bz = 0; bz < grid.z && !rc; ++bz)
    for (unsigned by = 0; by < grid.y && !rc; ++by)
      for (unsigned bx = 0; bx < grid.x && !rc; ++bx) {
        if (nblocks++ >= max_blocks) { bz = grid.z; by = grid.y; break; }
        Block blk(nthr);
        for (auto& r : g_static_shared) poison(r.p, r.n);
        if (smem) poison(dyn.data(), smem);
        ++g_stats.blocks;
#ifdef EMU_THREADS
        std::mutex done_m;
        std::condition_variable done_cv;
        unsigned done = 0;
        std::vector<std::thread> ts;
        ts.reserve(nthr);
        for (unsigned t = 0; t < nthr; ++t)
          ts.emplace_back([&, t] {
            enter(blk, t, bx, by, bz);
#if defined(__x86_64__)
            __builtin_ia32_ldmxcsr((unsigned)kKernelMxcsr);
#endif
            call_unpacked(fn, args, std::index_sequence_for<A...>{});
            blk.exit_thread();
            blk.warps[tl_warp].exit_lane(tl_lane);
            tl_block = nullptr;
            std::lock_guard lk(done_m);
            if (++done == nthr) done_cv.notify_all();
          });
        {  // watchdog: a __syncthreads that not every live thread reaches would hang forever
          std::unique_lock lk(done_m);
          unsigned long long seen = g_thread_progress.load();
          while (!done_cv.wait_for(lk, std::chrono::seconds(30), [&] { return done == nthr; })) {
            const unsigned long long now = g_thread_progress.load() + done;
            if (now == seen) {
              std::fprintf(stderr, "emu: %s block (%u,%u,%u): %u of %u threads finished, no progress for 30 s -- deadlock\n",
                           name, bx, by, bz, done, nthr);
              std::abort();
            }
            seen = now;
          }
        }
        for (auto& th : ts) th.join();
#else
        cur_blk = &blk;
        for (unsigned t = 0; t < nthr; ++t) prepare(fibers[t], t, g_stacks.stack(t), g_stacks.stack_bytes());
        g_failed = false;
        EMU_PROF(emu_prof_block_begin());
        unsigned remaining = nthr;
        while (remaining && !g_failed) {
          const unsigned long long before = g_progress;
          const unsigned fin_before = remaining;
          for (unsigned k = 0; k < nthr; ++k) {
            const unsigned t = reverse ? nthr - 1 - k : k;
            if (fibers[t].finished) continue;
            enter(blk, t, bx, by, bz);
            EMU_PROF(emu_prof_thread((int)t));
            enter_fiber(fibers[t]);
            EMU_PROF(emu_prof_thread(-1));
            if (g_failed) break;
            if (fibers[t].finished) --remaining;
          }
          if (g_failed) {
            char msg[sizeof g_error];
            std::snprintf(msg, sizeof msg, "%s block (%u,%u,%u) thread (%u,%u,%u): %s", name, bx, by, bz,
                          threadIdx.x, threadIdx.y, threadIdx.z, g_error);
            std::memcpy(g_error, msg, sizeof msg);
            rc = 4;
          } else if (remaining && g_progress == before && remaining == fin_before) {
            set_error("%s block (%u,%u,%u): deadlock -- %u of %u threads wait at a barrier (__syncthreads or a "
                      "warp shuffle/vote/__syncwarp) that the threads it waits for never reach",
                      name, bx, by, bz, remaining, nthr);
            rc = 5;
            break;
          }
        }
        EMU_PROF(emu_prof_block_end());
        if (rc) {
#if defined(__SANITIZE_ADDRESS__)
          // Abandoned fibers leave poisoned frames on their stacks; the pool reuses them.
          __asan_unpoison_memory_region(g_stacks.base, g_stacks.stride * g_stacks.count);
#endif
        }
        tl_block = nullptr;
#endif
      }
  g_dyn_smem = nullptr;
#if defined(EMU_PROFILE) && !defined(EMU_THREADS)
  emu_prof_launch_end();
#endif
  return rc;
}
}  // namespace emu

// ---------------------------------------------------------------- per-library exports
// The generated glue expands this once per kernel library: the functions the driver calls besides
// the per-kernel launch/signature entries.
#ifndef EMU_STACK_POOL_EXPORT   // thread mode: no fiber stacks
#define EMU_STACK_POOL_EXPORT
#endif
#define EMU_LIBRARY_EXPORTS                                                                   \
  EMU_STACK_POOL_EXPORT                                                                        \
  EMU_EXPORT const char* emu_last_error() { return emu::g_error; }                            \
  EMU_EXPORT void emu_last_stats(unsigned long long* out) {                                    \
    out[0] = emu::g_stats.block_barriers; out[1] = emu::g_stats.warp_syncs; out[2] = emu::g_stats.blocks; } \
  EMU_EXPORT void emu_set_static_shared(void* const* p, const size_t* n, int count) {         \
    emu::g_static_shared.clear();                                                              \
    for (int i = 0; i < count; ++i) emu::g_static_shared.push_back({(unsigned char*)p[i], n[i]}); }
