"""``qsynth synth``: synthesize (or load from the cache) one proved kernel."""
from __future__ import annotations

from typing import Literal, Optional

import typer

from qsynth.commands.common import JSON_HELP, Isa, UsageError, WorkFailed, positive, positive_seconds, print_json
from qsynth.progress import spinner


def _spec(isa, kernel, abits, wbits, encoding, rows, cols, layout, reg_bits, row_bits, types, mr, nr, k):
    from synth.int8_spec import Int8Spec
    from synth.spec import BitserialSpec, SpecError
    try:
        if kernel == "bitserial":
            over = {k: v for k, v in (("reg_bits", reg_bits), ("row_bits", row_bits), ("cols", cols)) if v}
            return BitserialSpec.for_isa(isa, abits, wbits, encoding, rows, layout, **over)
        return Int8Spec.for_isa(isa, types, mr, nr, layout, k)
    except SpecError as e:
        raise UsageError(str(e))


def _check_isa_has(spec) -> None:
    """Fail early, with the instruction named, when the ISA lacks what the kernel family needs."""
    from isa_specs import get_isa
    from synth.kernel import family
    try:
        family(spec).stages(spec, get_isa(spec.isa))
    except KeyError as e:
        raise UsageError(str(e).strip("'\""))


def synth(isa: Isa = typer.Option(..., help="instruction set"),
          kernel: Literal["bitserial", "int8"] = typer.Option(..., help="kernel family"),
          abits: int = typer.Option(1, help="bitserial: activation bits"),
          wbits: int = typer.Option(1, help="bitserial: weight bits"),
          encoding: str = typer.Option("unipolar", help="bitserial: unipolar or hybrid (bipolar weights)"),
          rows: Optional[int] = typer.Option(None, help="bitserial: weight rows of the tile (lanes: output channels, "
                                             "a multiple of the register's 64-bit lanes)"),
          cols: Optional[int] = typer.Option(None, callback=positive, help="bitserial acc or lanes tile: activation "
                                             "columns sharing each weight load (GEMM-shaped; default 1, the GEMV tile; "
                                             "lanes: 6)"),
          layout: Optional[str] = typer.Option(None, help="bitserial: tile (one dot product per call), acc "
                                               "(K-accumulating loop body) or lanes (avx512, neon: output channels across "
                                               "the lanes, one word of K per step, no lane sums); default: tile, acc "
                                               "on avx2. int8: rows, acc or k4 for neon u8u8 (umull pseudo-dot, umull "
                                               "+ uadalp lanes kept over K, or udot)"),
          reg_bits: Optional[int] = typer.Option(None, help="bitserial register width (NEON: 64 for D, 128 for Q)"),
          row_bits: Optional[int] = typer.Option(None, help="bitserial tile: packed bits per row when several rows "
                                                 "share a register (NEON: 64 puts two 8-byte rows in each Q register)"),
          types: str = typer.Option("u8s8", help="int8: operand types, u8u8, s16, s8s8, s8s7, u8s8, u7s8, u8r7 or w16"),
          mr: Optional[int] = typer.Option(None, help="int8 tile rows (default: the ISA's tile)"),
          nr: Optional[int] = typer.Option(None, help="int8 tile columns (default: the ISA's tile)"),
          k: Optional[int] = typer.Option(None, callback=positive, help="int8 k4/k4b tiles: elements of K per "
                                          "kernel block, a multiple of the k group (4 bytes; w16: 2 int16); AMX tiles: a multiple of 64 up to 256 (default: "
                                          "the ISA's; a GEMM's depth is padded to whole blocks)"),
          cost: Literal["length", "latency"] = typer.Option("length", help="what to minimise"),
          timeout: float = typer.Option(600.0, callback=positive_seconds, help="seconds"),
          no_cache: bool = typer.Option(False, "--no-cache", help="neither read nor write the kernel cache"),
          json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> int:
    """Synthesize (or load from the cache) a proved kernel; exit 1 if it is not proved."""
    from isa_specs import costs
    from synth.kernel import kernel as make_kernel
    from synth.stages import SynthesisFailed
    spec = _spec(isa, kernel, abits, wbits, encoding, rows, cols, layout, reg_bits, row_bits, types, mr, nr, k)
    _check_isa_has(spec)
    try:
        with spinner(f"synthesizing {spec.name}"):
            entry, cached = make_kernel(spec, cost, timeout, use_cache=not no_cache)
    except SynthesisFailed as e:
        raise WorkFailed(f"synthesis failed within --timeout {timeout:g}s: {e}")
    except costs.Unavailable as e:
        raise UsageError(f"--cost latency needs a cycle figure for every instruction: {e.args[0]}; use --cost length")
    report = {"name": entry["name"], "program": entry["program_text"][:-1], "returns": entry["program_text"][-1],
              "length": entry["length"], "cycles": entry["cycles"], "proved": entry["proof"]["proved"],
              "synth_seconds": entry["timings"]["synth_seconds"], "verify_seconds": entry["timings"]["verify_seconds"],
              "wall_seconds": entry["timings"]["wall_seconds"], "cache_key": entry.get("cache_key"),
              "from_cache": cached, "proof": entry["proof"], "stages": entry["stages"]}
    if json:
        print_json(report)
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


def register(app: typer.Typer) -> None:
    app.command("synth", epilog="Example: qsynth synth --isa neon --kernel bitserial --abits 2 --wbits 1 "
                "--encoding unipolar --json")(synth)
