"""The docs name only what exists: modules, functions, files, options, endpoints (tests/doc_refs.py).

Checked: README.md, CONTRIBUTING.md (when present), every docs/*.md and recap/__init__.py's
docstring, against the code as it is. Not checked: docs/bench/ (generated results, and
HISTORY.md, which keeps old rounds with the module names of their day).
"""

from __future__ import annotations

import doc_refs
import pytest
from doc_refs import ROOT

DOCS = sorted(
    [p for p in (ROOT / "README.md", ROOT / "CONTRIBUTING.md") if p.exists()]
    + list((ROOT / "docs").glob("*.md"))
)
DOC_IDS = [str(p.relative_to(ROOT)) for p in DOCS]


def documents() -> list[tuple[str, str]]:
    out = [(str(p.relative_to(ROOT)), p.read_text()) for p in DOCS]
    return out + [("recap/__init__.py (docstring)", doc_refs.docstring_of(ROOT / "recap" / "__init__.py"))]


def report(problems: list[str]) -> str:
    return f"{len(problems)} stale reference(s):\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("path", DOCS, ids=DOC_IDS)
def test_named_modules_functions_and_attributes_exist(path):
    problems = doc_refs.check_names(str(path.relative_to(ROOT)), path.read_text())
    assert not problems, report(problems)


@pytest.mark.parametrize("path", DOCS, ids=DOC_IDS)
def test_named_files_links_and_anchors_exist_in_the_repository(path):
    problems = doc_refs.check_paths(str(path.relative_to(ROOT)), path.read_text(), path.parent)
    assert not problems, report(problems)


@pytest.mark.parametrize("path", DOCS, ids=DOC_IDS)
def test_command_line_options_exist(path):
    problems = doc_refs.check_commands(str(path.relative_to(ROOT)), path.read_text())
    assert not problems, report(problems)


@pytest.mark.parametrize("path", DOCS, ids=DOC_IDS)
def test_app_endpoints_exist(path):
    problems = doc_refs.check_endpoints(str(path.relative_to(ROOT)), path.read_text())
    assert not problems, report(problems)


def test_the_package_docstring_names_what_exists():
    text = doc_refs.docstring_of(ROOT / "recap" / "__init__.py")
    assert "recap." in text  # the example is there to be checked
    problems = doc_refs.check_document("recap/__init__.py", text, ROOT / "recap")
    assert not problems, report(problems)


@pytest.mark.parametrize("path", DOCS, ids=DOC_IDS)
def test_named_environment_variables_are_read(path):
    problems = doc_refs.check_env_vars(str(path.relative_to(ROOT)), path.read_text())
    assert not problems, report(problems)


# -- the checker itself: it finds what went stale before, and nothing in correct text ----------

STALE = """\
Budgets come from `recap.autobudget` and `recap.treecost.PassCost`; the mask is
`recap.treemask.tree_attention_bias`, the pass `recap.verify.long_tensor`, and on CUDA
`recap.hostcopy.HostPredictions` copies the top-k. Control tokens: `recap/inputs.py`;
token texts: `recap/tokens.py`. The algorithm is fixed by DESIGN.md (NOTES-transformers.md
has the rest; see the benchmark issue). `python3 ../shared/tools/import_cycles.py`.
`RecapConfig(children=8)`, `TokenMemory.no_such_method()`.

```bash
python -m recap generate --image a.png --prompt hi --xyz 3
python -m recap bench --suite nosuch
python -m recap bench --methods mine
python scripts/tree_digest.py --no-such-flag
python -m recap.shapes.train --no-such-flag
```

Options alone: `--frobnicate`; `RECAP_NO_SUCH_VARIABLE=1`. Endpoints: `/run`, `/no_such_endpoint`.
A [link](nowhere.md) and an [anchor](design.md#no-such-heading).
"""

EXPECTED = [
    "`recap.autobudget`",
    "`recap.treecost.PassCost`",
    "`recap.treemask.tree_attention_bias`",
    "`recap.verify.long_tensor`",
    "`recap.hostcopy.HostPredictions`",
    "recap/inputs.py",
    "recap/tokens.py",
    "DESIGN.md is not",
    "NOTES-transformers.md is not",
    "the benchmark issue",
    "../shared/tools",
    "no field 'children'",
    "no_such_method",
    "generate has no option --xyz",
    "unknown suite 'nosuch'",
    "--methods mine",
    "tree_digest.py has no option --no-such-flag",
    "recap.shapes.train has no option",
    "--frobnicate",
    "RECAP_NO_SUCH_VARIABLE",
    "/no_such_endpoint",
    "nowhere.md",
    "#no-such-heading",
]


def test_the_checker_reports_every_kind_of_stale_reference():
    problems = doc_refs.check_document("docs/stale.md", STALE, ROOT / "docs")
    text = "\n".join(problems)
    missed = [e for e in EXPECTED if e not in text]
    assert not missed, f"not reported: {missed}\nreported:\n{text}"
    assert not [p for p in problems if "/run" in p.split(": ", 1)[1] and "no_such" not in p], (
        "a real endpoint flagged"
    )


def test_the_checker_accepts_references_that_exist():
    fine = """\
`recap.engine.autobudget.verify_curve`, `recap.drafting.treecost.PassCost`, `recap.generate`,
`TokenMemory.clone()`, `RecapConfig(budget=12, scoped_memory=False)`, `recap/models/inputs.py`,
`docs/bench/`, `docs/screenshot_<tab>.png`, `README.md`,
[the design](design.md#the-architecture-layers-seams-recipes),
`python -m recap bench --suite quick --methods hf tr recap --out bench-results`,
`python scripts/tree_digest.py --suite quick`, `--limit N`, `/run`, `/config`, `RECAP_TEST_DEVICE=cuda`.

```python
from recap.memory.store import TokenMemory
```
"""
    anchors = doc_refs.heading_anchors((ROOT / "docs" / "design.md").read_text())
    fine = fine.replace("the-architecture-layers-seams-recipes", sorted(anchors)[0])
    assert doc_refs.check_document("docs/fine.md", fine, ROOT / "docs") == []
