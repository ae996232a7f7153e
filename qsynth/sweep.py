"""The offline synthesis run: every configuration per ISA, in local worker processes or as jobs on a
Ray cluster (``qsynth/cluster.py``), filling the cache and merging its rows into
``benchmarks/synthesis.json`` and ``benchmarks/synthesis.md``."""
from __future__ import annotations

import functools
import json
import multiprocessing
import signal
import time
from pathlib import Path

from qsynth.progress import track
from synth.files import write_atomically
from synth.int8_spec import Int8Spec
from synth.spec import ENCODINGS, ISA_LAYOUTS, BitserialSpec
from synth.tiles import BITSERIAL_TILES, INT8_TILES

# The paper's Table 2 (CGO 2020, Cortex-A53 NEON, 8x8·8x1 tiles): instructions and synthesis seconds.
PAPER = {"a1w1": (24, 17.2), "a2w2": (None, 158.3)}
# NEON: the paper's 16-byte Q tiles, its 8-byte D tiles, and the D tile with two rows per Q register
TILE_REGISTERS = {"neon": ({"reg_bits": 128}, {"reg_bits": 64}, {"reg_bits": 128, "row_bits": 64})}
# GEMM-shaped acc tiles (activation columns sharing each weight load), next to the one-column ones;
# the operators and the layer benchmark pick among them
GEMM_COLUMNS = {"neon": (2,), "avx2": (2,), "avx512": (2, 4)}
# lanes tiles (output channels across the lanes, K along the loop): AVX-512 (vpopcntq) and NEON (cnt
# and uadalp into 16-bit lanes, K in chunks); the operators pick among them (kernels.bitserial._lanes_order)
LANES_COLUMNS = {"avx512": (2, 4), "neon": (2, 3)}


def _swept(isa: str, layout: str) -> bool:
    """Every acc kernel (the layout a K loop uses) and every NEON tile (the paper's layout; each takes
    seconds). AVX-512 tiles are left to ``qsynth synth --layout tile``: their 8-register reduction
    tree was found in 32 s once and not within 60 s on another run, the hybrid activation count
    (a 7-instruction lane sum) not within 250 s, and the acc kernels measure faster."""
    return layout == "acc" or (isa, layout) == ("neon", "tile")


def configs(isas: list[str]) -> list:
    out = []
    for isa in isas:
        if isa in BITSERIAL_TILES:
            out += [BitserialSpec.for_isa(isa, a, w, e, layout=lay, **over)
                    for over in TILE_REGISTERS.get(isa, ({},))
                    for lay in ISA_LAYOUTS[isa] for e in ENCODINGS for a in (1, 2, 3) for w in (1, 2, 3)
                    if _swept(isa, lay) and not (lay == "acc" and "row_bits" in over)]
            out += [BitserialSpec.for_isa(isa, a, w, e, layout="acc", cols=n)
                    for n in GEMM_COLUMNS[isa] for e in ENCODINGS for a in (1, 2, 3) for w in (1, 2, 3)]
            out += [BitserialSpec.for_isa(isa, a, w, e, layout="lanes", cols=n)
                    for n in LANES_COLUMNS.get(isa, ()) for e in ENCODINGS for a in (1, 2, 3) for w in (1, 2, 3)]
        out += [Int8Spec.for_isa(i, t, layout=lay) for i, t, lay in INT8_TILES if i == isa]
    return out


def _run(spec, timeout):
    from synth.kernel import kernel
    from synth.stages import SynthesisFailed
    try:
        entry, cached = kernel(spec, timeout=timeout)
    except SynthesisFailed as e:
        return {"name": spec.name, "status": "failed", "reason": str(e)}
    except Exception as e:        # an engine bug on one configuration must not lose the others
        return {"name": spec.name, "status": "error", "reason": f"{type(e).__name__}: {e}"}
    return {"name": spec.name, "status": "proved" if entry["proof"]["proved"] else "unproved",
            "length": entry["length"], "cycles": entry["cycles"], "cache_key": entry.get("cache_key"),
            "from_cache": cached, **entry["timings"]}


def _interrupted(signum, frame):
    raise SystemExit(128 + signum)


