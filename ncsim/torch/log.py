"""The record of every call of an ncsim torch operator: its simulated time and timing report."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class OpCall:
    """One call of an ncsim torch operator."""

    op: str  # the operator's name, "namespace::name"
    kernel: str
    shapes: tuple[tuple[int, ...], ...]  # of its inputs
    simulated_ns: float  # the kernel's simulated time on the NeuronCore
    instructions: int
    verdict: str  # what bounds it (the report's verdict)
    host_seconds: float  # host time of the simulation
    report: Any = field(repr=False)  # ncsim.runtime.report.Report: .format(), .verdict, .total_ns


_calls: list[OpCall] = []


def record(call: OpCall) -> None:
    _calls.append(call)


def op_log() -> list[OpCall]:
    """Every call so far (since the last clear_op_log()), in order."""
    return list(_calls)


def clear_op_log() -> None:
    _calls.clear()


def last_report() -> Any:
    """The timing report of the most recent call of an ncsim torch operator (None before any)."""
    return _calls[-1].report if _calls else None


def op_time_ns(op: str | None = None) -> float:
    """The simulated time of the calls in the log, of one operator or of all."""
    return sum(c.simulated_ns for c in _calls if op is None or c.op == op)


def format_op_log() -> str:
    """One line per operator: calls, total and mean simulated time (what a training loop prints)."""
    by_op: dict[str, list[OpCall]] = defaultdict(list)
    for c in _calls:
        by_op[c.op].append(c)
    lines = []
    for op, calls in by_op.items():
        total = sum(c.simulated_ns for c in calls) / 1000
        lines.append(f"{op}: {len(calls)} calls, {total:.3f} µs simulated ({total / len(calls):.3f} µs each)")
    return "\n".join(lines) or "no ncsim operator calls"
