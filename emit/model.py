"""The kernel model: everything the templates (``emit/templates``) render for one cache entry, from
the entry, its spec and the ISA table: the function's parameters and statements, the CPU features
and guards it needs, and the loops around the proved body (``_kloop``, ``_gemv``, ``_gemm``)."""
from __future__ import annotations

import json

from emit import EmitError
from emit.amx_runtime import RUNTIME as AMX_RUNTIME
from emit.amx_tiles import tile_steps
from emit.c_vectors import LANE_SUMS, NEON_WIDEN, family
from emit.convention import CALLING_CONVENTION, Layout, domain, function_name, layout
from emit.schedule import live_registers
from emit.steps import body_steps, input_steps, instruction_forms, output_steps
from isa_specs import get_isa
from isa_specs.features import FEATURES, REGISTER_FILES
from isa_specs.instruction import CType
from sketches.program import Program
from synth.kernel import spec_from_key

# int8 kernels that get a ``_kloop`` (the K loop of a GEMM around the step): byte elements or 8-bit data
# widened to int16 (w16) or any int16 (s16), B in k groups of one 32-bit lane per column
KLOOP_LAYOUTS, KLOOP_TYPES = ("k4", "k4b"), ("u8s8", "u7s8", "u8r7", "s8s8", "s8s7", "u8u8", "w16", "s16")


# the models made in this process, by their entry's JSON text
_MODELS: dict[str, dict] = {}


def kernel_model(entry: dict) -> dict:
    """Everything the kernel template needs, computed from the entry, its spec and the ISA table, once per
    process for entries of the same content (``test-kernels`` asks for each entry's model once per
    compiler, and the library once more: a pass over the cache's 332 entries took 3.9 s of CPU). Callers
    read the model and never change it."""
    text = json.dumps(entry, sort_keys=True)
    if text not in _MODELS:
        _MODELS[text] = _computed_model(entry)
    return dict(_MODELS[text], entry=entry)


def _computed_model(entry: dict) -> dict:
    spec = spec_from_key(entry["spec"])
    program = Program.from_json(entry["program"])
    isa = get_isa(program.isa)
    lay = layout(spec)
    n_spec = len(spec.input_names)
    if list(program.inputs[:n_spec]) != list(spec.input_names):
        raise EmitError(f"program inputs {program.inputs[:n_spec]} are not the spec's {spec.input_names}")
    constants = entry.get("constants", {})
    if set(program.inputs[n_spec:]) != set(constants):
        raise EmitError(f"program constants {program.inputs[n_spec:]} differ from the entry's {sorted(constants)}")
    if len(program.outputs) != len(lay.outputs):
        raise EmitError(f"{len(program.outputs)} program outputs for {len(lay.outputs)} output slots")
    forms = instruction_forms(program, isa)
    live = live_registers(program)
    types: dict[int, CType] = {}
    tile_config = kloop = None
    if spec.kind == "int8" and spec.layout == "tile":
        kloop, tile_config = tile_steps(program, lay, forms, live)
        steps = kloop["enter"] + kloop["body"] + kloop["leave"]
    else:
        loads = input_steps(program, isa, lay, constants, live, types)
        # an acc tile's accumulators stay in registers across the K loop around it (neon_int8.ACC_KLOOP):
        # its body is scheduled in what they leave (all 32 spilled 7 accumulators a K step of the s8s7 tile)
        held = len(lay.outputs) if spec.kind == "int8" and spec.layout == "acc" else 0
        steps = (body_steps(program, live, forms, types, loads, REGISTER_FILES[isa.name].count - held)
                 + output_steps(program, isa, lay, types))
        if spec.kind == "int8" and spec.layout in KLOOP_LAYOUTS and spec.types in KLOOP_TYPES:
            kloop = {}
    if kloop is not None:
        kloop["b_block_rows"] = spec.k // spec.group
    features = _features(program, isa, forms, live)
    fn = function_name(entry)
    params, call_args = [], []
    for b in lay.buffers:
        params += [f"{b.pointee} *{b.name}"] + ([f"int {b.name}_stride"] if b.unit else [])
        call_args += [b.name] + ([f"{b.name}_stride"] if b.unit else [])
    return {"entry": entry, "spec": spec, "isa": isa, "function": fn, "params": params, "call_args": call_args,
            "steps": steps, "program_lines": program.lines(), "layout": lay, "features": sorted(features),
            "guard": sorted(m for f in features for m in FEATURES[f].macros),
            "include_guard": f"QSYNTH_{fn.upper()}_H", "amx": "amx-int8" in features, "domain": domain(spec),
            "amx_runtime": AMX_RUNTIME if "amx-int8" in features else "",
            "tile_config": tile_config, "kloop": kloop, "gemv": _gemv_model(spec, lay),
            "tile_gemm": _tile_gemm_model(spec, lay),
            "convention": CALLING_CONVENTION[lay.kind]}


