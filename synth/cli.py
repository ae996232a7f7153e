"""The ``qsynth`` command line: one sub-command per stage of the pipeline."""
from __future__ import annotations

import argparse
import json
import sys

from isa_specs import ISA_NAMES, get_isa


class UsageError(Exception):
    """Bad input from the user: reported on one line, exit status 2, nothing written."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):   # one line, not argparse's usage dump
        raise UsageError(message)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer (>= 1), got {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}")
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


# ---------------------------------------------------------------- isa
def cmd_isa_list(args) -> int:
    from isa_specs import costs
    isa = get_isa(args.isa)
    rows = []
    for insn in isa.instructions:
        for form in insn.forms:
            fid = insn.form_id(form)
            row = {"instruction": insn.mnemonic, "form": form.arrangement, "intrinsic": form.intrinsic,
                   "prototype": form.prototype, "feature": insn.feature,
                   "operands": [op.ctype.name for op in form.registers], "result": form.result.name,
                   "imm": list(form.imm), "ref": insn.ref, "costs": {}}
            for uarch in costs.UARCHS.get(isa.name, ()):
                try:
                    c = costs.cost(isa.name, fid, uarch)
                    row["costs"][uarch] = {"latency": c.latency, "rthroughput": c.rthroughput}
                except KeyError:
                    pass
            rows.append(row)
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    uarchs = costs.UARCHS.get(isa.name, ())
    print(f"{isa.name}: {isa.description}; {len(isa.instructions)} instructions, {len(rows)} forms")
    print(f"{'form':<20} {'intrinsic':<28} {'operands -> result':<44} " + " ".join(f"{u:>16}" for u in uarchs))
    for r in rows:
        shape = f"{', '.join(r['operands'])} -> {r['result']}"
        cost = " ".join(f"{_fmt_cost(r['costs'].get(u)):>16}" for u in uarchs)
        print(f"{r['instruction'] + '.' + r['form']:<20} {r['intrinsic']:<28} {shape:<44} {cost}")
    return 0


def _fmt_cost(c) -> str:
    return "-" if c is None else f"lat {c['latency']} tp {c['rthroughput']:g}"


def cmd_isa_check(args) -> int:
    from isa_specs.check import check_isa
    isa = get_isa(args.isa)
    only = None
    if args.instruction:
        known = [i.mnemonic for i in isa.instructions]
        only = set(args.instruction.split(","))
        unknown = sorted(only - set(known))
        if unknown:
            raise UsageError(f"unknown {isa.name} instruction(s) {', '.join(unknown)}; accepted: {', '.join(known)}")
    rows = check_isa(isa, args.samples, z3_samples=args.z3_samples, seed=args.seed, only=only)
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print(f"{'instruction':<14} {'form':<10} {'intrinsic':<28} {'samples':>8} {'mismatch':>8} "
              f"{'z3':>4} {'z3 mis':>6}  status")
        for r in rows:
            print(f"{r['instruction']:<14} {r['form']:<10} {r['intrinsic']:<28} {r['samples']:>8} "
                  f"{r['mismatches']:>8} {r['z3_samples']:>4} {r['z3_mismatches']:>6}  {r['status']} {r['reason']}")
        counts = {s: sum(r["status"] == s for r in rows) for s in ("passed", "failed", "skipped")}
        print(f"{len(rows)} forms: {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
    return 1 if any(r["status"] == "failed" for r in rows) else 0


# ---------------------------------------------------------------- synth
def _spec_from_args(args):
    from synth.spec import BitserialSpec, Int8Spec, SpecError
    try:
        if args.kernel == "bitserial":
            over = {k: v for k, v in (("reg_bits", args.reg_bits), ("row_bits", args.row_bits),
                                                          ("cols", args.cols)) if v}
            return BitserialSpec.for_isa(args.isa, args.abits, args.wbits, args.encoding, args.rows, args.layout, **over)
        return Int8Spec.for_isa(args.isa, args.types, args.mr, args.nr, args.layout)
    except SpecError as e:
        raise UsageError(str(e))


def _check_isa_has(spec):
    """Fail early, with the instruction named, when the ISA lacks what the kernel family needs."""
    from synth.kernel import family
    from isa_specs import get_isa
    try:
        family(spec).stages(spec, get_isa(spec.isa))
    except KeyError as e:
        raise UsageError(str(e).strip("'\""))


def cmd_synth(args) -> int:
    from isa_specs import costs
    from synth.kernel import kernel
    from synth.stages import SynthesisFailed
    spec = _spec_from_args(args)
    _check_isa_has(spec)
    try:
        entry, cached = kernel(spec, args.cost, args.timeout, use_cache=not args.no_cache)
    except SynthesisFailed as e:
        raise UsageError(f"synthesis failed within --timeout {args.timeout:g}s: {e}")
    except costs.Unavailable as e:
        raise UsageError(f"--cost latency needs a cycle figure for every instruction: {e.args[0]}; "
                         f"use --cost length")
    report = {"name": entry["name"], "program": entry["program_text"][:-1], "returns": entry["program_text"][-1],
              "length": entry["length"], "cycles": entry["cycles"], "proved": entry["proof"]["proved"],
              "synth_seconds": entry["timings"]["synth_seconds"], "verify_seconds": entry["timings"]["verify_seconds"],
              "wall_seconds": entry["timings"]["wall_seconds"], "cache_key": entry["cache_key"] if "cache_key" in entry
              else None, "from_cache": cached, "proof": entry["proof"], "stages": entry["stages"]}
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        print(f"{entry['name']}: {entry['length']} instructions, proved={report['proved']}"
              f"{' (from cache)' if cached else ''}")
        for line in entry["program_text"]:
            print("  " + line)
        cyc = ", ".join(f"{u} {c:g}" for u, c in entry["cycles"].items())
        print(f"estimated cycles: {cyc or 'n/a'}")
        print(f"synthesis {report['synth_seconds']:.2f} s, verification {report['verify_seconds']:.2f} s, "
              f"wall {report['wall_seconds']:.2f} s")
        for ob in entry["proof"]["obligations"]:
            print(f"  [{ob['result']}] {ob['name']} ({ob['method']}, {ob['seconds']} s)")
    return 0 if report["proved"] else 1


def cmd_sweep(args) -> int:
    from pathlib import Path
    from synth.sweep import sweep
    isas = ["neon", "avx2", "avx512", "amx"] if args.isa == "all" else args.isa.split(",")
    unknown = sorted(set(isas) - {"neon", "avx2", "avx512", "amx"})
    if unknown:
        raise UsageError(f"unknown ISA(s) {', '.join(unknown)}; accepted: all, neon, avx2, avx512, amx")
    wanted = None if args.configs == "all" else args.configs.split(",")
    rows = sweep(isas, args.jobs, args.timeout, Path(args.out), wanted)
    bad = [r for r in rows if r["status"] != "proved"]
    print(f"{len(rows)} kernels: {len(rows) - len(bad)} proved, {len(bad)} not; see {args.out}/synthesis.md")
    return 1 if bad else 0


def cmd_bench_layer(args) -> int:
    import os
    layers = ("C2", "C3", "C4", "C5", "C6", "C7", "C8", "C9", "C10", "C11", "C12")
    if args.layer not in layers:
        raise UsageError(f"unknown layer {args.layer!r}; accepted: {', '.join(layers)} (ResNet-18, the paper's Table 1)")
    os.environ["TVM_NUM_THREADS"] = str(args.threads)        # read when TVM's thread pool starts
    if args.config != "int8":
        return _bench_bitserial_layer(args)
    from tvm_integration import dispatch
    from tvm_integration.bench import bench_layer
    try:
        kernel = dispatch.select(args.isa)
    except dispatch.DispatchError as e:
        raise UsageError(str(e))
    if (why := dispatch.usable(kernel)) is not None:
        raise UsageError(f"--isa {args.isa}: this host cannot run {kernel.intrin} ({why})")
    row = bench_layer(args.layer, args.threads, args.trials, args.isa)
    if args.json:
        print(json.dumps(row, indent=1))
    else:
        print(f"{row['layer']} int8, {row['threads']} thread(s), {row['kernel']}: {row['ours_ms']:.3f} ms, "
              f"{row['gmacs']:.1f} G MAC/s" + (f" ({row['percent_of_peak']:.0f}% of peak)" if row["percent_of_peak"] else "")
              + f", correct={row['correct']}")
        for name, ms in row["baselines"].items():
            print(f"  {name:<18} {ms:9.3f} ms  speedup {row['speedups'][name]:.2f}x (its time / ours)")
    return 0 if row["correct"] else 1


def _bench_bitserial_layer(args) -> int:
    """``--config AxWy [--encoding E]``: the layer on the bitserial conv2d (tvm_integration/bitserial_bench.py)."""
    from isa_specs import host
    from tvm_integration.bitserial_bench import bench_bitserial_layer, parse_config
    from tvm_integration.bitserial_kernels import ISAS, select
    from tvm_integration.dispatch import DispatchError
    try:
        config = parse_config(args.config, args.encoding)
        if args.isa != "host" and args.isa not in ISAS:
            raise DispatchError(f"bitserial layers run on {', '.join(ISAS)}, not {args.isa}")
        kernel = select(args.isa, config.abits, config.wbits, config.encoding)
    except (ValueError, DispatchError) as e:
        raise UsageError(str(e))
    if (why := next((w for f in kernel.features if (w := host.missing(f, ()))), None)) is not None:
        raise UsageError(f"--isa {args.isa}: this host cannot run {kernel.spec.name} ({why})")
    row = bench_bitserial_layer(args.layer, config, args.threads, args.trials, args.isa)
    if args.json:
        print(json.dumps(row, indent=1))
    else:
        print(f"{row['layer']} {row['config']} {row['encoding']}, {row['threads']} thread(s), {row['kernel']}: "
              f"{row['ours_ms']:.3f} ms, {row['gmacs']:.1f} G MAC/s, correct={row['correct']}")
        for name, ms in row["baselines"].items():
            print(f"  {name:<18} {ms:9.3f} ms  speedup {row['speedups'][name]:.2f}x (its time / ours)")
    return 0 if row["correct"] else 1


# ---------------------------------------------------------------- cache
def cmd_cache_ls(args) -> int:
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
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        for r in rows:
            if r["status"] == "ok":
                print(f"{r['cache_key']}  {r['name']:<48} {r['length']:>4} instr  proved={r['proved']}  "
                      f"{r['wall_seconds']:.2f} s")
            else:
                print(f"{r['cache_key']}  CORRUPT: {r['reason']}")
    return 0


def cmd_cache_verify(args) -> int:
    from synth import cache, trust
    paths = cache.entries()
    failed = 0
    for v in trust.verify_paths(paths, args.jobs):
        print(f"{'ok  ' if v['ok'] else 'FAIL'} {v['file']} {v['name'] or ''}: "
              + ("; ".join(v["failures"]) or f"{v['obligations']} obligations re-proved"), flush=True)
        failed += not v["ok"]
    print(f"{len(paths)} entries, {failed} failed")
    return 1 if failed else 0


# ---------------------------------------------------------------- host
def cmd_host(args) -> int:
    from isa_specs import host
    from synth import host_report
    rep = host_report.report(host.model(), host_report.library_kernels())
    print(json.dumps(rep, indent=1) if args.json else host_report.render(rep))
    return 0


# ---------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="qsynth", description=__doc__)
    p.add_argument("-v", "--verbose", action="store_true", help="log synthesis progress")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    isa = sub.add_parser("isa", help="instruction-set specifications").add_subparsers(
        dest="isa_command", required=True, parser_class=_Parser)
    ls = isa.add_parser("list", help="list instructions, lane shapes, intrinsics and costs")
    ls.add_argument("--isa", required=True, choices=ISA_NAMES)
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(run=cmd_isa_list)
    ck = isa.add_parser("check", help="differential test of the semantics against real execution")
    ck.add_argument("--isa", required=True, choices=ISA_NAMES)
    ck.add_argument("--samples", type=_positive, default=500, help="inputs per instruction form")
    ck.add_argument("--z3-samples", type=_positive, default=16, help="inputs also evaluated with the Z3 semantics")
    ck.add_argument("--instruction", help="comma-separated mnemonics to check (default: all)")
    ck.add_argument("--seed", type=int, default=0)
    ck.add_argument("--json", action="store_true")
    ck.set_defaults(run=cmd_isa_check)

    sy = sub.add_parser("synth", help="synthesize (or load from the cache) a proved kernel")
    sy.add_argument("--isa", required=True, choices=("neon", "avx2", "avx512", "amx"))
    sy.add_argument("--kernel", required=True, choices=("bitserial", "int8"))
    sy.add_argument("--abits", type=int, default=1)
    sy.add_argument("--wbits", type=int, default=1)
    sy.add_argument("--encoding", default="unipolar")
    sy.add_argument("--rows", type=int)
    sy.add_argument("--cols", type=_positive, help="bitserial acc tile: activation columns sharing each weight load "
                    "(GEMM-shaped; default 1, the GEMV tile)")
    sy.add_argument("--layout", help="bitserial: tile (one dot product per call) or acc (K-accumulating loop "
                    "body); default: tile, acc on avx2. int8: rows or k4 for neon u8u8 (umull pseudo-dot or udot)")
    sy.add_argument("--reg-bits", type=int, help="bitserial register width (NEON: 64 for D, 128 for Q tiles)")
    sy.add_argument("--row-bits", type=int, help="bitserial tile: packed bits per row when several rows share a "
                    "register (NEON: 64 puts two 8-byte rows in each Q register)")
    sy.add_argument("--types", default="u8s8")
    sy.add_argument("--mr", type=int, help="int8 tile rows (default: the ISA's tile)")
    sy.add_argument("--nr", type=int, help="int8 tile columns (default: the ISA's tile)")
    sy.add_argument("--cost", choices=("length", "latency"), default="length")
    sy.add_argument("--timeout", type=_positive_float, default=600.0, help="seconds")
    sy.add_argument("--no-cache", action="store_true", help="neither read nor write the kernel cache")
    sy.add_argument("--json", action="store_true")
    sy.set_defaults(run=cmd_synth)

    sw = sub.add_parser("sweep", help="offline synthesis of every configuration, filling the cache")
    sw.add_argument("--isa", default="all", help="all, or a comma-separated list of neon, avx2, avx512, amx")
    sw.add_argument("--configs", default="all",
                    help="all, or comma-separated substrings of kernel names (e.g. a1w1,int8)")
    sw.add_argument("-j", "--jobs", type=_positive, default=2)
    sw.add_argument("--timeout", type=_positive_float, default=900.0, help="seconds per kernel")
    sw.add_argument("--out", default="benchmarks")
    sw.set_defaults(run=cmd_sweep)

    from synth import emit_cli
    emit_cli.add_parsers(sub, _Parser)
    from tvm_integration.qnn import cli as qnn_cli
    qnn_cli.add_parsers(sub, _Parser)

    bl = sub.add_parser("bench-layer", help="one ResNet-18 conv layer on our operator next to onnxruntime and TVM",
                        description="example: qsynth bench-layer --layer C6 --config int8 --threads 1 --json")
    bl.add_argument("--layer", required=True, help="C2 ... C12")
    bl.add_argument("--config", default="int8", help="int8, or AxWy (x, y in 1..3) for the bitserial conv2d")
    bl.add_argument("--encoding", default="unipolar", help="bitserial: unipolar or hybrid (bipolar weights)")
    bl.add_argument("--threads", type=_positive, default=1)
    bl.add_argument("--isa", choices=("host", "avx512", "avx2", "amx"), default="host")
    bl.add_argument("--trials", type=_positive, default=7)
    bl.add_argument("--json", action="store_true")
    bl.set_defaults(run=cmd_bench_layer)

    cache = sub.add_parser("cache", help="the kernel library").add_subparsers(
        dest="cache_command", required=True, parser_class=_Parser)
    cl = cache.add_parser("ls", help="list cache entries")
    cl.add_argument("--json", action="store_true")
    cl.set_defaults(run=cmd_cache_ls)
    cv = cache.add_parser("verify", help="re-prove every entry (and stamp it trusted on this machine); "
                          "non-zero exit on any failure")
    cv.add_argument("-j", "--jobs", type=_positive, default=None, help="worker processes (default: one per core)")
    cv.set_defaults(run=cmd_cache_verify)

    ho = sub.add_parser("host", help="this host's CPU model, and which ISAs and cached kernels it can run")
    ho.add_argument("--json", action="store_true")
    ho.set_defaults(run=cmd_host)
    return p


def main(argv: list[str] | None = None) -> int:
    from isa_specs.check import ToolchainError
    from synth.cache import CacheError
    try:
        args = build_parser().parse_args(argv)
        if args.verbose:
            import logging
            logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
        return args.run(args)
    except UsageError as e:
        print(f"qsynth: error: {e}", file=sys.stderr)
        return 2
    except ToolchainError as e:
        print(f"qsynth: toolchain error: {e}", file=sys.stderr)
        return 3
    except CacheError as e:         # an entry that is corrupt or does not re-prove: never used
        print(f"qsynth: kernel cache: {e}", file=sys.stderr)
        return 1
    except Exception as e:          # a model the QNN pipeline refuses: one line, nothing written
        if type(e).__name__ != "ModelError":
            raise
        print(f"qsynth: model: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:         # output piped into `head`: not an error
        import os
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
