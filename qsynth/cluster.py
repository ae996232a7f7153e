"""Synthesis jobs on a Ray cluster (``qsynth sweep --executor ray [--address ADDR]``).

One Ray task per kernel spec (per bitwidth, ISA and shape). A task runs the synthesis in a fresh
Python process on its worker (``python -m qsynth.cluster job ...``), killed ``GRACE`` seconds past the
per-kernel ``--timeout``, and returns the entry it made; it never touches a cache. A cluster node is
not trusted: ``row`` takes a worker's result into the local kernel cache only through
``trust.admit``, which re-proves it here exactly as ``qsynth cache verify`` proves a cached file and
writes it under the cache lock, atomically, or writes nothing. A task that fails, times out or loses
its worker is reported; its kernel is not in the cache, so the next sweep submits it again, while the
kernels already in the cache are not resubmitted (``qsynth/sweep.py``).

The code the workers run is this checkout's ``qsynth`` (this module: the task and its child's entry
point) and the verifier it calls, ``synth``, ``sketches`` and ``isa_specs``, shipped with the job (Ray
``py_modules``); a node needs Python 3.11 with ``ray`` and qsynth's dependencies
(``pip install 'qsynth[cluster]'``).
"""
from __future__ import annotations

import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

PACKAGES = ("qsynth", "synth", "sketches", "isa_specs")
ROOT = Path(__file__).resolve().parent.parent
GRACE = 60.0          # seconds past --timeout before a worker's synthesis process is killed


class ClusterUnavailable(RuntimeError):
    """Ray is not installed, or the cluster cannot be reached."""


def run_job(spec_key: dict, cost: str, timeout: float) -> dict:
    """On a worker: synthesize one kernel in a child process. ``{"status": "done", "entry": ...}``, or
    ``failed`` / ``timeout`` / ``error`` with the reason; ``node`` names the machine."""
    node = platform.node()
    with tempfile.TemporaryDirectory(prefix="qsynth-job-") as tmp:
        out = Path(tmp) / "result.json"
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p),
                   QSYNTH_JOB_PARENT=str(os.getpid()))
        argv = [sys.executable, "-m", "qsynth.cluster", "job", json.dumps(spec_key), cost, str(timeout), str(out)]
        try:
            proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout + GRACE)
        except subprocess.TimeoutExpired:
            return {"status": "timeout", "reason": f"no result within {timeout + GRACE:g} s on {node}", "node": node}
        if proc.returncode != 0 or not out.exists():
            last = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
            return {"status": "error", "reason": f"on {node}: {last}", "node": node}
        return dict(json.loads(out.read_text()), node=node)


def _die_with_parent() -> None:
    """In the synthesis child: be killed when the worker dies (Linux), not left running alone."""
    import ctypes
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)       # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if str(os.getppid()) != os.environ.get("QSYNTH_JOB_PARENT"):       # the worker died before that
        sys.exit("the Ray worker that started this job is gone")


def _job_main(spec_key: str, cost: str, timeout: str, out: str) -> None:
    """The child process of ``run_job``: the synthesis itself, its outcome written to ``out``."""
    _die_with_parent()
    from synth.kernel import spec_from_key, synthesize
    from synth.stages import SynthesisFailed
    try:
        result = {"status": "done", "entry": synthesize(spec_from_key(json.loads(spec_key)), cost, float(timeout))}
    except SynthesisFailed as e:
        result = {"status": "failed", "reason": str(e)}
    Path(out).write_text(json.dumps(result))


def results(specs: list, cost: str, timeout: float, address: str | None, job=None):
    """Submit one ``job`` per spec to Ray and yield (spec, result) as they finish. Connects to
    ``address`` (``auto``, ``HOST:PORT``, ``ray://HOST:10001``; None: ``$RAY_ADDRESS``, else a Ray
    instance started here and stopped at the end), or uses the connection this process already has."""
    try:
        import ray
    except ImportError:
        raise ClusterUnavailable("--executor ray needs Ray: pip install 'qsynth[cluster]'") from None
    owned = not ray.is_initialized()
    if owned:
        _reachable(address or os.environ.get("RAY_ADDRESS"))
        try:
            ray.init(address=address, logging_level="warning", log_to_driver=False,
                     runtime_env={"py_modules": [str(ROOT / p) for p in PACKAGES]},
                     **({"include_dashboard": False} if address is None and "RAY_ADDRESS" not in os.environ else {}))
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise ClusterUnavailable(f"cannot reach the Ray cluster at {address or 'a new local instance'}: "
                                     f"{' '.join(str(e).split())}") from None
    task = ray.remote(num_cpus=1, max_retries=0)(job or run_job)
    pending = {task.remote(spec.key(), cost, timeout): spec for spec in specs}
    try:
        while pending:
            (ref,), _ = ray.wait(list(pending), num_returns=1)
            spec = pending.pop(ref)
            try:
                yield spec, ray.get(ref)
            except ray.exceptions.RayError as e:       # the worker died, the node was lost, the task raised
                yield spec, {"status": "error", "reason": f"{type(e).__name__}: {_first_line(e)}"}
    finally:
        for ref in pending:                            # interrupted: do not leave work running
            ray.cancel(ref, force=True)
        if owned:
            ray.shutdown()


def _reachable(address: str | None) -> None:
    """Fail at once on a HOST:PORT (or ray://HOST:PORT) nobody listens on; Ray itself retries for minutes."""
    import socket
    if not address or address in ("auto", "local"):
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except ValueError:
        raise ClusterUnavailable(f"--address {address}: expected auto, HOST:PORT or ray://HOST:PORT") from None
    except OSError as e:
        raise ClusterUnavailable(f"cannot reach the Ray cluster at {address}: {e.strerror or e}") from None


def _first_line(e: Exception) -> str:
    return next((line.strip() for line in str(e).splitlines() if line.strip()), type(e).__name__)


def row(spec, result: dict, cost: str) -> dict:
    """The sweep's row for one worker result; a done result enters the cache only if it re-proves here."""
    from synth import trust
    from synth.kernel import cache_key_fields
    base = {"name": spec.name, "from_cache": False, "node": result.get("node")}
    if result.get("status") != "done":
        return dict(base, status=result.get("status", "error"), reason=result.get("reason", "no reason given"))
    entry = result.get("entry")
    if not isinstance(entry, dict) or entry.get("key") != cache_key_fields(spec, cost):
        return dict(base, status="refused", reason="the worker returned an entry for another kernel")
    if not entry.get("proof", {}).get("proved"):
        return dict(base, status="unproved", reason="the worker did not prove it")
    verdict = trust.admit(entry)
    if not verdict["ok"]:
        return dict(base, status="refused", reason="not proved here: " + "; ".join(verdict["failures"]))
    kept = verdict["entry"]
    return dict(base, status="proved", length=kept["length"], cycles=kept["cycles"], cache_key=kept["cache_key"],
                **kept["timings"])


if __name__ == "__main__":
    if sys.argv[1:2] != ["job"] or len(sys.argv) != 6:
        sys.exit("usage: python -m qsynth.cluster job SPEC_KEY_JSON COST TIMEOUT OUT (run by a Ray task)")
    _job_main(*sys.argv[2:])
