"""ThreadSanitizer replay of recorded emulated launches.

    ACLNN_GPU_EMU_RECORD=/tmp/rec python -m pytest tests/kernels      # record (any build mode)
    python -m aclnn_gpu.emulator.tsan /tmp/rec [--only-sync] [--max-blocks 2] [--max-per-kernel 4]

ThreadSanitizer cannot run inside Python, so each recorded kernel source is rebuilt as a standalone
executable (`-DEMU_THREADS -fsanitize=thread`: every CUDA thread an OS thread, `__syncthreads` a real
barrier) around replay_main.cpp, which re-runs the recorded launches on copies of the recorded memory.
A missing `__syncthreads` between shared-memory writes and reads, or two threads writing one element,
is then a data race that TSan reports; the command fails (exit 1) and prints the reports.

Owns: selecting launches (`--only-sync`: only launches that used block barriers or dynamic shared
memory, i.e. those where threads of a block communicate; `--max-per-kernel`: a few launches per
kernel, distinct launch geometries first, the cheapest to replay first), writing replay files,
building and running the executables (`--jobs` at a time), and the verdict. `--max-blocks N`
(EMU_MAX_BLOCKS) runs only the first N blocks of each grid, gridDim unchanged: races inside a block
show up in any block.
"""
from __future__ import annotations

import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from typing import Any
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from . import build as _build

REPLAY_MAIN = Path(__file__).resolve().parent / "replay_main.cpp"
TSAN_EXITCODE = 66


def load_recording(root: Path):
    sources = {p.stem: json.loads(p.read_text()) for p in (root / "sources").glob("*.json")}
    launches = []
    for p in sorted(root.glob("launches-*.jsonl")):
        for line in p.read_text().splitlines():
            if line.strip():
                launches.append(json.loads(line))
    return sources, launches


