"""Timing for the benchmarks: medians of repeated runs, by wall clock or by TVM's time evaluator, and
``side_by_side``, which times ours and the baselines so that load on a shared machine lands on both
sides of a ratio. TVM is imported only by the functions that time a TVM module, so that a baseline's
worker process (openvino_baseline.py) times its batches here without loading TVM."""
from __future__ import annotations

import time

import numpy as np


def median_seconds(fn, trials: int, clock=time.perf_counter) -> float:
    """Median seconds of ``trials`` calls after a first, by ``clock`` (wall; ``time.process_time`` or
    ``time.thread_time``: CPU time, which a machine shared with other jobs hides less)."""
    fn()
    times = []
    for _ in range(trials):
        t0 = clock()
        fn()
        times.append(clock() - t0)
    return float(np.median(times))


def tvm_seconds(module, args, trials: int) -> float:
    import tvm
    return float(np.median(module.time_evaluator("main", tvm.cpu(), number=1, repeat=trials, min_repeat_ms=50)(*args).results))


def batch_timer(fn, batch_s: float = 0.005, clock=time.perf_counter):
    """A function timing one batch of ``fn`` calls (about ``batch_s`` long) by ``clock`` (as for
    ``median_seconds``) and returning seconds per call. Each batch starts with one untimed call, as
    TVM's time evaluator does before every repeat of ours: interleaved with other runtimes, a batch's
    first call finds the caches holding another model's weights (OpenVINO's ResNet-18, timed in
    batches of two without it: 3.44 ms; by itself in a loop: 2.39)."""
    fn()
    t0 = clock()
    fn()
    calls = max(1, round(batch_s / max(clock() - t0, 1e-7)))

    def run() -> float:
        fn()
        t0 = clock()
        for _ in range(calls):
            fn()
        return (clock() - t0) / calls
    return run


def tvm_batch_timer(module, args, batch_s: float = 0.005):
    """``batch_timer`` of a compiled function, timed by TVM's evaluator (no Python call per run)."""
    import tvm
    once = tvm_seconds(module, args, 1)
    evaluator = module.time_evaluator("main", tvm.cpu(), number=max(1, round(batch_s / once)), repeat=1)
    return lambda: evaluator(*args).results[0]


class SelfTimed:
    """A baseline's batch timer when the baseline times its own batches (in a worker process of its
    runtime): ``side_by_side`` uses it as it is instead of timing calls of it."""

    def __init__(self, batch):
        self.batch = batch

    def __call__(self) -> float:
        return self.batch()


def side_by_side(ours, baselines: dict, trials: int, threads: int, clock=time.perf_counter) -> dict[str, float]:
    """Median seconds per call of ``ours`` (a batch timer: ``batch_timer``, ``tvm_batch_timer``) and
    of each baseline (name -> a function making its run function, in a new session of its runtime,
    or its ``SelfTimed`` batch timer), ``"ours"`` first; the baselines' run functions timed by
    ``clock`` (as for ``median_seconds``: ``ours`` and a ``SelfTimed`` timer keep their own). On one
    thread over ``trials`` rounds that run them all in turn, so that a burst of load on the shared
    machine lands on both sides of a ratio.
    On more, one after the other, one baseline session alive at a time: interleaved, the runtimes'
    worker pools took each other's cores (2-thread rows 2-4x slower than 1-thread ones), and two
    2-thread onnxruntime sessions slowed each other even with one idle (C2 int8 0.42 ms alone,
    0.67 ms beside an fp32 session)."""
    if threads == 1:
        timers = {"ours": ours, **{name: _batch_timer(make(), clock) for name, make in baselines.items()}}
        samples = {name: [] for name in timers}
        for _ in range(trials):
            for name, run in timers.items():
                samples[name].append(run())
        return {name: float(np.median(v)) for name, v in samples.items()}
    return {"ours": float(np.median([ours() for _ in range(trials)])),
            **{name: _median(make(), trials, clock) for name, make in baselines.items()}}


def _batch_timer(run, clock):
    return run if isinstance(run, SelfTimed) else batch_timer(run, clock=clock)


def _median(run, trials: int, clock) -> float:
    """Median seconds per call of a run function, or of a ``SelfTimed`` baseline's batches."""
    if isinstance(run, SelfTimed):
        return float(np.median([run() for _ in range(trials)]))
    return median_seconds(run, trials, clock)
