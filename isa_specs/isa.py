"""An ISA: its instruction rows plus how to compile and run code that uses them."""
from __future__ import annotations

import hashlib
import inspect
from dataclasses import dataclass
from functools import cached_property

from isa_specs.instruction import Form, Instruction


@dataclass(frozen=True)
class Toolchain:
    """How harnesses and kernels for this ISA are built and run on this machine."""
    cc: str
    cflags: tuple[str, ...]
    runner: tuple[str, ...] = ()          # e.g. ("qemu-aarch64", "-cpu", "max")
    apt_packages: tuple[str, ...] = ()    # where ``cc``/``runner`` come from, for error messages


@dataclass(frozen=True)
class ISA:
    name: str
    description: str
    header: str
    instructions: tuple[Instruction, ...]
    toolchain: Toolchain
    module: object = None                 # the defining module, hashed into ``version``
    shared: tuple = ()                    # other modules its semantics call, hashed into ``version`` too

    def __post_init__(self):
        names = [i.mnemonic for i in self.instructions]
        dupes = {n for n in names if names.count(n) > 1}
        if dupes:
            raise ValueError(f"{self.name}: instructions declared twice: {sorted(dupes)}")

    @cached_property
    def forms(self) -> dict[str, tuple[Instruction, Form]]:
        """``mnemonic.arrangement`` → (row, form)."""
        return {i.form_id(f): (i, f) for i in self.instructions for f in i.forms}

    def instruction(self, mnemonic: str) -> Instruction:
        for i in self.instructions:
            if i.mnemonic == mnemonic:
                return i
        raise KeyError(mnemonic)

    @cached_property
    def version(self) -> str:
        """Hash of the semantics source and the lane algebra: part of every cache key."""
        from isa_specs import lanes, instruction
        h = hashlib.sha256()
        for mod in (lanes, instruction, self.module, *self.shared):
            h.update(inspect.getsource(mod).encode())
        return h.hexdigest()[:16]
