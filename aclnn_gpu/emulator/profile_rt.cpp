// profile_rt.cpp -- the memory-trace runtime of the emulator's profiling build.
//
// Compiled WITHOUT -fsanitize-coverage (it implements the callbacks that instrumented kernel code
// calls: __sanitizer_cov_load1/2/4/8/16 and __sanitizer_cov_store*), into one shared library loaded
// RTLD_GLOBAL before any profiled kernel library, so every kernel library shares its state (the L2
// model spans the launches of one operator call whatever file their kernels come from).
//
// What it keeps: only accesses made while a CUDA thread runs (emu.h calls emu_prof_thread around each
// fiber switch) to memory inside the launch's device allocations (set by the driver) or its shared
// memory (static and dynamic, set by emu.h). Nothing is logged per access beyond the running block:
//  * an access site is the return address of the callback, mapped to a site id by a table the
//    driver registers (objdump + llvm-symbolizer at build time: one id per file:line:column and
//    load/store, so the 8- and 4-byte pieces clang splits a 16-byte vector access into share an id);
//  * a lane's access that continues its own previous access of the same site (contiguous, merged
//    size <= 16 and aligned to it) is merged into it: the GPU's vector width is recovered;
//  * the k-th execution of a site by the lanes of one warp is one warp request (fibers run each
//    thread's accesses in program order, so this is exact for convergent code);
//  * at the end of each block its requests are aggregated per site: requests, distinct 32-byte
//    sectors, the ideal sector count for the width, distinct bytes; shared memory: wavefronts (the
//    most distinct 4-byte words any bank must serve) against the ideal;
//  * global addresses are taken relative to a 256-byte aligned base per allocation, as cudaMalloc
//    aligns (host allocations of the emulated device and NumPy's arrays are only 16- or 64-aligned,
//    which would make a warp's 512-byte request straddle one sector more than on a GPU);
//  * per launch: bitmaps of the 32-byte sectors read and written in each allocation (cold-cache DRAM
//    traffic = sectors read + sectors written), and an LRU model of the L2 over 32-byte sectors that
//    persists across launches until reset (read misses + sectors newly made dirty = DRAM traffic).
// Block sampling: with emu_prof_configure(every > 1) only every n-th block is traced (all run).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <unordered_map>
#include <vector>

namespace {

struct Range {
  uint64_t lo = 0, hi = 0;
  uint64_t gpu_base = 0;  // lo rounded up to 256 bytes: where cudaMalloc would have put the allocation
  std::vector<uint64_t> read_bits, write_bits;  // one bit per 32-byte sector (global memory only)
};

struct Event {
  uint64_t addr;          // global: the address in the allocation moved to its 256-aligned GPU base
  uint32_t site, k, tid;
  uint16_t size, range;   // range: index in g_global (global accesses)
  uint8_t store, shared;
};

constexpr int kStatFields = 11;
struct SiteStat {  // per launch, per site; the order is that of emu_prof_result_sites's rows
  uint64_t requests = 0, sectors = 0, ideal_sectors = 0, bytes = 0, lane_accesses = 0, max_width = 0,
           wavefronts = 0, ideal_wavefronts = 0, store = 0, shared = 0, lanes = 0;
};

constexpr uint32_t kUnknownSite = 0xFFFFFFFFu;

// LRU over 32-byte sectors: intrusive doubly linked list in arrays, hash map sector -> node.
struct L2Model {
  uint64_t capacity = (50ull << 20) / 32;
  std::unordered_map<uint64_t, uint32_t> where;
  std::vector<uint64_t> key;
  std::vector<uint32_t> prev, next;
  std::vector<uint8_t> dirty;
  uint32_t head = UINT32_MAX, tail = UINT32_MAX;
  uint64_t read_misses = 0, dirtied = 0;  // counters of the current launch

