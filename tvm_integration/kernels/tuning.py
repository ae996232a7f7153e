"""Which tile an int8 operator uses, per operator shape and machine: measured by a search and kept in
a tuning log (``tvm_integration/tuning_logs/<uarch>-<tag>.json``, committed for the benchmark layers
and models). A log is named by the host's micro-architecture (LLVM's name for its model number) and a
tag of the x86 features its flags show (``features.X86`` rows): a model number alone does not tell
machines apart (this project's AMX Xeon reports 167, Rocket Lake's, which has neither AMX nor
AVX-VNNI), and what the flags show decides which tiles a host may run. Only those rows count, so a
kernel update adding unrelated flags keeps a machine's log.

The search knob is the tile shape among the proved tiles of the host's ISA
(``selection.int8_candidates``: on AVX-512 VNNI 6x64, 7x64, 7x48, 8x48, 8x32 and 14x16 with 16-byte
K blocks, and 14x16 with 4-byte ones, whose K padding is smallest: a 3-channel 7x7 stem packs 7
window rows of 24 bytes, 168, instead of 192); each candidate is compiled, checked to agree with the
others, and timed with the models' output stage. A shape missing from the log takes the tile that
wastes the least padding, ``round_up(rows, mr) * round_up(cols, nr)`` (ties: the wider tile, then
the longer K block). The rule is only a default, which is why the log exists
(``scripts/tune_layers.py``): on Zen 4 the 14x16 tile wins most layers though 64-column tiles pad no
more (its 896-byte accumulator tile lives on the stack, no workspace call per tile), by 1.3-2.8x on
MobileNetV2's 16-32-channel ones. An operator built for an ISA other than the logged winner's (VNNI
on the AMX host, whose log names AMX tiles for the deep layers) takes the fastest tile the log timed
for it.

The log is a JSON object ``{shape key: {"kernel": intrin, "ms": {intrin: ms per call}}}``, written
atomically under a file lock; a log that does not parse is an error naming the file, never ignored.
A log only ranks the tiles an operator admits (``choose`` picks among its candidates, every one proved
and admitted for the layer's weights), so an edited log can cost speed but never an answer; it is a
source of the compiled-model key (qnn/runtime/artifacts.py), so an edit also recompiles.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from filelock import FileLock

from isa_specs import host
from isa_specs.features import REGISTER_FILES
from synth.files import write_atomically
from tvm_integration.kernels.int8 import Kernel
from tvm_integration.kernels.packing import round_up

LOGS = Path(__file__).resolve().parent.parent / "tuning_logs"


class TuningLogError(ValueError):
    """A tuning log that cannot be read."""


def log_name(m: host.HostModel) -> str:
    """``<uarch>-<tag>``: the tag is 8 hex digits of the SHA-256 of ``m``'s x86 features, sorted and space-separated."""
    return f"{m.uarch}-{hashlib.sha256(' '.join(sorted(host.x86_features(m))).encode()).hexdigest()[:8]}"


def log_path(name: str, root: Path = LOGS) -> Path:
    """The log named ``name`` (``log_name`` of its host)."""
    return root / f"{name}.json"


def host_log(m: host.HostModel | None = None, root: Path = LOGS) -> Path:
    """The log a host (default: this one) reads and its tuning extends: its own, else the one log of a host
    with the same x86 features (the same tag), whatever LLVM names its model number: the AMX Xeon's VM has
    reported model 167 (rocketlake) and 207 (emeraldrapids) on the same flags. One log per feature set: a
    log of its own name would hide the other's shapes."""
    name = log_name(m or host.model())
    same_features = sorted(root.glob(f"*-{name.rsplit('-', 1)[1]}.json"))
    own = log_path(name, root)
    return own if own.is_file() or len(same_features) != 1 else same_features[0]


