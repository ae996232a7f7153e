"""The benchmarks' batch timer: each batch's first call, which finds the caches holding what ran
before, is not timed, as TVM's time evaluator does not time ours."""
from tvm_integration.bench.timing import batch_timer


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
