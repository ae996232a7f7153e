"""The benchmarks' batch timer: each batch's first call, which finds the caches holding what ran
before, is not timed, as TVM's time evaluator does not time ours; ``side_by_side`` times the baselines
by the clock it is given (CPU time, where the host is shared)."""
from tvm_integration.bench.timing import batch_timer, side_by_side


class Workload:
    """A call takes 1 tick, or 10 on the first call after ``evict`` (a cold cache); ``clock`` reads
    the ticks spent."""

    def __init__(self):
        self.ticks, self.cold = 0, True

    def __call__(self):
        self.ticks += 10 if self.cold else 1
        self.cold = False

    def clock(self):
        return self.ticks

    def evict(self):
        self.cold = True


def test_a_batch_after_other_work_is_timed_warm():
    work = Workload()
    run = batch_timer(work, batch_s=3, clock=work.clock)
    for _ in range(3):
        work.evict()
        assert run() == 1


def test_side_by_side_times_the_baselines_by_the_clock_it_is_given():
    work = Workload()
    times = side_by_side(lambda: 1.0, {"baseline": lambda: work}, trials=3, threads=1, clock=work.clock)
    assert times == {"ours": 1.0, "baseline": 1}
    assert side_by_side(lambda: 1.0, {"baseline": lambda: work}, trials=3, threads=2, clock=work.clock)["baseline"] == 1