def read_log(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        log = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise TuningLogError(f"tuning log {path} is not valid JSON ({e}); delete it or rerun scripts/tune_layers.py")
    if not isinstance(log, dict) or not all(isinstance(v, dict) and "kernel" in v for v in log.values()):
        raise TuningLogError(f"tuning log {path}: every entry must be an object with a 'kernel'")
    return log


def record(key: str, times_ms: dict[str, float], path: Path) -> str:
    """Store the measured candidates of ``key`` and return the fastest."""
    best = min(times_ms, key=times_ms.get)
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        log = read_log(path)
        log[key] = {"kernel": best, "ms": {k: round(v, 4) for k, v in sorted(times_ms.items())}}
        write_atomically(path, json.dumps(log, indent=1, sort_keys=True) + "\n")
    return best


def spills(kernel: Kernel) -> bool:
    """Whether a register tile (``k4b``: ``mr`` rows of accumulators, the B registers of a k step and
    one broadcast A) needs more vector registers than its ISA has: the compiler then reloads and
    stores accumulators every k step (the AVX-512 7x64 tile, 33 of 32: 82% of the ``vpdpbusd`` peak
    from L1 on the AMX host, where 14x32 of the same 28 accumulators reaches 95%)."""
    spec = kernel.spec
    if spec.layout != "k4b" or spec.isa not in REGISTER_FILES:
        return False
    per_row = spec.nr * 32 // REGISTER_FILES[spec.isa].bits
    return (spec.mr + 1) * per_row + 1 + ROW_EXTRAS.get(spec.types, 0) > REGISTER_FILES[spec.isa].count


# Registers a k4b row holds besides its accumulators, B and the broadcast A: the AVX2 s8s7 tile's ones
# constant, |a|, and one temporary its sign(b, a), pair sums and their widening pass through. Its 6x16
# tile (18 registers) ran at 36.6 G MAC/s from L1 where 5x16 (16) ran at 52.4 (Zen 3 host,
# scripts/bench_kernels.py --isa avx2 --configs s8s7, loaded); at k = 16, quiet: 5x16 54.9, 10x8 40.3.
# The w16 tile's one: the product vpmaddwd writes before vpaddd adds it; u8r7's two: the ones and the
# pair sums vpmaddubsw writes (widened in place by vpmaddwd).
ROW_EXTRAS = {"s8s7": 3, "w16": 1, "u8r7": 2}


def least_padding(candidates: list[Kernel], rows: int, cols: int, depth: int = 1) -> Kernel:
    """A tile whose K step divides the reduction depth, where one does (the packing then copies whole
    channel runs; RegNet-Y-400MF's grouped 3x3 convolutions, 8 channels a group, took 2.06 ms on a
    16-byte step and 0.49 on an 8-byte one, tests/test_tuning.py; the model 18.43 -> 10.59 CPU ms on
    Zen 3, ShuffleNetV2 5.30 -> 4.58), then the tile that pads the output least, then the reduction depth (the AMX tiles' K blocks of 64
    and 256 bytes), then one whose registers fit (``spills``), then, without VNNI, a w16 tile before an
    s8s7 one (two multiplies per 32 MACs against three; Zen 3, BERT's dense layers of 128 rows, CPU time,
    s8s7 4x16x16 / w16 4x16x2: 768x768 1.249 / 1.020 ms, 3072x768 4.99 / 4.03, 768x3072 4.93 / 3.99; the
    tuning log keeps s8s7 where it measured faster), then the largest (fewest loads per
    product: from L1 on the AMX host, AVX-512 14x32 95% of the peak, 8x48 92%, 6x64 91%, 7x48 90%,
    8x32 83%, 14x16 72%; scripts/bench_kernels.py), the widest, then the deepest K block, but for AMX
    the shallowest: the 64-byte one ran as fast or faster on every ResNet-18 layer, also where 256
    divides the depth (docs/amx.md)."""
    return min(candidates, key=lambda k: (depth % k.spec.k != 0, round_up(rows, k.spec.mr) * round_up(cols, k.spec.nr),
                                          round_up(depth, k.spec.k), spills(k), k.spec.types == "s8s7",
                                          -k.spec.mr * k.spec.nr,
                                          -k.spec.nr, k.spec.k if k.spec.layout == "tile" else -k.spec.k))


def logged(key: str, candidates: list[Kernel], path: Path | None = None) -> Kernel | None:
    """The logged tile for ``key`` when it is among ``candidates``; else the fastest logged one of the
    first candidate's ISA (``selection.int8_candidates`` puts the preferred family first): an operator
    built for an explicit ISA, e.g. VNNI on the AMX host, whose logged winner is an AMX tile; None
    where the log timed none of them (a shape it lacks, or weights that admit tiles it did not time)."""
    entry = read_log(path or host_log()).get(key, {})
    by_name = {k.intrin: k for k in candidates}
    timed = [k for k in candidates if k.spec.isa == candidates[0].spec.isa and k.intrin in entry.get("ms", {})]
    return by_name.get(entry.get("kernel")) or min(timed, key=lambda k: entry["ms"][k.intrin], default=None)


def choose(key: str, candidates: list[Kernel], rows: int, cols: int, path: Path | None = None,
           depth: int = 1) -> Kernel:
    """``logged``'s tile, else the least-padding one of the first candidate's ISA."""
    return (logged(key, candidates, path)
            or least_padding([k for k in candidates if k.spec.isa == candidates[0].spec.isa], rows, cols, depth))


def conv2d_key(input_shape, layout: str, weight_shape, stride, padding, groups: int, data_dtype: str) -> str:
    return (f"conv2d {layout}{list(input_shape)} w{list(weight_shape)} s{list(stride)} p{list(padding)} "
            f"g{groups} {data_dtype}")


def dense_key(m: int, n: int, k: int, data_dtype: str) -> str:
    return f"dense m{m} n{n} k{k} {data_dtype}"
