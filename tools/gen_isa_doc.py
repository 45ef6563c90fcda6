"""Regenerate docs/isa.md from the instruction table (ncsim/isa.py). Run by `make docs`."""

from pathlib import Path

from ncsim.isadoc import markdown

TARGET = Path(__file__).resolve().parent.parent / "docs" / "isa.md"

if __name__ == "__main__":
    TARGET.write_text(markdown())
    print(f"wrote {TARGET}")
