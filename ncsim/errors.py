"""Errors that reach a user: each names where (file:line:col or byte offset), shows the line, says the rule.

Every failure that bad input can cause is an `NcsimError`; the CLI prints `format()` and exits 1.
Anything else escaping is a bug in ncsim, not in the user's program.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SourceLoc:
    """A place in a source file. `line` and `col` count from 1; `text` is the whole source line."""

    file: str
    line: int
    col: int = 1
    text: str = ""
    length: int = 1  # how many characters the caret underline covers

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


MAX_SHOWN = 200  # a source line longer than this is shown as a window around the error's column
WINDOW = 120  # characters of the line in that window
ELLIPSIS = "..."


def shown_window(text: str, col: int) -> tuple[str, int, int]:
    """The part of a source line an error shows, the error's column in it and the column after the
    last character of source it shows: the whole line up to MAX_SHOWN characters, else WINDOW
    characters around `col` marked with "..." where cut."""
    if len(text) <= MAX_SHOWN:
        return text, col, len(text) + 1
    start = max(0, min(col - 1 - WINDOW // 2, len(text) - WINDOW))
    end = min(len(text), start + WINDOW)
    head = ELLIPSIS if start > 0 else ""
    tail = ELLIPSIS if end < len(text) else ""
    return head + text[start:end] + tail, col - start + len(head), end - start + len(head) + 1


class NcsimError(Exception):
    """An error in the user's input, with where it happened and the rule it broke.

    `loc` is a SourceLoc for text input; `offset` a byte offset for binary input (object files).
    """

    def __init__(
        self,
        message: str,
        loc: SourceLoc | None = None,
        *,
        file: str | None = None,
        offset: int | None = None,
        notes: tuple[str, ...] = (),
        included_from: tuple[SourceLoc, ...] = (),
    ):
        super().__init__(message)
        self.message = message
        self.loc = loc
        self.file = file if file is not None else (loc.file if loc else None)
        self.offset = offset
        self.notes = tuple(notes)
        self.included_from = tuple(included_from)  # the .include lines that led to `loc`, innermost first

    def at(self, loc: SourceLoc) -> NcsimError:
        """The same error placed at `loc`, if it had no place yet."""
        if self.loc is not None:
            return self
        return type(self)(self.message, loc, offset=self.offset, notes=self.notes, included_from=self.included_from)

    def format(self) -> str:
        chain = [f"in file included from {where.file}:{where.line}" for where in self.included_from]
        if self.loc is not None:
            head = f"{self.loc}: error: {self.message}"
        elif self.file is not None and self.offset is not None:
            head = f"{self.file}: byte {self.offset}: error: {self.message}"
        elif self.file is not None:
            head = f"{self.file}: error: {self.message}"
        else:
            head = f"error: {self.message}"
        lines = [*chain, head]
        if self.loc is not None and self.loc.text:
            text, col, stop = shown_window(self.loc.text.rstrip("\n").expandtabs(1), self.loc.col)
            gutter = f"{self.loc.line:>5} | "
            lines.append(gutter + text)
            width = max(1, min(self.loc.length, stop - col))
            lines.append(" " * (len(gutter) - 2) + "| " + " " * (col - 1) + "^" + "~" * (width - 1))
        lines.extend(f"  note: {n}" for n in self.notes)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()


class AsmError(NcsimError):
    """Malformed assembly source: a lexical, syntactic or semantic rule of the language is broken."""


class ObjectFileError(NcsimError):
    """An object file that is not a well-formed ncsim ELF object."""


class ConfigError(NcsimError):
    """A hardware-parameter override that names no parameter or gives an invalid value."""


class SimError(NcsimError):
    """A program that breaks a rule of the machine while it runs (placed at the instruction's source line)."""


class DeadlockError(SimError):
    """Engines wait on semaphores that no instruction left to run can satisfy."""

    # Set by the timing model: a function returning the TimingResult of the instructions that ran
    # before the deadlock (for --trace and --timeline); None from the functional machine.
    partial: Callable[[], Any] | None = None

    @classmethod
    def of(cls, waiting: list[Waiting], after: tuple[str, ...] = ()) -> DeadlockError:
        """The report of the functional machine and of the timing model alike: one note per waiting
        engine, then `after`; placed at the first waiting instruction."""
        notes = [f"{w.engine} engine waits at {w.loc or f'instruction {w.index}'}: {w.mnemonic} needs"
                 f" {', '.join(w.unmet)}; {w.size - w.index} of its {w.size} instructions have not run"
                 for w in waiting]
        n = len(waiting)
        first = next((w.loc for w in waiting if w.loc is not None), None)
        return cls(f"deadlock: {n} engine{'s wait' if n != 1 else ' waits'} for semaphore values that no"
                   " instruction left to run can produce", first, notes=tuple(notes) + after)


def unmet_wait(sem: int, op: str, value: int, now: int, name: str | None = None) -> str:
    """A wait that does not hold, in words: `s3>=1 (s3 is 0)`, or with the source's `.sem` name
    `ready>=1 (ready, s3, is 0)`."""
    if name:
        return f"{name}{op}{value} ({name}, s{sem}, is {now})"
    return f"s{sem}{op}{value} (s{sem} is {now})"


@dataclass(frozen=True)
class Waiting:
    """An engine stopped at a wait: its stream, the instruction's index there and source place, the
    unmet conditions in words ("s3>=1 (s3 is 0)") and the stream's length."""

    engine: str
    index: int
    loc: SourceLoc | None
    mnemonic: str
    unmet: tuple[str, ...]
    size: int


class RaceError(SimError):
    """Two instructions on different streams touch the same bytes, one writing, and no semaphore orders them."""


class InputError(NcsimError):
    """A kernel input or a sidecar that cannot be used: missing, wrong shape or dtype, unreadable."""
