"""Which of LLVM's scheduling models costs each Arm core we report, asked of llvm-mca itself: ``-mcpu=CORE``
takes the model LLVM assigns the core, and LLVM 19 assigns cortex-a57, a72, a76 and a77 one model, the
Cortex-A57's, so costing A76 code as ``cortex-a76`` gave A57 cycles (mca.STAND_IN now costs it on the
Neoverse-N1's, a core derived from the A76). Tables name the model with the core."""
from __future__ import annotations

import re
import subprocess
import tempfile
from functools import cache
from os.path import commonprefix

from tvm_integration.bench import mca

REPORTED = ("cortex-a53", "cortex-a72", "cortex-a76")      # the cores benchmarks/ publishes estimates for
_PROBE = "mul v0.4s, v1.4s, v2.4s\nadd v3.4s, v0.4s, v4.4s\nldr q5, [x0]\nadd x1, x1, #1\n"
_RESOURCE = re.compile(r"^\[[0-9.]+\]\s+-\s+(\S+)$", re.M)


@cache
def resources(cpu: str) -> tuple[str, ...]:
    """The processor resources of the scheduling model llvm-mca takes for ``-mcpu=cpu``: each model
    names its own (A53Unit..., A57Unit..., N1Unit...), so two CPUs with one list share one model."""
    with tempfile.NamedTemporaryFile("w", suffix=".s") as f:
        f.write(_PROBE)
        f.flush()
        out = subprocess.run([mca.tool("llvm-mca-19", "llvm-mca"), "-mtriple=aarch64", f"-mcpu={cpu}",
                              "-iterations=1", "-resource-pressure", "-instruction-info=0", f.name],
                             capture_output=True, text=True, check=True).stdout
    return tuple(_RESOURCE.findall(out))


def model(cpu: str) -> str:
    """The name of ``-mcpu=cpu``'s model, the prefix its resources share: ``A57`` for cortex-a76."""
    return commonprefix(list(resources(cpu))).removesuffix("Unit")


def label(core: str, cpu: str | None = None) -> str:
    """``core`` as a table names it, with the -mcpu it was costed with (``cpu``; by default
    mca.mca_cpu's) and that CPU's model: ``cortex-a76 (neoverse-n1's N1 model)``."""
    cpu = cpu or mca.mca_cpu(core)
    return f"{core} ({model(cpu)} model)" if cpu == core else f"{core} ({cpu}'s {model(cpu)} model)"
