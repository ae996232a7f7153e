"""AMX on every host: the run time every AMX kernel header carries (``templates/qsynth_amx.h``: the
XTILEDATA permission and, where the translation unit is compiled without AMX, a plain-C emulation of
the tile intrinsics the emitted C uses), and the choice between a native and an emulated build.

One emitted source serves both: a build without ``-mamx-tile -mamx-int8`` selects the emulation
(``toolchain.compile_flags(..., emulated=True)``). Kernels are built emulated where the host lacks
AMX, or everywhere with ``QSYNTH_AMX_EMULATE=1`` (so a CI host with AMX tests both ways)."""
from __future__ import annotations

import os
from pathlib import Path

from emit import EmitError
from isa_specs import host

RUNTIME = (Path(__file__).parent / "templates" / "qsynth_amx.h").read_text()

# The CPU features the emulation provides: their compiler flags are left out of an emulated build.
EMULATED_FEATURES = frozenset({"amx-tile", "amx-int8"})

FORCE_VARIABLE = "QSYNTH_AMX_EMULATE"


def emulated(features) -> bool:
    """Whether a kernel using ``features`` is built with the emulation: it uses AMX, and the host
    lacks AMX or ``QSYNTH_AMX_EMULATE=1`` asks for the emulation (unset or 0: only where needed)."""
    amx = EMULATED_FEATURES & set(features)
    if not amx:
        return False
    force = os.environ.get(FORCE_VARIABLE, "0")
    if force not in ("0", "1"):
        raise EmitError(f"{FORCE_VARIABLE} must be 0 or 1, not {force!r}")
    return force == "1" or any(host.missing(f, ()) for f in sorted(amx))