  void reset(uint64_t bytes) {
    capacity = std::max<uint64_t>(1, bytes / 32);
    where.clear(); key.clear(); prev.clear(); next.clear(); dirty.clear();
    head = tail = UINT32_MAX;
  }
  void unlink(uint32_t n) {
    if (prev[n] != UINT32_MAX) next[prev[n]] = next[n]; else head = next[n];
    if (next[n] != UINT32_MAX) prev[next[n]] = prev[n]; else tail = prev[n];
  }
  void push_front(uint32_t n) {
    prev[n] = UINT32_MAX; next[n] = head;
    if (head != UINT32_MAX) prev[head] = n;
    head = n;
    if (tail == UINT32_MAX) tail = n;
  }
  void touch(uint64_t sector, bool store) {
    auto it = where.find(sector);
    if (it != where.end()) {
      const uint32_t n = it->second;
      if (n != head) { unlink(n); push_front(n); }
      if (store && !dirty[n]) { dirty[n] = 1; ++dirtied; }
      return;
    }
    uint32_t n;
    if (key.size() < capacity) {
      n = (uint32_t)key.size();
      key.push_back(sector); prev.push_back(0); next.push_back(0); dirty.push_back(0);
    } else {  // evict the least recently used sector (a dirty one was counted when it was dirtied)
      n = tail;
      unlink(n);
      where.erase(key[n]);
      key[n] = sector;
    }
    where.emplace(sector, n);
    push_front(n);
    dirty[n] = store ? 1 : 0;
    if (store) ++dirtied; else ++read_misses;
  }
};

std::vector<Range> g_global;                    // the launch's device allocations
std::vector<std::pair<uint64_t, uint64_t>> g_shared;  // [lo, hi) of the launch's shared memory
std::unordered_map<uint64_t, uint32_t> g_site_of_pc;  // callback return address -> site id
int g_tid = -1;
bool g_trace_block = false, g_in_launch = false;
unsigned g_nthreads = 0, g_sample_every = 1;
uint64_t g_block_counter = 0, g_blocks_traced = 0, g_events_traced = 0, g_unknown_sites = 0;
std::vector<Event> g_events;
std::vector<int64_t> g_last_event;               // per thread: its latest event in g_events
std::unordered_map<uint32_t, std::vector<uint32_t>> g_exec_count;  // site -> per-thread executions
std::unordered_map<uint32_t, SiteStat> g_site_stats;
L2Model g_l2;

inline uint64_t pow2_ceil(uint64_t v) { uint64_t p = 1; while (p < v) p <<= 1; return p; }

inline void record(uint64_t a, unsigned size, bool store, uintptr_t pc) {
  if (g_tid < 0 || !g_trace_block) return;
  bool shared = false, found = false;
  uint16_t range = 0;
  for (const Range& r : g_global) {
    if (a >= r.lo && a < r.hi) { found = true; a = a - r.lo + r.gpu_base; break; }
    ++range;
  }
  if (!found) {
    for (const auto& r : g_shared)
      if (a >= r.first && a < r.second) { found = shared = true; break; }
    if (!found) return;
  }
  uint32_t site = kUnknownSite;
  if (auto it = g_site_of_pc.find(pc); it != g_site_of_pc.end()) site = it->second; else ++g_unknown_sites;
  const unsigned tid = (unsigned)g_tid;
  int64_t& last = g_last_event[tid];
  if (last >= 0) {
    Event& e = g_events[(size_t)last];
    const uint64_t merged = e.size + size;
    if (e.site == site && e.store == store && e.addr + e.size == a && merged <= 16 && (e.addr & (pow2_ceil(merged) - 1)) == 0) {
      e.size = (uint16_t)merged;
      return;
    }
  }
  std::vector<uint32_t>& counts = g_exec_count[site];
  if (counts.empty()) counts.assign(g_nthreads, 0);
  last = (int64_t)g_events.size();
  g_events.push_back(Event{a, site, counts[tid]++, tid, (uint16_t)size, range, (uint8_t)store, (uint8_t)shared});
}

void mark_sectors(const Event& e) {
  Range& r = g_global[e.range];
  const uint64_t first = (e.addr - r.gpu_base) >> 5, last = (e.addr + e.size - 1 - r.gpu_base) >> 5;
  auto& bits = e.store ? r.write_bits : r.read_bits;
  for (uint64_t s = first; s <= last && (s >> 6) < bits.size(); ++s) bits[s >> 6] |= 1ull << (s & 63);
  for (uint64_t s = e.addr >> 5; s <= (e.addr + e.size - 1) >> 5; ++s) g_l2.touch(s, e.store);
}

// One warp request: the events of one (warp, site, execution index).
void aggregate(const Event* const* ev, size_t n) {
  SiteStat& st = g_site_stats[ev[0]->site];
  st.requests += 1;
  st.lane_accesses += n;
  st.lanes += n;
  st.store = ev[0]->store;
  st.shared = ev[0]->shared;
  uint64_t width = 0;
  std::vector<std::pair<uint64_t, uint64_t>> spans;  // [lo, hi) bytes
  spans.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    width = std::max<uint64_t>(width, ev[i]->size);
    spans.emplace_back(ev[i]->addr, ev[i]->addr + ev[i]->size);
  }
  st.max_width = std::max(st.max_width, width);
  std::sort(spans.begin(), spans.end());
  uint64_t bytes = 0, cur_lo = spans[0].first, cur_hi = spans[0].second;
  for (size_t i = 1; i <= spans.size(); ++i) {
    if (i < spans.size() && spans[i].first <= cur_hi) { cur_hi = std::max(cur_hi, spans[i].second); continue; }
    bytes += cur_hi - cur_lo;
    if (i < spans.size()) { cur_lo = spans[i].first; cur_hi = spans[i].second; }
  }
  st.bytes += bytes;
  if (!ev[0]->shared) {
    std::vector<uint64_t> sectors;
    for (auto& s : spans)
      for (uint64_t x = s.first >> 5; x <= (s.second - 1) >> 5; ++x) sectors.push_back(x);
    std::sort(sectors.begin(), sectors.end());
    st.sectors += (uint64_t)(std::unique(sectors.begin(), sectors.end()) - sectors.begin());
    st.ideal_sectors += (n * width + 31) / 32;
  } else {  // 32 banks of 4-byte words: a request takes as many wavefronts as its busiest bank has words
    std::vector<uint64_t> words;
    for (auto& s : spans)
      for (uint64_t x = s.first >> 2; x <= (s.second - 1) >> 2; ++x) words.push_back(x);
    std::sort(words.begin(), words.end());
    words.erase(std::unique(words.begin(), words.end()), words.end());
    unsigned per_bank[32] = {};
    unsigned worst = 0;
    for (uint64_t w : words) worst = std::max(worst, ++per_bank[w & 31]);
    st.wavefronts += worst;
    st.ideal_wavefronts += (words.size() + 31) / 32;
  }
}

