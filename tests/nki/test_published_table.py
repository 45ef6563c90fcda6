"""The one table of published NKI latencies (tests/nki/published_latencies.toml): every entry says
what was measured and where it was published, and docs/nki.md shows it, with the published figure."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TABLE = tomllib.loads((ROOT / "tests" / "nki" / "published_latencies.toml").read_text())


def _figures(us: float) -> tuple[str, ...]:
    """The published figure as docs/nki.md may write it: in µs, or in ms from 1 ms up."""
    return (f"| {us:g} µs |",) + ((f"| {us / 1000:g} ms |",) if us >= 1000 else ())


def test_every_entry_has_its_figure_conditions_and_source():
    assert len(TABLE) >= 20
    for name, entry in TABLE.items():
        assert entry["published_us"] > 0, name
        assert len(entry["shape"]) > 20 and len(entry["source"]) > 20, name


def test_docs_show_every_entry_with_its_published_figure():
    doc = (ROOT / "docs" / "nki.md").read_text()
    table = doc.split("## Published latencies")[1].split("\n## ")[0]
    rows = {line.split("|")[1].strip().strip("`"): line for line in table.splitlines() if line.startswith("| `")}
    assert sorted(rows) == sorted(TABLE)
    for name, entry in TABLE.items():
        assert any(f in rows[name] for f in _figures(entry["published_us"])), (name, rows[name])