def sweep(isas: list[str], jobs: int, timeout: float, out_dir: Path, wanted: list[str] | None = None,
          executor: str = "local", address: str | None = None, command: str | None = None) -> list[dict]:
    """Every configuration of ``isas``, and every other current cache entry of them
    (``cached_outside``), whose name contains one of ``wanted`` (any case): synthesized in ``jobs``
    local processes, or on Ray (``executor="ray"``, ``address``); kernels already in the cache are
    loaded from it (re-proved here unless stamped), not synthesized again. Their rows replace those
    of the same kernels in ``out_dir``/synthesis.{json,md} and the other rows stay (``merged``);
    returns this run's rows. Each row carries the record of the run that swept it (``run``:
    tvm_integration/bench/provenance.py, with ``command`` as the command line when given: the CLI's), and
    the file's ``run`` is the last run's record with its counts."""
    from tvm_integration.bench import provenance
    record = provenance.record(jobs) | ({"command": command} if command else {})
    wanted = None if wanted is None else [w.lower() for w in wanted]
    listed = configs(isas)
    specs = [s for s in listed + cached_outside(listed, isas) if wanted is None or any(w in s.name for w in wanted)]
    started = time.perf_counter()
    rows = _local(specs, jobs, timeout) if executor == "local" else _on_ray(specs, jobs, timeout, address)
    record = provenance.finished(record)
    rows = sorted((dict(r, run=record) for r in rows), key=lambda r: r["name"])
    run = record | {"executor": executor, "jobs": jobs, "kernels": len(rows),
                    "from_cache": sum(bool(r.get("from_cache")) for r in rows),
                    "wall_seconds": round(time.perf_counter() - started, 1)}
    kernels = merged(_earlier_rows(out_dir / "synthesis.json"), rows)
    write_atomically(out_dir / "synthesis.json", json.dumps({"run": run, "kernels": kernels}, indent=1) + "\n")
    write_atomically(out_dir / "synthesis.md", markdown(run, kernels))
    return rows


def cached_outside(listed: list, isas: list[str]) -> list:
    """The specs of the cache's current entries (this ISA spec and engine, cost model "length", the
    sweep's) of ``isas`` that ``listed`` does not hold: kernels made by ``qsynth synth`` with other
    shapes or layouts. The sweep loads them like the others, so its files list every usable kernel
    of the cache. Entries under an older key are left out: no machine loads them, and sweeping their
    spec would synthesize it anew."""
    from synth import cache
    from synth.kernel import cache_key_fields, spec_from_key
    names = {s.name for s in listed}
    out = {}
    for path in cache.entries(cache.ROOT):
        try:
            entry = json.loads(path.read_text())
            spec = spec_from_key(entry["spec"])
        except (ValueError, KeyError, TypeError):
            continue        # not an entry this engine reads; cache verify reports it
        if spec.isa in isas and spec.name not in names and path.stem == cache.cache_key(cache_key_fields(spec, "length")):
            out[spec.name] = spec
    return [out[n] for n in sorted(out)]


def _earlier_rows(path: Path) -> list[dict]:
    """The rows of the file an earlier sweep wrote, or none (no file yet)."""
    try:
        return json.loads(path.read_text())["kernels"]
    except FileNotFoundError:
        return []


def merged(earlier: list[dict], swept: list[dict]) -> list[dict]:
    """``earlier`` rows with those of the kernels swept now replaced by this run's, keyed by kernel
    name (it names the ISA, the configuration and the tile, and stays when the ISA spec changes),
    sorted by name: a sweep of some configurations updates their rows and keeps the others."""
    rows = {r["name"]: r for r in earlier} | {r["name"]: r for r in swept}
    return [rows[n] for n in sorted(rows)]


def _local(specs: list, jobs: int, timeout: float) -> list[dict]:
    # the handler first: a kill while the pool starts must stop the workers started so far too
    previous = signal.signal(signal.SIGTERM, _interrupted)
    pool = None
    try:
        # spawn, not fork: a forked child can inherit locks held by the parent's threads
        pool = multiprocessing.get_context("spawn").Pool(jobs)
        work = pool.imap_unordered(functools.partial(_run, timeout=timeout), specs)
        rows = list(track(work, len(specs), "synthesis"))
        pool.close()
    finally:        # interrupted (Ctrl-C, kill): stop the workers too, not just this process
        if pool is not None:
            pool.terminate()
            pool.join()
        signal.signal(signal.SIGTERM, previous)
    return rows


