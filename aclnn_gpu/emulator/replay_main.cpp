// replay_main.cpp -- main() of the ThreadSanitizer replay executables built by tsan.py.
//
// Linked with one kernel library's translation unit (compiled -DEMU_THREADS -fsanitize=thread), it
// reads a replay file written by tsan.py and re-runs the recorded launches, each CUDA thread an OS
// thread, with every pointer argument relocated into a fresh copy of the memory it pointed into.
// Exit status: 0 all launches ran; 2 bad replay file; 3 a launch was refused. TSan itself exits
// with its `exitcode` (66 in tsan.py) when it reported a race.
//
// Replay file (little-endian): "EMUR0001", u64 ref (emu_last_error's link-time address), u32 nshared,
// {u64 offset, u64 size} x nshared, u32 nlaunch, then per launch: u32 entry, u32 grid[3], u32 block[3],
// u64 smem, u64 max_dyn, u32 nregion, {u64 size, bytes} x nregion, u32 narg, then per argument
// u8 kind: 0 = value {u32 size, bytes}; 1 = pointer {u32 region, u64 offset}.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

typedef int (*emu_launch_fn)(const unsigned*, size_t, void**, const size_t*, int, size_t);
extern "C" emu_launch_fn emu_launch_table[];
extern "C" int emu_launch_count;
extern "C" const char* emu_last_error();
extern "C" void emu_set_static_shared(void* const* p, const size_t* n, int count);

namespace {
struct Reader {
  FILE* f;
  template <class T> T get() {
    T v;
    if (std::fread(&v, sizeof v, 1, f) != 1) { std::fprintf(stderr, "replay: truncated file\n"); std::exit(2); }
    return v;
  }
  void bytes(void* p, size_t n) {
    if (n && std::fread(p, 1, n, f) != n) { std::fprintf(stderr, "replay: truncated file\n"); std::exit(2); }
  }
};
}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) { std::fprintf(stderr, "usage: %s REPLAY_FILE\n", argv[0]); return 2; }
  FILE* f = std::fopen(argv[1], "rb");
  if (!f) { std::perror(argv[1]); return 2; }
  Reader r{f};
  char magic[8];
  r.bytes(magic, 8);
  if (std::memcmp(magic, "EMUR0001", 8) != 0) { std::fprintf(stderr, "replay: bad magic\n"); return 2; }
  const uint64_t ref = r.get<uint64_t>();
  const uint32_t nshared = r.get<uint32_t>();
  std::vector<void*> sp(nshared);
  std::vector<size_t> sn(nshared);
  const uintptr_t base = (uintptr_t)&emu_last_error - ref;  // load address of this (PIE) executable
  for (uint32_t i = 0; i < nshared; ++i) { sp[i] = (void*)(base + r.get<uint64_t>()); sn[i] = r.get<uint64_t>(); }
  if (ref) emu_set_static_shared(sp.data(), sn.data(), (int)nshared);
  const uint32_t nlaunch = r.get<uint32_t>();
  for (uint32_t l = 0; l < nlaunch; ++l) {
    const uint32_t entry = r.get<uint32_t>();
    unsigned gb[6];
    for (auto& v : gb) v = r.get<uint32_t>();
    const uint64_t smem = r.get<uint64_t>(), max_dyn = r.get<uint64_t>();
    std::vector<std::vector<unsigned char>> regions(r.get<uint32_t>());
    for (auto& reg : regions) { reg.resize(r.get<uint64_t>() + 1); r.bytes(reg.data(), reg.size() - 1); }
    const uint32_t narg = r.get<uint32_t>();
    std::vector<std::vector<unsigned char>> vals(narg);
    std::vector<void*> args(narg);
    std::vector<size_t> sizes(narg);
    for (uint32_t a = 0; a < narg; ++a) {
      if (r.get<uint8_t>() == 0) {
        vals[a].resize(r.get<uint32_t>());
        r.bytes(vals[a].data(), vals[a].size());
      } else {
        const uint32_t reg = r.get<uint32_t>();
        const uint64_t off = r.get<uint64_t>();
        if (reg >= regions.size()) { std::fprintf(stderr, "replay: bad region\n"); return 2; }
        void* p = regions[reg].data() + off;
        vals[a].resize(sizeof p);
        std::memcpy(vals[a].data(), &p, sizeof p);
      }
      args[a] = vals[a].data();
      sizes[a] = vals[a].size();
    }
    if ((int)entry >= emu_launch_count) { std::fprintf(stderr, "replay: bad entry %u\n", entry); return 2; }
    const int rc = emu_launch_table[entry](gb, smem, args.data(), sizes.data(), (int)narg, max_dyn);
    if (rc) { std::fprintf(stderr, "replay: launch %u refused: %s\n", l, emu_last_error()); return 3; }
  }
  std::printf("replay: %u launches ran\n", nlaunch);
  return 0;
}
