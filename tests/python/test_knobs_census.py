"""docs/knobs.md is the census of the environment variables product code reads (issue 27 item 5):
the names in its "Kept" table must be exactly the `"OPFUSE_*"` strings under src/,
so a new knob cannot appear without a line (and a reason) there, and a retired one cannot linger."""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]


def read_in_src():
    names = set()
    for p in (ROOT / "src").rglob("*"):
        if p.suffix in {".h", ".cc", ".cu", ".cuh", ".in"} and p.is_file():
            names |= set(re.findall(r'"(OPFUSE_[A-Z0-9_]+)"', p.read_text(errors="replace")))
    return names


def listed_in_census():
    text = (ROOT / "docs" / "knobs.md").read_text()
    live = text[text.index("## Kept"):text.index("## Retired")]
    return set(re.findall(r"`(OPFUSE_[A-Z0-9_]+)`", live))


def test_census_lists_exactly_what_src_reads():
    src, doc = read_in_src(), listed_in_census()
    assert "OPFUSE_DISABLE" in src  # the scan sees the sources
    assert src - doc == set(), f"read in src/ but not in docs/knobs.md: {sorted(src - doc)}"
    assert doc - src == set(), f"in docs/knobs.md but no longer read in src/: {sorted(doc - src)}"


def test_retired_knobs_are_not_read():
    text = (ROOT / "docs" / "knobs.md").read_text()
    retired = set(re.findall(r"`(OPFUSE_[A-Z0-9_]+)`", text[text.index("## Retired"):]))
    assert retired and not (retired & read_in_src())
