"""The landing-zone contract's Python examples (``docs/landing-zone.md``) run as written.

Every fenced ``python`` block of the page is executed for real, in order, each in a namespace of its own, against a
temporary landing zone: the page names ``/data/landing/clicks`` as the landing path its examples use, and the test
puts a temporary folder in its place (nothing else of a block is changed). A renamed or moved helper fails here
before a producer copies the example.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from laketide.ingest import inspection, landing

DOC = Path(__file__).resolve().parents[1] / "docs" / "landing-zone.md"
#: the landing path the page's examples use (the page says so)
EXAMPLE_LANDING = "/data/landing/clicks"
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def python_blocks(text: str) -> list[str]:
    return _BLOCK.findall(text)


def test_the_page_says_which_landing_path_its_examples_use() -> None:
    text = DOC.read_text()
    assert f"`{EXAMPLE_LANDING}` as the landing path" in text
    blocks = python_blocks(text)
    assert len(blocks) >= 2 and all(EXAMPLE_LANDING in b for b in blocks)
    assert python_blocks("a\n```python\nx = 1\n```\n```bash\ny\n```\n") == ["x = 1\n"]


def test_every_python_example_of_the_landing_zone_contract_runs(tmp_path: Path) -> None:
    landing_path = tmp_path / "landing" / "clicks"
    blocks = python_blocks(DOC.read_text())
    for number, block in enumerate(blocks, 1):
        code = block.replace(EXAMPLE_LANDING, str(landing_path))
        assert "/data/" not in code, f"block {number} writes outside the landing zone it is given"
        try:
            exec(compile(code, f"{DOC.name}, python block {number}", "exec"), {"__name__": f"example_{number}"})
        except Exception as exc:  # any failure of an example is the finding
            pytest.fail(f"{DOC.name}: python block {number} fails: {type(exc).__name__}: {exc}\n{block}")
    # what the examples published is a landing zone as the contract describes it: one data file per example,
    # each with its audit record, every record counted, nothing reported
    files = sorted(landing.published_files(landing_path))
    assert len(files) == len(blocks) == 2, files
    assert sorted(landing.read_audits(landing_path)) == files
    assert sum(landing.expected_counts(landing_path).values()) == 2
    report = inspection.inspect(landing_path, files, event_time=inspection.EventTime("event_time"))
    assert report.findings == [] and sum(report.expected().values()) == 2
