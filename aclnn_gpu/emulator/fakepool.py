"""The late stand-in's device memory pool (`ACLNN_GPU_EMU_LATE`, emulator/fakecupy/): CuPy's
SingleDeviceMemoryPool rules over host memory, so freed device memory comes back to the next caller
the way it does on a GPU, with bytes nobody wrote.

Followed from cupy/cuda/memory.pyx (SingleDeviceMemoryPool `_malloc` / `free` / `_split` / `_merge`):
- sizes are rounded up to the 512-byte allocation unit; a chunk of `n` bytes sits in bin `(n - 1) // 512`;
- one arena per stream: an allocation takes from the arena of the stream current when it is made
  (`get_current_stream_ptr`), and a freed chunk goes back to the arena of the stream it was made on,
  so memory is reused in that stream's order without any wait;
- best fit: the smallest non-empty bin at or above the request's; a larger chunk is split, the rest
  going back to the free list; only when no bin fits is new memory allocated (cudaMalloc);
- a freed chunk is merged with its free neighbours of the same allocation.
CuPy's free lists are Python sets (which one `set.pop()` returns is not specified); here each bin
hands out its most recently freed chunk first, the order that reuses memory soonest.

What CUDA gives is uninitialised: new memory is filled with `POISON`, and a freed chunk is poisoned
in its arena stream's order (a memset queued there, so the work queued before the free still reads
its data, and the next user of the chunk on that stream sees the poison, as it would see whatever the
last user left on a GPU).
"""
from __future__ import annotations

import bisect
import collections
import ctypes
import threading
import weakref
from typing import Any, Callable

from ..host.memory import aligned_buffer

UNIT = 512     # CuPy's _allocation_unit_size
POISON = 0xFF  # every float width reads NaN, every integer -1


class Chunk:
    """A piece of one allocation (`memory`: the host buffer behind it), as CuPy's Chunk."""

    __slots__ = ("memory", "base", "offset", "size", "stream_ptr", "prev", "next", "free")

    def __init__(self, memory: Any, base: int, offset: int, size: int, stream_ptr: int):
        self.memory = memory
        self.base = base
        self.offset = offset
        self.size = size
        self.stream_ptr = stream_ptr
        self.prev: Chunk | None = None
        self.next: Chunk | None = None
        self.free = False

    @property
    def ptr(self) -> int:
        return self.base + self.offset


class Pool:
    """One device's pool. `poison(stream_ptr, ptr, size)` poisons freed bytes in that stream's order
    and returns False when the stream is gone (its arena is then dropped: nothing can allocate from it)."""

    def __init__(self, align: int, poison: Callable[[int, int, int], bool], grow: Callable[[], None]):
        self.align = align
        self.poison = poison
        self.grow = grow      # called before new memory is allocated (cudaMalloc: may refuse during a capture)
        self.lock = threading.Lock()
        # chunks freed by the collector (which may run anywhere, even inside `malloc`): released at the
        # next malloc, before it looks for a fit
        self.freed: collections.deque[Chunk] = collections.deque()
        self.arenas: dict[int, dict[int, list[Chunk]]] = {}   # stream ptr -> bin -> free chunks (LIFO)
        self.spans: list[tuple[int, int]] = []   # (start, end) of every allocation made, sorted
        self.fresh = 0        # allocations of new memory (cudaMalloc): what the tests read
        self.reused = 0       # allocations served from a free list

    def malloc(self, size: int, stream_ptr: int) -> tuple[Chunk, Any]:
        """(chunk, host buffer view of its first `size` bytes)."""
        rounded = -(-max(size, 1) // UNIT) * UNIT
        wanted = (rounded - 1) // UNIT
        self.release_freed()
        with self.lock:
            arena = self.arenas.setdefault(stream_ptr, {})
            fits = sorted(b for b, chunks in arena.items() if b >= wanted and chunks)
            chunk = None
            if fits:   # best fit: the smallest bin that holds the request; its latest freed chunk
                chunk = arena[fits[0]].pop()
                chunk.free = False
                self.reused += 1
                if chunk.size > rounded:   # CuPy's _split: the head is handed out, the rest stays free
                    rest = Chunk(chunk.memory, chunk.base, chunk.offset + rounded, chunk.size - rounded, stream_ptr)
                    rest.next, rest.prev, rest.free = chunk.next, chunk, True
                    if chunk.next is not None:
                        chunk.next.prev = rest
                    chunk.next, chunk.size = rest, rounded
                    arena.setdefault((rest.size - 1) // UNIT, []).append(rest)
        if chunk is None:   # cudaMalloc: memory nobody wrote
            self.grow()
            base, memory = aligned_buffer(rounded, self.align)
            ctypes.memset(base, POISON, rounded)
            chunk = Chunk(memory, base, 0, rounded, stream_ptr)
            with self.lock:
                bisect.insort(self.spans, (base, base + rounded))
                self.fresh += 1
        return chunk, chunk.memory[chunk.offset:chunk.offset + size]

    def owns(self, ptr: int) -> bool:
        """Whether `ptr` is in memory this pool allocated (kept for good: CuPy's pool keeps it too)."""
        with self.lock:
            i = bisect.bisect_right(self.spans, (ptr, 1 << 64)) - 1
            return i >= 0 and self.spans[i][0] <= ptr < self.spans[i][1]

    def free(self, chunk: Chunk) -> None:
        """The pointer's finalizer: queued for `release_freed` (no lock is taken here)."""
        self.freed.append(chunk)

    def release_freed(self) -> None:
        while True:
            try:
                chunk = self.freed.popleft()
            except IndexError:
                return
            self.release(chunk)

    def release(self, chunk: Chunk) -> None:
        """CuPy's `free`: the chunk poisoned in its stream's order, merged with its free neighbours and
        put back on its arena's free list."""
        alive = self.poison(chunk.stream_ptr, chunk.ptr, chunk.size)
        with self.lock:
            arena = self.arenas.get(chunk.stream_ptr)
            if not alive or arena is None:   # the stream is gone: so is its arena (nothing can reach it)
                self.arenas.pop(chunk.stream_ptr, None)
                return
            for neighbour in (chunk.next, chunk.prev):
                if neighbour is None or not neighbour.free:
                    continue
                chunks = arena.get((neighbour.size - 1) // UNIT, [])
                if neighbour not in chunks:
                    continue
                chunks.remove(neighbour)
                head, tail = (chunk, neighbour) if neighbour is chunk.next else (neighbour, chunk)
                head.size += tail.size
                head.next = tail.next
                if tail.next is not None:
                    tail.next.prev = head
                chunk = head
            chunk.free = True
            arena.setdefault((chunk.size - 1) // UNIT, []).append(chunk)


def pooled_pointer(pool: Pool, make: Callable[[], Any], size: int, stream_ptr: int) -> Any:
    """A MemoryPointer (`make()` gives an empty one) over a pool chunk, released to the pool when it
    is collected (CuPy's PooledMemory.__dealloc__ frees the chunk)."""
    chunk, view = pool.malloc(size, stream_ptr)
    pointer = make()
    pointer.ptr, pointer.buffer, pointer.size = chunk.ptr, view, size
    weakref.finalize(pointer, pool.free, chunk)
    return pointer