def _on_ray(specs: list, jobs: int, timeout: float, address: str | None) -> list[dict]:
    """Kernels in the local cache are finished: loaded (re-proved in ``jobs`` processes unless
    stamped). The others go to the cluster, and each result is re-proved here before it is stored."""
    from qsynth import cluster
    from synth import cache, trust
    from synth.kernel import cache_key_fields
    paths = {s.name: cache.path_for(cache.cache_key(cache_key_fields(s, "length")), cache.ROOT) for s in specs}
    cached = [s for s in specs if paths[s.name].exists()]
    entries, refused = trust.load_all([paths[s.name] for s in cached], jobs)
    loaded = {e["cache_key"]: e for e in entries}
    rows = []
    for s in cached:
        entry = loaded.get(paths[s.name].stem)
        if entry is None:
            reason = next((r for r in refused if paths[s.name].name in r), "refused")
            rows.append({"name": s.name, "status": "error", "reason": f"cached entry not proved here: {reason}"})
        else:
            rows.append({"name": s.name, "status": "proved" if entry["proof"]["proved"] else "unproved",
                         "length": entry["length"], "cycles": entry["cycles"], "cache_key": entry["cache_key"],
                         "from_cache": True, **entry["timings"]})
    missing = [s for s in specs if not paths[s.name].exists()]
    if not missing:
        return rows
    previous = signal.signal(signal.SIGTERM, _interrupted)
    try:
        for spec, result in track(cluster.results(missing, "length", timeout, address), len(missing),
                                  "synthesis on ray"):
            rows.append(cluster.row(spec, result, "length"))
    finally:
        signal.signal(signal.SIGTERM, previous)
    return rows


def run_of(row: dict) -> dict:
    """The record of the run that swept ``row``; of a row from before records, the command that wrote it."""
    return row.get("run") or {"command": "qsynth sweep"}


def markdown(run: dict, rows: list[dict]) -> str:
    from tvm_integration.bench import provenance
    lines = ["# Synthesis sweep", "",
             "Produced by `qsynth sweep`; times are wall seconds of synthesis + proof on this machine "
             "(entries loaded from the cache show the times recorded when they were synthesized).", "",
             f"{len(rows)} kernels. The last run swept {run['kernels']} of them ({run['from_cache']} loaded "
             "from the cache) with "
             + (f"{run['jobs']} worker processes" if run.get("executor", "local") == "local" else "jobs on Ray")
             + f", {run['wall_seconds']} s wall ({run['wall_seconds'] / 60:.1f} min); the rows of kernels it did "
             "not sweep are those of earlier runs. The runs that swept the rows (a run that loaded a kernel from "
             "the cache shows the seconds of its synthesis, whose machine and commit the cache entry does not "
             "record):", "", *provenance.lines(rows, label=lambda r: r["name"], run_of=run_of), "",
             "| kernel | status | instructions | synth s | verify s | wall s | est. cycles | paper (instr, s) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        paper_tile = r["name"].startswith("bitserial") and r["name"].endswith("neon") and "_unipolar_8x" in r["name"]
        key = r["name"].split("_")[1] if paper_tile else None
        paper = PAPER.get(key, None)
        cyc = ", ".join(f"{u} {c:g}" for u, c in r.get("cycles", {}).items())
        lines.append(f"| {r['name']} | {r['status']} | {r.get('length', '')} | {r.get('synth_seconds', '')} | "
                     f"{r.get('verify_seconds', '')} | {r.get('wall_seconds', '')} | {cyc} | "
                     f"{f'{paper[0] or chr(8212)} instr, {paper[1]} s' if paper else ''} |")
    failed = [r for r in rows if r["status"] != "proved"]
    if failed:
        lines += ["", "Not synthesized:", ""] + [f"- {r['name']}: {r.get('reason', r['status'])}" for r in failed]
    return "\n".join(lines) + "\n"
