"""Semaphore instructions. Their effect is on the machine's semaphores, which the machine applies
around every instruction (`ncsim.runtime.machine`): sem_wait's condition is one more wait, and
sem_signal's update one more signal. They touch no memory."""

from __future__ import annotations

from ncsim.engines import reference, semantics
from ncsim.engines.context import Context


@semantics("sem_wait", "sem_signal")
def no_data(ctx: Context) -> None:
    """Nothing to compute: the machine has already waited (sem_wait) or will update (sem_signal)."""


@reference("sem_wait", "sem_signal")
def no_data_ref(instr, inputs, state):
    return {}
