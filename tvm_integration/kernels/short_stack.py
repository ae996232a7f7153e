"""TVMScript parsed on a short stack. ``T.prim_func`` calls ``inspect.stack()`` (tvm/tirx/script/parser/entry.py),
which reads the source of every frame above it and, for each frame of no module file, scans all of
``sys.modules``: a TensorIntrin's two functions took 0.5 s to parse under pytest with onnxruntime and
torch loaded, most of it there. A function that defines them runs on a thread of its own, whose stack
is that function and the thread's few frames; it sees the same closures, and TVMScript still finds the
enclosing function's frame for annotations it resolves by name (``from __future__ import annotations``)."""
from __future__ import annotations

import functools
from concurrent.futures import ThreadPoolExecutor


def short_stack(build):
    """``build`` run on a new thread (a new one per call, so that builds may nest), its result or its
    exception returned to the caller."""
    @functools.wraps(build)
    def run(*args, **kwargs):
        with ThreadPoolExecutor(1, thread_name_prefix="tvmscript") as pool:
            return pool.submit(build, *args, **kwargs).result()
    return run
