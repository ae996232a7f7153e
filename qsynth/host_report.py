"""``qsynth host``: the host model, and which ISAs and cached kernels this host can run and why not.

The report is a function of a host model, so a recorded /proc/cpuinfo (tests/data) gives the report
of that CPU; AArch64 features depend on qemu-user, not on the CPU. The micro-architecture is LLVM's
name for the model number, which a virtual machine may get wrong: the report says which x86 features
the flags show that LLVM's CPU of that name lacks, and which it has that the flags lack (the TVM
target states them all, ``host.target_of``)."""
from __future__ import annotations

import json
from dataclasses import asdict

from isa_specs import ISA_NAMES, get_isa, host
from isa_specs.features import AARCH64, X86
from synth import cache
from emit import EmitError
from emit.model import kernel_features


def feature_reason(feature: str, m: host.HostModel) -> str | None:
    """None when host ``m`` can execute ``feature`` (AArch64 ones through qemu), else why not."""
    if feature in AARCH64:
        return host.missing(feature, get_isa("neon").toolchain.runner)
    return host.lacks(feature, m.flags)


def _reason(features, m: host.HostModel) -> str | None:
    return next((r for r in (feature_reason(f, m) for f in sorted(features)) if r), None)


def named_cpu_features(uarch: str) -> set[str]:
    """The x86 features (``features.X86`` keys) LLVM's CPU ``uarch`` implies, as TVM's LLVM says."""
    import tvm
    from tvm.target import codegen
    target = tvm.target.Target({"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": uarch})
    return set(codegen.llvm_get_cpu_features(target)) & set(X86)


def library_kernels() -> list[dict]:
    """Name, ISA and CPU features of every cache entry (features None for an unreadable entry)."""
    out = []
    for path in cache.entries():
        try:
            entry = cache.read(path)
            features = kernel_features(entry)
        except (cache.CacheError, EmitError) as e:
            out.append({"name": path.stem, "isa": None, "features": None, "error": str(e)})
            continue
        out.append({"name": entry["name"], "isa": entry["program"]["isa"], "features": features})
    return out


def report(m: host.HostModel, kernels: list[dict]) -> dict:
    isas = []
    for name in ISA_NAMES:
        isa = get_isa(name)
        features = sorted({insn.feature for insn in isa.instructions})
        reasons = {f: feature_reason(f, m) for f in features}
        isas.append({"isa": name, "runs_on": " ".join(isa.toolchain.runner) or "the host CPU",
                     "runnable": [f for f in features if reasons[f] is None],
                     "not_runnable": {f: r for f, r in reasons.items() if r}})
    rows = []
    for k in kernels:
        reason = _reason(k["features"], m) if k["features"] is not None else f"unreadable entry: {k['error']}"
        rows.append({"name": k["name"], "isa": k["isa"], "runnable": reason is None, "reason": reason})
    info = asdict(m)
    features, named = host.x86_features(m), named_cpu_features(m.uarch)
    info.update(uarch_basis=m.uarch_basis, tvm_target=host.target_of(m), flags=sorted(m.flags), features=features,
                uarch_lacks=[f for f in features if f not in named],
                uarch_assumes=[f for f in X86 if f in named and f not in features])
    return {"host": info, "isas": isas, "kernels": rows}


def render(rep: dict) -> str:
    h = rep["host"]
    lines = [f"host: {h['model_name'] or '?'} ({h['uarch_basis']})",
             f"  micro-architecture: {h['uarch']}" + (" by model number" if h["uarch_known"] else
                                                       " (feature level, model unknown)")
             + (f"; flags show {', '.join(h['uarch_lacks'])} it lacks" if h["uarch_lacks"] else "")
             + (f"; flags lack {', '.join(h['uarch_assumes'])} it has" if h["uarch_assumes"] else ""),
             f"  TVM target: {json.dumps(h['tvm_target'])}",
             f"  x86 features: {' '.join(h['features']) or 'none'}",
             "ISAs:"]
    for i in rep["isas"]:
        state = "runs" if not i["not_runnable"] else "partly" if i["runnable"] else "cannot run"
        lines.append(f"  {i['isa']:<7} {state} on {i['runs_on']}"
                     + (f": {' '.join(i['runnable'])}" if i["runnable"] else "")
                     + "".join(f"; not {f}: {r}" for f, r in i["not_runnable"].items()))
    rows = rep["kernels"]
    lines.append(f"kernels in the library: {sum(r['runnable'] for r in rows)} of {len(rows)} run on this host")
    for isa in ISA_NAMES:
        mine = [r for r in rows if r["isa"] == isa]
        if mine:
            lines.append(f"  {isa:<7} {sum(r['runnable'] for r in mine)} of {len(mine)}")
    lines += [f"  cannot run {r['name']}: {r['reason']}" for r in rows if not r["runnable"]]
    return "\n".join(lines)
