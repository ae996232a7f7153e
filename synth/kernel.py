"""From kernel spec to proved, cached kernel: the whole pipeline as one function of named steps."""
from __future__ import annotations

import platform
import signal
import threading
import time
from contextlib import contextmanager

import numpy as np

from isa_specs import costs, get_isa
from synth import cache, trust
from synth.cost_model import SCALE, Cycles
from synth.proof import SOLVER
from synth.int8_spec import Int8Spec
from synth.spec import BitserialSpec
from synth.stages import (SynthesisFailed, inline, kernel_inputs, prove_composition, prove_stage, random_test,
                          synthesize_stage)

ENGINE_VERSION = "3"          # bump when a change to synth/ or sketches/ can change a result
COST_MODELS = ("length", "latency")
RANDOM_TESTS = 4096


def family(spec):
    """The stage module of a kernel kind: ``stages(spec, isa)`` and ``assemble(spec)``."""
    import importlib
    return importlib.import_module(f"synth.{spec.kind}")


def spec_from_key(key: dict):
    fields = {k: v for k, v in key.items() if k != "kind"}
    return {"bitserial": BitserialSpec, "int8": Int8Spec}[key["kind"]](**fields)


def cache_key_fields(spec, cost_model: str) -> dict:
    return {"isa_version": get_isa(spec.isa).version, "spec": spec.key(), "cost": cost_model, "engine": ENGINE_VERSION}


def estimate_cycles(program, isa_name: str) -> dict[str, float]:
    """Per micro-architecture: max(critical-path latency, issue-bound sum of reciprocal throughputs).
    A micro-architecture whose model lacks one of the instructions (AMX in LLVM 14) gets no
    estimate rather than a guess."""
    out = {}
    for uarch in costs.UARCHS.get(isa_name, ()):
        try:
            out[uarch] = Cycles(isa_name, uarch).of(program) / SCALE
        except costs.Unavailable:
            continue
    return out


@contextmanager
def time_limit(seconds: float):
    """Raise ``SynthesisFailed`` in the block once ``seconds`` have passed, and every quarter second
    after (should a finalizer swallow one). The solver calls keep their own deadline, but building a
    large tile's stages, its composition proof and its random test have none: without this a 30 s
    ``--timeout`` ran for minutes. A signal reaches the main thread only; elsewhere (a thread pool)
    the solver deadlines are the only bound."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum, frame):
        raise SynthesisFailed("time limit reached")

    previous = signal.getsignal(signal.SIGALRM)
    try:                        # armed inside: an alarm due at once raises as setitimer returns
        signal.signal(signal.SIGALRM, expire)
        signal.setitimer(signal.ITIMER_REAL, seconds, 0.25)
        yield
    finally:
        disarm_time_limit()
        signal.signal(signal.SIGALRM, previous)


def disarm_time_limit() -> None:
    """Stop ``time_limit``'s timer for good, even while it re-fires: an alarm can raise between any two
    steps here, so ignore the signal first and retry until both steps ran."""
    while True:
        try:
            signal.signal(signal.SIGALRM, signal.SIG_IGN)
            signal.setitimer(signal.ITIMER_REAL, 0)
            return
        except SynthesisFailed:
            continue


def synthesize(spec, cost_model: str = "length", timeout: float = 600.0, seed: int = 0) -> dict:
    """Synthesize every stage, inline, prove, test, within ``timeout`` seconds (else ``SynthesisFailed``);
    returns a cache entry (not yet stored)."""
    with time_limit(timeout):
        return _synthesize(spec, cost_model, timeout, seed)


def _synthesize(spec, cost_model: str, timeout: float, seed: int) -> dict:
    isa = get_isa(spec.isa)
    fam = family(spec)
    t0 = time.monotonic()
    deadline = t0 + timeout
    rng = np.random.default_rng(seed)
    stages = {s.problem.name: s for s in fam.stages(spec, isa)}
    cycles = Cycles.default(spec.isa) if cost_model == "latency" else None
    results = {name: synthesize_stage(stage, deadline, rng, cycles) for name, stage in stages.items()}
    uses, outputs, constants = fam.assemble(spec)
    programs = {n: r["program"] for n, r in results.items()}
    names, bits, _, _ = kernel_inputs(spec, constants)
    program = inline(spec.isa, names, bits, uses, programs, outputs)
    tv = time.monotonic()
    composition = prove_composition(spec, stages, uses, outputs, constants, program, isa)
    mismatches = random_test(spec, program, isa, constants, RANDOM_TESTS, seed)
    verify_extra = time.monotonic() - tv
    obligations = [o.to_json() for r in results.values() for o in r["obligations"]] + [composition.to_json()]
    proved = mismatches == 0 and all(o["result"] == "proved" for o in obligations)
    return {
        "key": cache_key_fields(spec, cost_model),
        "name": spec.name,
        "spec": spec.key(),
        "program": program.to_json(),
        "program_text": program.lines(),
        "length": len(program),
        "cycles": estimate_cycles(program, spec.isa),
        "constants": constants_json(constants),
        "proof": {"proved": proved, "obligations": obligations, "random_tests": RANDOM_TESTS,
                  "random_mismatches": mismatches, "solver": SOLVER},
        "stages": {n: {"program": r["program"].to_json(), "length": len(r["program"]),
                       "minimality": r["evidence"]} for n, r in results.items()},
        "uses": [[u.stage, list(u.inputs), list(u.outputs)] for u in uses],
        "timings": {"synth_seconds": round(sum(r["synth_seconds"] for r in results.values()), 3),
                    "verify_seconds": round(sum(r["verify_seconds"] for r in results.values()) + verify_extra, 3),
                    "wall_seconds": round(time.monotonic() - t0, 3)},
        "host": platform.machine(),
    }


def kernel(spec, cost_model: str = "length", timeout: float = 600.0, use_cache: bool = True) -> tuple[dict, bool]:
    """The cached entry for ``spec`` if present and proved here (``synth.trust``: re-proved unless
    stamped; ``CacheError`` when it does not re-prove), else a fresh synthesis stored in the cache
    (only when proved). Returns (entry, came_from_cache)."""
    key = cache_key_fields(spec, cost_model)
    path = cache.path_for(cache.cache_key(key))
    if use_cache and path.exists():
        return trust.load(path), True
    entry = synthesize(spec, cost_model, timeout)
    if entry["proof"]["proved"] and use_cache:
        cache.store(entry)
    return entry, False


def constants_json(constants: dict) -> dict:
    """The kernel's constant registers as stored in an entry (and read by emission)."""
    return {k: {"value": hex(v), "bits": b} for k, (v, b) in constants.items()}