void finish_block() {
  for (const Event& e : g_events)
    if (!e.shared) mark_sectors(e);
  std::vector<const Event*> order(g_events.size());
  for (size_t i = 0; i < g_events.size(); ++i) order[i] = &g_events[i];
  std::sort(order.begin(), order.end(), [](const Event* a, const Event* b) {
    const uint32_t wa = a->tid / 32, wb = b->tid / 32;
    if (wa != wb) return wa < wb;
    if (a->site != b->site) return a->site < b->site;
    if (a->k != b->k) return a->k < b->k;
    return a->tid < b->tid;
  });
  for (size_t i = 0; i < order.size();) {
    size_t j = i + 1;
    while (j < order.size() && order[j]->tid / 32 == order[i]->tid / 32 && order[j]->site == order[i]->site &&
           order[j]->k == order[i]->k)
      ++j;
    aggregate(&order[i], j - i);
    i = j;
  }
  g_events_traced += g_events.size();
  g_events.clear();
  g_exec_count.clear();
}

}  // namespace

#define EMU_RT extern "C" __attribute__((visibility("default")))

// ---------------------------------------------------------------- coverage callbacks
EMU_RT void __sanitizer_cov_trace_pc_guard_init(uint32_t*, uint32_t*) {}
EMU_RT void __sanitizer_cov_trace_pc_guard(uint32_t*) {}
#define EMU_RT_ACCESS(n)                                                                                  \
  EMU_RT void __sanitizer_cov_load##n(void* p) { record((uint64_t)p, n, false, (uintptr_t)__builtin_return_address(0)); } \
  EMU_RT void __sanitizer_cov_store##n(void* p) { record((uint64_t)p, n, true, (uintptr_t)__builtin_return_address(0)); }
EMU_RT_ACCESS(1)
EMU_RT_ACCESS(2)
EMU_RT_ACCESS(4)
EMU_RT_ACCESS(8)
EMU_RT_ACCESS(16)

// Aggregate copies and fills (build.py adds these calls before each llvm.memcpy/memset intrinsic):
// traced in pieces of at most 16 bytes; a copy's store is the site at return address + 1.
EMU_RT void emu_prof_memcpy(void* dst, const void* src, uint64_t n) {
  const uintptr_t pc = (uintptr_t)__builtin_return_address(0);
  for (uint64_t o = 0; o < n; o += 16) record((uint64_t)src + o, (unsigned)std::min<uint64_t>(16, n - o), false, pc);
  for (uint64_t o = 0; o < n; o += 16) record((uint64_t)dst + o, (unsigned)std::min<uint64_t>(16, n - o), true, pc + 1);
}
EMU_RT void emu_prof_memset(void* dst, uint64_t n) {
  const uintptr_t pc = (uintptr_t)__builtin_return_address(0);
  for (uint64_t o = 0; o < n; o += 16) record((uint64_t)dst + o, (unsigned)std::min<uint64_t>(16, n - o), true, pc);
}

