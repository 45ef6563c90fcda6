"""Single instructions whose duration a published profile screenshot shows (the hover box of one
instruction in the NKI performance guide's neuron-profile figures, NeuronCore-v2), as kernels that
load the operands, run that one instruction and store its result. The table entry of such a case
names the instruction (`instruction = "tensor_tensor"`): the calibration suite compares that
instruction's time in ncsim (its end - start) with the published duration, not the kernel's.
"""

from __future__ import annotations

import ncsim.nki.isa as nisa
import ncsim.nki.language as nl
from ncsim import nki
from ncsim.nki.typing import tensor


def _one_tensor_tensor(op):
    @nki.jit
    def kernel(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nisa.tensor_tensor(nl.load(a), nl.load(b), op=op))
        return out
    return kernel


multiply = _one_tensor_tensor(nl.multiply)
add = _one_tensor_tensor(nl.add)


def _args(partitions: int, free: int) -> tuple:
    return tensor[[partitions, free], nl.float32], tensor[[partitions, free], nl.float32]


CASES = {
    "tensor_tensor_mul_f32_128x8192": lambda: (multiply, _args(128, 8192)),
    "tensor_tensor_add_f32_64x8192": lambda: (add, _args(64, 8192)),
}
