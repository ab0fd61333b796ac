"""Text tables of a profiled call: one table per launch (access sites), then the call's summary."""
from __future__ import annotations

from . import CallProfile, GemmLaunch


def mb(n: float) -> str:
    return f"{n / 1e6:.3f} MB"


def main_streams(launch, share: float = 0.1) -> list:
    """Global-memory sites that carry at least `share` of the launch's requested bytes."""
    sites = launch.global_sites()
    total = sum(s.bytes for s in sites)
    return [s for s in sites if total and s.bytes >= share * total]


def launch_table(i: int, launch, out: list[str]) -> None:
    if isinstance(launch, GemmLaunch):
        out.append(f"launch {i}: {launch.kernel} ({launch.dtype}; not emulated: traffic modelled from the shape, "
                   f"distinct sectors of all batch entries) DRAM cold {mb(launch.dram_bytes)}, "
                   f"L2 model {mb(launch.l2_dram_bytes)}, {launch.flops / 1e9:.3f} GFLOP")
        return
    sampled = (f", {launch.blocks_traced} of {launch.blocks} blocks traced (DRAM bytes scaled; site rows: traced "
               f"blocks)") if launch.blocks_traced != launch.blocks else ""
    out.append(f"launch {i}: {launch.kernel}  [{launch.file.rsplit('/', 1)[-1]}] grid {launch.grid} "
               f"block {launch.block}  DRAM cold {mb(launch.dram_bytes)} "
               f"(read {mb(32 * launch.sectors_read * launch.sample_scale)}, "
               f"written {mb(32 * launch.sectors_written * launch.sample_scale)}), "
               f"L2 model {mb(launch.l2_dram_bytes)}{sampled}")
    tables = (("global site", "sect/req", launch.global_sites(),
               lambda s, r: (f"{s.sectors / r:8.2f} {s.ideal_sectors / r:8.2f} "
                             f"{100 * s.sector_efficiency:8.0f}% {s.bytes:12d}")),
              ("shared site", "wavef/req", launch.shared_sites(),
               lambda s, r: (f"{s.wavefronts / r:8.2f} {s.ideal_wavefronts / r:8.2f} "
                             f"{s.bank_conflicts:9d} {s.bytes:12d}")))
    for title, per_request, sites, cells in tables:
        if not sites:
            continue
        last = "eff" if title.startswith("global") else "conflicts"
        out.append(f"  {title:44s} {'kind':5s} {'width':>5s} {'requests':>9s} {per_request:>8s} {'ideal':>8s} "
                   f"{last:>9s} {'bytes':>12s}")
        for s in sites:
            out.append(f"  {s.site.label[:44]:44s} {s.site.kind:5s} {s.width:5d} {s.requests:9d} "
                       f"{cells(s, max(s.requests, 1))}")
    if launch.unknown_site_accesses:
        out.append(f"  ({launch.unknown_site_accesses} accesses at sites missing from the site table)")


def summary_line(p: CallProfile) -> str:
    dims = " ".join(f"{k}={v}" for k, v in p.dims.items())
    kernels = sum(not isinstance(x, GemmLaunch) for x in p.launches)
    gemms = len(p.launches) - kernels
    ratio = p.l2_dram_bytes / p.min_bytes if p.min_bytes else float("nan")
    return (f"{p.op} {dims} {p.dtype}: {kernels} kernel launch(es) + {gemms} modelled GEMM(s); DRAM cold "
            f"{mb(p.dram_bytes)}, L2 model {mb(p.l2_dram_bytes)}; minimum {mb(p.min_bytes)}; ratio {ratio:.2f}; "
            f"modelled H100 time {p.model_seconds * 1e6:.1f} us (roofline model: 3.35 TB/s + 3 us/launch, "
            f"not a measurement); latency-aware model {p.latency_model_seconds * 1e6:.1f} us (recursions: "
            f"max(bytes, steps x step latency), profile/latency.py)")


def render(p: CallProfile) -> str:
    out: list[str] = [f"== {p.op} " + "=" * 60]
    if p.sample_every > 1:
        out.append(f"(block sampling: 1 block in {p.sample_every} traced; DRAM bytes scaled to the whole grid, "
                   "site rows count the traced blocks)")
    for i, launch in enumerate(p.launches, 1):
        launch_table(i, launch, out)
    out.append(summary_line(p))
    return "\n".join(out)


def to_json(p: CallProfile) -> dict:
    launches = []
    for x in p.launches:
        if isinstance(x, GemmLaunch):
            launches.append({"kernel": x.kernel, "modelled": True, "dram_bytes": x.dram_bytes,
                             "l2_dram_bytes": x.l2_dram_bytes, "flops": x.flops})
            continue
        launches.append({"kernel": x.kernel, "file": x.file.rsplit("/", 1)[-1], "grid": x.grid, "block": x.block,
                         "dram_bytes": x.dram_bytes, "l2_dram_bytes": x.l2_dram_bytes,
                         "blocks": x.blocks, "blocks_traced": x.blocks_traced,
                         "main_stream_efficiency": min((s.sector_efficiency for s in main_streams(x)), default=1.0),
                         "sites": [{"site": s.site.label, "kind": s.site.kind, "shared": s.shared, "width": s.width,
                                    "requests": s.requests, "sectors": s.sectors, "ideal_sectors": s.ideal_sectors,
                                    "bytes": s.bytes, "wavefronts": s.wavefronts,
                                    "ideal_wavefronts": s.ideal_wavefronts} for s in x.sites]})
    return {"op": p.op, "dims": p.dims, "dtype": p.dtype, "min_bytes": p.min_bytes, "dram_bytes": p.dram_bytes,
            "l2_dram_bytes": p.l2_dram_bytes, "model_seconds": p.model_seconds,
            "latency_model_seconds": p.latency_model_seconds, "launches": launches}
