"""The four kernels of the NKI tutorial "Matrix multiplication" (aws-neuron-sdk,
general/nki/tutorials/matrix_multiplication.rst) at the size of its performance table: lhsT
[8192, 4096] x rhs [8192, 8192], bf16. The kernels are tools/bench_nki.py's (written there from
the tutorial's algorithms): one source for both the speed benchmark and the calibration."""

from __future__ import annotations

from bench_nki import VARIANTS

import ncsim.nki.language as nl
from ncsim.nki.typing import tensor

M, K, N = 4096, 8192, 8192


def _case(variant: str):
    return lambda: (VARIANTS[variant], (tensor[[K, M], nl.bfloat16], tensor[[K, N], nl.bfloat16]))


CASES = {name: _case(name) for name in VARIANTS}
