"""sem_wait and sem_signal: they touch no memory, and they order the engines' streams."""

from __future__ import annotations

import numpy as np
import pytest

from ncsim.asm.assembler import assemble
from ncsim.asm.fields import SemOp
from ncsim.errors import DeadlockError, SimError
from ncsim.runtime.machine import Machine
from tests.engines.harness import DEFAULT, make, reference_of, run_one


@pytest.mark.parametrize("mnemonic", ["sem_wait", "sem_signal"])
def test_no_memory_effect(mnemonic):
    op = SemOp(5, ">=", 0) if mnemonic == "sem_wait" else SemOp(5, "+=", 2)
    instr = make(mnemonic, **({"cond": op} if mnemonic == "sem_wait" else {"update": op}))
    got, m = run_one(instr, {})
    assert got == {} == reference_of(instr, {})
    assert m.footprints == []
    assert m.sems[5] == (0 if mnemonic == "sem_wait" else 2)


def run(src: str) -> Machine:
    m = Machine(assemble(".sync manual\n" + src, "s.s"), DEFAULT, "s.s")
    m.run()
    return m


def test_signal_and_wait_order_two_engines():
    """The Vector engine's copy waits until the Scalar engine has written the tile, whatever the
    order the machine visits the engines in."""
    m = run("""\
.sbuf a f32[1, 4]
.sbuf b f32[1, 4]
tensor_copy b, a, engine=vector, wait=[s1>=1]
memset a, 3.0, engine=gpsimd
sem_signal s1+=1, engine=gpsimd
""")
    assert m.order == [("gpsimd", 0), ("gpsimd", 1), ("vector", 0)]
    b = m.mem.read(m.mem.tensor_pattern(m.tensor("b")))
    assert np.array_equal(b, np.full((1, 4), 3.0, np.float32))


def test_signal_forms_and_equality_wait():
    m = run("""\
sem_signal s2=7
sem_signal s2-=3
sem_signal s2+=1
sem_wait s2==5, engine=vector
""")
    assert m.sems[2] == 5 and len(m.order) == 4


def test_equality_wait_that_is_passed_over_deadlocks():
    with pytest.raises(DeadlockError, match=r"sem_wait needs s2==1 \(s2 is 2\)"):
        run("sem_signal s2+=2\nsem_wait s2==1, engine=vector\n")


def test_semaphore_below_zero_is_an_error():
    with pytest.raises(SimError, match=r"semaphore s3 is 1; s3-=2 would take it to -1, outside 0..4294967295"):
        run("sem_signal s3+=1\nsem_signal s3-=2\n")
