"""``qsynth cache ls`` and ``qsynth cache verify``: the kernel library."""
from __future__ import annotations

from typing import Optional

import typer

from qsynth.commands.common import JSON_HELP, positive, print_json
from qsynth.progress import track

cache_app = typer.Typer(help="The kernel library (kernel_cache/, or $QSYNTH_CACHE).", no_args_is_help=True, rich_markup_mode="markdown")


@cache_app.command("ls", epilog="Example: qsynth cache ls --json")
def cache_ls(json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> int:
    """List cache entries (a corrupt one is listed as such)."""
    from synth import cache
    rows = []
    for path in cache.entries():
        try:
            e = cache.read(path)
            rows.append({"cache_key": e["cache_key"], "name": e["name"], "length": e["length"],
                         "proved": e["proof"]["proved"], "cost": e["key"]["cost"],
                         "wall_seconds": e["timings"]["wall_seconds"], "status": "ok"})
        except cache.CacheError as err:
            rows.append({"cache_key": path.stem, "status": "corrupt", "reason": str(err)})
    if json:
        print_json(rows)
        return 0
    for r in rows:
        if r["status"] == "ok":
            print(f"{r['cache_key']}  {r['name']:<48} {r['length']:>4} instr  proved={r['proved']}  "
                  f"{r['wall_seconds']:.2f} s")
        else:
            print(f"{r['cache_key']}  CORRUPT: {r['reason']}")
    return 0


@cache_app.command("verify", epilog="Example: qsynth cache verify -j 2 --json")
def cache_verify(jobs: Optional[int] = typer.Option(None, "-j", "--jobs", callback=positive,
                                                    help="worker processes (default: one per core)"),
                 json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> int:
    """Re-prove every entry and stamp it trusted on this machine; exit 1 on any failure."""
    from synth import cache, trust
    paths = cache.entries()
    results = []
    for v in track(trust.verify_paths(paths, jobs), len(paths), "re-proving the cache"):
        results.append(v)
        if not json:
            print(f"{'ok  ' if v['ok'] else 'FAIL'} {v['file']} {v['name'] or ''}: "
                  + ("; ".join(v["failures"]) or f"{v['obligations']} obligations re-proved"), flush=True)
    failed = sum(not v["ok"] for v in results)
    if json:
        print_json(results)
    else:
        print(f"{len(paths)} entries, {failed} failed")
    return 1 if failed else 0


def register(app: typer.Typer) -> None:
    app.add_typer(cache_app, name="cache")