def kernel_features(entry: dict) -> list[str]:
    """The CPU features the entry's kernel needs, as ``kernel_model`` lists them, without scheduling its
    body (what a host needs to run it: every entry of the library is asked, per process)."""
    program = Program.from_json(entry["program"])
    isa = get_isa(program.isa)
    return sorted(_features(program, isa, instruction_forms(program, isa), live_registers(program)))


def _features(program: Program, isa, forms: list, live: set[int]) -> set[str]:
    """The features of the instructions the outputs depend on (NEON: and ``neon`` itself)."""
    features = {insn.feature for k, (insn, _) in enumerate(forms) if len(program.inputs) + k in live}
    return features | {"neon"} if isa.name == "neon" else features


# Blocks per iteration of the _gemv/_gemm K loop. x86: two, half the loop's scalar uops, which
# otherwise take vector port slots (AVX-512 A1W1: +3-4% side by side). NEON: one; two spill the
# A1W1 8x2 tile's accumulators (16 of the 32 registers) to the stack, and the operator's K loop took
# 1.31x the llvm-mca cycles on Cortex-A53, 1.58x on Cortex-A72 (ResNet-18 C6; scripts/mca_bitserial_layers.py).
# The NEON lanes tile (8 accumulators): two, its loads of the second word issue among the first's
# arithmetic on the in-order Cortex-A53 (C6 A1W1 K loop 4.62 -> 4.18 M llvm-mca cycles).
_GEMV_UNROLL = {"x86": 2, "neon": 1}
_LANES_UNROLL = {"x86": 2, "neon": 2}


def _gemv_model(spec, lay: Layout) -> dict | None:
    """What the K loop and the epilogue of an ``acc`` kernel need (None for other kernels)."""
    if lay.kind not in ("bitserial_acc", "bitserial_lanes"):
        return None
    lanes_layout = lay.kind == "bitserial_lanes"
    sub_lanes = 64 // spec.out_bits if lanes_layout else 1
    # lanes tiles with accumulator lanes narrower than a channel's word (NEON: 16 bits) run K in chunks
    # in which no lane can wrap: per word a lane gains at most out_bits per plane pair of its significance
    chunk_words = ((1 << spec.out_bits) - 1) // (spec.out_bits * min(spec.abits, spec.wbits)) if sub_lanes > 1 else None
    widen = NEON_WIDEN.get(spec.out_bits) if (family(spec.isa), spec.reg_bits) == ("neon", 128) else None
    if sub_lanes > 1 and widen is None:
        raise EmitError(f"no epilogue for {spec.out_bits}-bit accumulator lanes of a lanes tile on {spec.isa}")
    return {"sub_lanes": sub_lanes, "chunk_words": chunk_words,
            # NEON: a channel's accumulator lanes summed by vector pairwise adds (the compiler's own code
            # for a scalar loop moved every lane out one by one: 2x the plain TIR's cycles on a 1x1 layer)
            "neon_widen": widen,
            "acc_type": lay.buffers[2].pointee, "out_type": lay.lane_type, "rows": spec.rows, "cols": spec.cols,
            "loop": "gemm" if spec.cols > 1 or lanes_layout else "gemv", "strided": spec.cols > 1 or lanes_layout,
            "lanes_layout": lanes_layout, "registers_per_plane": spec.weight_registers,
            "weight_rows": spec.wbits if lanes_layout else spec.wbits * spec.rows,
            "column_registers": len(spec.column_accumulators(0)),
            "lane_sum": LANE_SUMS.get((family(spec.isa), spec.reg_bits, spec.out_bits)),
            "registers": len(spec.accumulator_names),
            "lanes": spec.lanes if lanes_layout else spec.reg_bits // spec.out_bits,
            "unroll": (_LANES_UNROLL if lanes_layout else _GEMV_UNROLL)[family(spec.isa)],
            "block_bytes": spec.reg_bits // 8, "significances": spec.significances, "abits": spec.abits,
            "hybrid": spec.encoding == "hybrid", "act_weight": 2 ** spec.wbits - 1}


# Activation columns of a tile kernel's ``_gemm``: its weights loaded once for all of them, and as many
# independent addp trees for the in-order Cortex-A53 to issue while each waits on the one before
# (ResNet-18 C3 A1W1, llvm-mca cycles of the K loop: 2 columns 0.65 M, 4 0.46 M, 8 0.43 M).
TILE_GEMM_COLUMNS = 8


def _tile_gemm_model(spec, lay: Layout) -> dict | None:
    """What the ``_gemm`` of a ``tile`` kernel of one 64-bit word of K per row needs (None for other
    kernels): a K loop for the layers whose K is a word or two, where a lanes tile's lane sums after
    the loop cost as much as the loop. Each word's dot products come out whole (an addp tree)."""
    if lay.kind != "bitserial" or spec.k_bits != 64:
        return None
    return {"cols": TILE_GEMM_COLUMNS, "rows": spec.rows, "abits": spec.abits, "lane_type": lay.lane_type,
            "unsigned": f"uint{spec.out_bits}_t", "register_bytes": spec.reg_bits // 8}
