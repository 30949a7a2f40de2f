"""The runner's teardown lets a Case's state go by reference count: states whose ``measure`` is a
bound method or a closure over the state form a cycle that only gc.collect would free, and the
runner does not call it between Cases (its device buffers stayed, Case after Case)."""
import gc
import weakref

from commbench import runner
from commbench.measure.state import CaseState


class SelfTimed(CaseState):
    def __init__(self):
        super().__init__()
        self.measure = self._measure          # a bound method: state -> method -> state
        self.columns_from_time = lambda t: {"x": self.extra}   # a closure over the state

    def _measure(self, warmup, iters):
        return [1.0] * iters


class Fam:
    def __init__(self):
        self.torn = 0

    def teardown(self, state):
        self.torn += 1


def test_a_self_timed_state_is_freed_without_gc():
    gc.disable()
    try:
        fam, state = Fam(), SelfTimed()
        ref = weakref.ref(state)
        runner._teardown(fam, state)
        del state
        assert fam.torn == 1
        assert ref() is None, "the state outlived its Case: a reference cycle kept it"
    finally:
        gc.enable()


def test_without_the_cut_the_cycle_would_keep_it():
    gc.disable()
    try:
        state = SelfTimed()
        ref = weakref.ref(state)
        del state
        assert ref() is not None   # the test above checks something that can fail
    finally:
        gc.enable()
        gc.collect()