// ---------------------------------------------------------------- hooks called by emu.h
EMU_RT void emu_prof_launch_begin(unsigned nthreads, const void* const* shared, const size_t* sizes, int nshared) {
  g_in_launch = true;
  g_nthreads = nthreads;
  g_shared.clear();
  for (int i = 0; i < nshared; ++i) g_shared.emplace_back((uint64_t)shared[i], (uint64_t)shared[i] + sizes[i]);
  g_last_event.assign(nthreads, -1);
  g_block_counter = g_blocks_traced = g_events_traced = g_unknown_sites = 0;
  g_site_stats.clear();
  g_l2.read_misses = g_l2.dirtied = 0;
  for (Range& r : g_global) {
    std::fill(r.read_bits.begin(), r.read_bits.end(), 0);
    std::fill(r.write_bits.begin(), r.write_bits.end(), 0);
  }
}
EMU_RT void emu_prof_block_begin() {
  g_trace_block = g_block_counter++ % g_sample_every == 0;
  g_blocks_traced += g_trace_block;
  std::fill(g_last_event.begin(), g_last_event.end(), -1);
}
EMU_RT void emu_prof_thread(int tid) { g_tid = tid; }
EMU_RT void emu_prof_block_end() { finish_block(); g_trace_block = false; }
EMU_RT void emu_prof_launch_end() { g_in_launch = false; g_tid = -1; }

// ---------------------------------------------------------------- driver API (ctypes)
// The device allocations of the next launch ([lo, lo + size) each; must not overlap).
EMU_RT void emu_prof_set_global(const uint64_t* lo, const uint64_t* size, int n) {
  g_global.clear();
  for (int i = 0; i < n; ++i) {
    Range r;
    r.lo = lo[i];
    r.hi = lo[i] + size[i];
    r.gpu_base = (r.lo + 255) & ~255ull;
    const uint64_t sectors = (size[i] + 31) / 32 + 1;
    r.read_bits.assign((sectors + 63) / 64, 0);
    r.write_bits.assign((sectors + 63) / 64, 0);
    g_global.push_back(std::move(r));
  }
}
// Site ids of callback return addresses (absolute; one table per loaded kernel library).
EMU_RT void emu_prof_add_sites(const uint64_t* pcs, const uint32_t* ids, int n) {
  for (int i = 0; i < n; ++i) g_site_of_pc[pcs[i]] = ids[i];
}
// sample_every: trace every n-th block (1: all). l2_bytes > 0: reset the L2 model to that capacity.
EMU_RT void emu_prof_configure(unsigned sample_every, uint64_t l2_bytes) {
  g_sample_every = sample_every ? sample_every : 1;
  if (l2_bytes) g_l2.reset(l2_bytes);
}
// Accesses outside any emulated kernel (a cuBLAS GEMM modelled from its shape, profile/__init__.py):
// touch the L2 model over the sectors [lo[i], hi[i]) in order, as stores or loads; out = (read misses,
// sectors newly dirtied) of these touches. The launch counters of the last kernel are left as they were.
EMU_RT void emu_prof_l2_touch(const uint64_t* lo, const uint64_t* hi, int n, int store, uint64_t* out) {
  const uint64_t misses = g_l2.read_misses, dirtied = g_l2.dirtied;
  for (int i = 0; i < n; ++i)
    for (uint64_t s = lo[i]; s < hi[i]; ++s) g_l2.touch(s, store != 0);
  out[0] = g_l2.read_misses - misses;
  out[1] = g_l2.dirtied - dirtied;
  g_l2.read_misses = misses;
  g_l2.dirtied = dirtied;
}
// Rows of (site, requests, sectors, ideal_sectors, bytes, lane_accesses, max_width, wavefronts,
// ideal_wavefronts, store, shared, lanes) of the last launch; returns the row count (rows beyond cap
// are not written).
EMU_RT int emu_prof_result_sites(uint64_t* out, int cap) {
  int i = 0;
  for (auto& [site, st] : g_site_stats) {
    if (i < cap) {
      uint64_t* row = out + (size_t)i * (kStatFields + 1);
      row[0] = site;
      std::memcpy(row + 1, &st, sizeof(uint64_t) * kStatFields);
    }
    ++i;
  }
  return i;
}
// (sectors read, sectors written, L2 read misses, L2 sectors dirtied, blocks, blocks traced,
//  events traced, accesses at unknown sites) of the last launch.
EMU_RT void emu_prof_result_launch(uint64_t* out) {
  uint64_t rd = 0, wr = 0;
  for (const Range& r : g_global) {
    for (uint64_t w : r.read_bits) rd += (uint64_t)__builtin_popcountll(w);
    for (uint64_t w : r.write_bits) wr += (uint64_t)__builtin_popcountll(w);
  }
  out[0] = rd; out[1] = wr; out[2] = g_l2.read_misses; out[3] = g_l2.dirtied;
  out[4] = g_block_counter; out[5] = g_blocks_traced; out[6] = g_events_traced; out[7] = g_unknown_sites;
}