def replay_cost(rec) -> int:
    """The TSan replay's work for one block of a recorded launch: its threads times the barriers each block
    crossed (every thread an OS thread, every barrier a rendezvous of all of them)."""
    threads = rec["block"][0] * rec["block"][1] * rec["block"][2]
    blocks = max(1, rec["stats"].get("blocks", 1))
    stats = rec["stats"]
    return threads * (1 + stats.get("block_barriers", 0) // blocks + stats.get("warp_syncs", 0) // blocks // 32)


def select(launches, only_sync: bool, max_per_kernel: int, file_of=None):
    """-> (chosen launches grouped by source, counts of skipped ones by reason). `file_of`: a source key's
    file name, so that one kernel recorded from several builds of its file (the device's and a standalone
    context's) is one kernel here, replayed from the build of the launch chosen."""
    skipped: defaultdict[str, int] = defaultdict(int)
    per_kernel: defaultdict[tuple, list] = defaultdict(list)
    for rec in launches:
        if not rec["replayable"]:
            skipped["not replayable: " + (rec.get("why") or "?")] += 1
            continue
        if only_sync and not (rec["stats"].get("block_barriers") or rec["smem"]):
            skipped["no barrier / dynamic shared memory"] += 1
            continue
        source = Path(file_of(rec["source"])).name if file_of else rec["source"]
        per_kernel[(source, rec["name"])].append(rec)
    groups = defaultdict(list)
    for recs in per_kernel.values():
        seen: set = set()
        first: list = []
        rest: list = []
        # distinct geometries first, the cheapest replay of each first: a race between the threads of a
        # block shows in any launch that runs the same code with the same block shape, and TSan's cost grows
        # with OS threads x barriers (one long recursion costs minutes, a short one of the same kernel seconds)
        for rec in sorted(recs, key=replay_cost):
            geo = (tuple(rec["grid"]), tuple(rec["block"]), rec["smem"])
            (rest if geo in seen else first).append(rec)
            seen.add(geo)
        chosen = (first + rest)[:max_per_kernel]
        skipped["over --max-per-kernel"] += len(recs) - len(chosen)
        for rec in chosen:
            groups[rec["source"]].append(rec)
    return groups, {k: v for k, v in skipped.items() if v}


def write_replay(path: Path, root: Path, meta: dict, recs) -> None:
    index = {name: i for name, _, i in meta["entries"]}
    blobs: dict[str, Any] = {}
    with open(path, "wb") as out:
        out.write(b"EMUR0001")
        out.write(struct.pack("<QI", meta.get("ref") or 0, len(meta["shared"])))
        for off, size, _ in meta["shared"]:
            out.write(struct.pack("<QQ", off, size))
        out.write(struct.pack("<I", len(recs)))
        for rec in recs:
            out.write(struct.pack("<I6IQQ", index[rec["name"]], *rec["grid"], *rec["block"], rec["smem"],
                                  rec["max_dyn"]))
            out.write(struct.pack("<I", len(rec["regions"])))
            for reg in rec["regions"]:
                f = blobs.get(reg["blob"])
                if f is None:
                    f = blobs[reg["blob"]] = open(root / reg["blob"], "rb")
                f.seek(reg["offset"])
                data = f.read(reg["size"])
                out.write(struct.pack("<Q", len(data)))
                out.write(data)
            out.write(struct.pack("<I", len(rec["args"])))
            for a in rec["args"]:
                if "value" in a:
                    raw = bytes.fromhex(a["value"])
                    out.write(struct.pack("<BI", 0, len(raw)))
                    out.write(raw)
                else:
                    out.write(struct.pack("<BIQ", 1, a["region"], a["offset"]))
    for f in blobs.values():
        f.close()


def replay_source(root: Path, key: str, source: dict, recs, max_blocks: int, workdir: Path) -> dict:
    t0 = time.perf_counter()
    name = source["filename"]
    try:
        built = _build.build(source["code"], source["name_expressions"], source["options"], source["filename"],
                             mode="tsan", extra_sources=[REPLAY_MAIN])
    except _build.EmuBuildError as e:
        return {"source": name, "ok": False, "launches": len(recs), "output": str(e),
                "seconds": time.perf_counter() - t0}
    build_s = time.perf_counter() - t0
    replay = workdir / f"{key}.replay"
    write_replay(replay, root, built.meta, recs)
    env = dict(os.environ)
    env["TSAN_OPTIONS"] = ":".join([f"exitcode={TSAN_EXITCODE}", "halt_on_error=1", "report_signal_unsafe=0",
                                    "history_size=2", env.get("TSAN_OPTIONS", "")]).strip(":")
    env["EMU_MAX_BLOCKS"] = str(max_blocks) if max_blocks > 0 else ""
    if max_blocks <= 0:
        env.pop("EMU_MAX_BLOCKS")
    r = subprocess.run([str(built.path), str(replay)], capture_output=True, text=True, env=env)
    out = (r.stdout + r.stderr).strip()
    return {"source": name, "ok": r.returncode == 0, "rc": r.returncode, "race": r.returncode == TSAN_EXITCODE
            or "ThreadSanitizer" in out, "launches": len(recs), "output": out,
            "build_seconds": build_s, "seconds": time.perf_counter() - t0}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m aclnn_gpu.emulator.tsan", description=__doc__.split("\n\n")[0])
    ap.add_argument("record_dir", type=Path)
    ap.add_argument("--only-sync", action="store_true",
                    help="only launches that used __syncthreads or dynamic shared memory")
    ap.add_argument("--max-blocks", type=int, default=2, help="blocks run per launch (0: all; default 2)")
    ap.add_argument("--max-per-kernel", type=int, default=3, help="launches replayed per kernel (default 3)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    sources, launches = load_recording(a.record_dir)
    groups, skipped = select(launches, a.only_sync, a.max_per_kernel,
                             lambda key: sources.get(key, {}).get("filename", key))
    for why, n in sorted(skipped.items()):
        print(f"tsan: skipped {n} launch(es): {why}")
    if not groups:
        print(f"tsan: nothing to replay in {a.record_dir} ({len(launches)} recorded launches)")
        return 0
    with tempfile.TemporaryDirectory(prefix="emu_tsan_") as tmp, ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        results = list(pool.map(lambda kv: replay_source(a.record_dir, kv[0], sources[kv[0]], kv[1], a.max_blocks,
                                                          Path(tmp)),
                                groups.items()))
    bad = [r for r in results if not r["ok"]]
    for r in results:
        status = "ok" if r["ok"] else ("DATA RACE" if r.get("race") else f"FAILED (rc={r.get('rc')})")
        print(f"tsan: {r['source']}: {r['launches']} launch(es) {status} ({r['seconds']:.1f} s)")
    for r in bad:
        print(f"\n===== {r['source']} =====\n{r['output'][-20000:]}", file=sys.stderr)
    total = sum(r["launches"] for r in results)
    print(f"tsan: {total} launches of {len(results)} sources replayed in {time.perf_counter() - t0:.1f} s: "
          f"{'OK' if not bad else f'{len(bad)} failing source(s)'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