def _check(name: str, ok: bool, detail: str = "") -> dict:
    return {"name": name, "method": "definition", "result": "proved" if ok else "refuted", "seconds": 0.0,
            "detail": "" if ok else detail}


def verify(entry: dict, timeout: float = 300.0) -> list[dict]:
    """Re-prove a cache entry from scratch against the current ISA and engine: every stage program
    against its stage spec, the composition, the inlined program, and a random test. Every field
    that emission or the CLI reads (name, spec, constants, program, its text and length) is
    re-derived from the spec and the stage programs and must equal the stored one, so an edited
    entry whose content hash was recomputed is refuted, not emitted."""
    from sketches.program import Program
    spec = spec_from_key(entry["spec"])
    isa = get_isa(spec.isa)
    fam = family(spec)
    stages = {s.problem.name: s for s in fam.stages(spec, isa)}
    uses, outputs, constants = fam.assemble(spec)
    results = [
        _check("cache key is current (ISA spec and engine unchanged)",
               entry["key"] == cache_key_fields(spec, entry["key"]["cost"]), "stale or edited key"),
        _check("name is the spec's", entry["name"] == spec.name, f"{entry['name']!r}, the spec names {spec.name!r}"),
        _check("stages are the spec's", sorted(entry["stages"]) == sorted(stages),
               f"{sorted(entry['stages'])}, the spec has {sorted(stages)}"),
        _check("stage uses are the spec's", entry["uses"] == [[u.stage, list(u.inputs), list(u.outputs)] for u in uses],
               "the stored stage wiring differs from the spec's"),
        _check("constants are the spec's", entry["constants"] == constants_json(constants),
               f"{entry['constants']}, the spec has {constants_json(constants)}"),
    ]
    if any(r["result"] != "proved" for r in results):
        return results       # refused as stored: nothing to prove
    programs = {name: Program.from_json(entry["stages"][name]["program"]) for name in stages}
    names, bits, _, _ = kernel_inputs(spec, constants)
    program = inline(spec.isa, names, bits, uses, programs, outputs)
    results += [
        _check("kernel program = inlined stage programs", program.to_json() == entry["program"],
               "the stored program is not the stage programs inlined"),
        _check("program text and length are the program's",
               entry["program_text"] == program.lines() and entry["length"] == len(program),
               "the stored text or length differs from the program"),
    ]
    if any(r["result"] != "proved" for r in results):
        return results
    deadline = time.monotonic() + timeout
    results += [prove_stage(stage.problem, programs[name], deadline).to_json() for name, stage in stages.items()]
    if any(r["result"] != "proved" for r in results):
        return results       # the composition of unproved stages proves nothing
    results.append(prove_composition(spec, stages, uses, outputs, constants, program, isa).to_json())
    if results[-1]["result"] != "proved":
        return results
    mismatches = random_test(spec, program, isa, constants, RANDOM_TESTS, seed=1)
    results.append({"name": f"numpy reference on {RANDOM_TESTS} random inputs", "method": "testing",
                    "result": "passed" if mismatches == 0 else "refuted", "seconds": 0.0,
                    "detail": f"{mismatches} mismatches"})
    return results
