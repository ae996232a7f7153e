"""C sources rendered from kernel models (``emit/templates``): a kernel's header, the test drivers
around it, and the library directory of headers, ``qsynth_kernels.h`` and ``manifest.json``."""
from __future__ import annotations

import json
from pathlib import Path

import jinja2

from emit import EmitError
from emit.convention import CALLING_CONVENTION, DOCUMENTATION, function_name
from emit.model import kernel_model
from emit.toolchain import compile_flags
from sketches.program import Program
from synth.files import write_atomically

_TEMPLATES = jinja2.Environment(
    loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
    trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined, keep_trailing_newline=True)


def header(m: dict) -> str:
    """The self-contained C header of kernel model ``m``."""
    return _TEMPLATES.get_template("kernel.h.j2").render(m=m)


def extern_source(m: dict) -> str:
    """The header with its ``qs_<name>_extern`` wrappers compiled in: a ``static inline`` function
    alone is dropped from an object file or an LLVM module."""
    return "#define QSYNTH_EXTERN_WRAPPERS 1\n" + header(m)


def emit_entry(entry: dict) -> str:
    """The C source (a self-contained header) of one cache entry."""
    return header(kernel_model(entry))


DRIVER_TEMPLATES = {"kernel": "driver.c.j2", "gemv": "gemv_driver.c.j2", "kloop": "kloop_driver.c.j2"}


def driver_names(m: dict) -> list[str]:
    """The test drivers of kernel model ``m``: ``kernel`` (its call), and ``gemv`` / ``kloop`` where it has that
    loop (bitserial ``acc`` kernels / int8 kernels of byte elements in k4, k4b or tile)."""
    return [name for name in DRIVER_TEMPLATES if name == "kernel" or m[name]]


def drivers_source(m: dict) -> str:
    """Kernel model ``m``'s header and test drivers (``templates/*driver.c.j2``; the driver ``name`` is the C
    function ``<function>_test_<name>``): one kernel's part of ``executable_source``."""
    return header(m) + "".join(_TEMPLATES.get_template(DRIVER_TEMPLATES[name]).render(m=m) for name in driver_names(m))


def executable_source(kernels: list[tuple[dict, str]]) -> str:
    """One test executable of ``kernels`` (each a kernel model and its ``drivers_source``) whose argv[1] names
    the driver to run: many kernels built by one compiler run, which parses the intrinsics headers once."""
    names = [f"{m['function']}_test_{name}" for m, _ in kernels for name in driver_names(m)]
    return _TEMPLATES.get_template("drivers.c.j2").render(kernels=[source for _, source in kernels], drivers=names)


def file_name(entry: dict) -> str:
    return function_name(entry).removeprefix("qs_") + ".h"


def emit_library(entries: list[dict], out_dir: str | Path) -> dict:
    """Write one header per entry, ``qsynth_kernels.h`` and ``manifest.json`` into ``out_dir``.

    Every file is written to a temporary name and renamed into place, so a reader never sees a
    half-written library. Returns the manifest."""
    out_dir = Path(out_dir)
    models = sorted((kernel_model(e) for e in entries), key=lambda m: (m["isa"].name, m["function"]))
    seen: dict[str, str] = {}
    for m in models:
        key = m["entry"]["cache_key"]
        if m["function"] in seen:
            raise EmitError(f"entries {seen[m['function']]} and {key} both define {m['function']}; "
                            "select one with --configs or remove the stale entry")
        seen[m["function"]] = key
    kernels = []
    for m in models:
        e = m["entry"]
        fname = file_name(e)
        write_atomically(out_dir / fname, header(m))
        kernels.append({"name": e["name"], "cache_key": e["cache_key"], "file": fname, "function": m["function"],
                        "signature": f"void {m['function']}({', '.join(m['params'])})",
                        "extern_function": m["function"] + "_extern", "isa": m["isa"].name, "kind": m["spec"].kind,
                        "spec": e["spec"], "cost": e["key"]["cost"], "proved": e["proof"]["proved"],
                        "length": len(Program.from_json(e["program"])), "guard": m["guard"],
                        "test_flags": list(compile_flags(m["isa"].name, "gcc", m["features"])), "domain": m["domain"],
                        "calling_convention": m["convention"]})
    write_atomically(out_dir / "qsynth_kernels.h", _TEMPLATES.get_template("library.h.j2").render(
        kernels=kernels, doc=DOCUMENTATION))
    manifest = {"format": 1, "header": "qsynth_kernels.h", "calling_conventions": CALLING_CONVENTION,
                "kernels": kernels}
    write_atomically(out_dir / "manifest.json", json.dumps(manifest, indent=1) + "\n")
    return manifest
