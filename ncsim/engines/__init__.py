"""The engines' semantics: each module attaches an `execute` function and a plain numpy `reference`
to the rows of the instruction table it runs (`isa.InstrSpec.slots`).

- `execute(ctx)` runs one instruction on the simulated machine (`ncsim.engines.context.Context`).
  Before it runs, the instruction's rules (`ncsim.asm.rules.first_problem`, the functions the
  assembler checks) are checked again, so an object made elsewhere gets the assembler's error, not
  a crash; the execute functions check only what the run alone can know (values read from memory).
  The functional machine skips that check (calls the function as `execute.__wrapped__`) for a
  program whose instructions are known to keep the rules of its configuration
  (`ncsim.program.Program.rules_kept`: the assembler made it, or `verify_program` checked it).
- `reference(instr, inputs, state) -> outputs` computes the same from plain arrays, written as
  directly from the definition as possible (explicit loops where order matters): `inputs` maps
  each tile operand the instruction reads (and each in-place destination) to its stored values,
  `state` is a copy of the engine's registers, and the result maps each written operand to its
  stored values. The tests run every instruction both ways and compare bit for bit.

`load()` imports every engine module, so that every row of the table has both slots.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ncsim import isa

_LOADED = False


def semantics(*mnemonics: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: `fn(ctx)` executes the named instructions, once they keep the rules of ncsim.asm.rules."""
    from ncsim.asm.rules import first_problem

    def ruled(fn: Callable[..., Any]) -> Callable[..., Any]:
        def execute(ctx: Any) -> Any:
            problem = first_problem(ctx.instr, ctx.config)
            if problem:
                raise ctx.fail(problem)
            return fn(ctx)

        execute.__name__, execute.__doc__, execute.__wrapped__ = fn.__name__, fn.__doc__, fn  # type: ignore[attr-defined]
        _slot("execute", mnemonics)(execute)
        return fn

    return ruled


def reference(*mnemonics: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: `fn(instr, inputs, state) -> outputs` is the plain reference of the named instructions."""
    return _slot("reference", mnemonics)


def cost_function(*mnemonics: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: `fn(instr, config) -> Cost` is the cost of the named instructions (ncsim/engines/cost.py)."""
    return _slot("cost", mnemonics)


def _slot(slot: str, mnemonics: tuple[str, ...]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        for m in mnemonics:
            isa.BY_MNEMONIC[m].slots[slot] = fn
        return fn

    return wrap


def load() -> None:
    """Import every engine module (idempotent)."""
    global _LOADED
    if _LOADED:
        return
    from ncsim.engines import (  # noqa: F401 - registration
        cores,
        cost,
        dma,
        gpsimd,
        scalar,
        sync,
        tensor,
        vector,
        vector_special,
    )

    _LOADED = True
