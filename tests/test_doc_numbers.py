"""Docs whose numbers cannot go stale: every quoted benchmark figure is read from its result file.

A figure in the docs carries a marker naming the result file and the value it quotes
(``tests/doc_figures.py`` gives the notation); these tests fill each marker from the file and
fail when the text says something else. In the main docs (README.md, docs/benchmark.md) a
speedup ("1.56x"), a MAT value or a figure in a table with no marker fails too, so a new figure
cannot be written without its source. docs/bench/HISTORY.md keeps old rounds as they were and is
not checked. Docstrings quote no measured figure: they point to the docs.
"""

from __future__ import annotations

import ast
import re

import doc_figures
import pytest
from doc_figures import ROOT

MAIN_DOCS = ["README.md", "docs/benchmark.md"]
MARKED_DOCS = sorted({*MAIN_DOCS, "CONTRIBUTING.md", "docs/bench/conversation/accuracy.md",
                      *(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))})
#: A measured figure in a docstring: a speedup, or a MAT value.
DOCSTRING_FIGURE = re.compile(r"(?<![\w.])\d+\.\d+x(?!\w)|\bMAT\b[^.;\d\n]{0,20}\d\.\d\d")


def problems_of(doc: str) -> list[doc_figures.Problem]:
    return doc_figures.check(doc, (ROOT / doc).read_text(encoding="utf-8"))[0]


@pytest.mark.parametrize("doc", MARKED_DOCS)
def test_every_marked_figure_is_what_its_result_file_gives(doc):
    problems = problems_of(doc)
    assert not problems, "figures that disagree with their source:\n  " + "\n  ".join(map(str, problems))


@pytest.mark.parametrize("doc", MAIN_DOCS)
def test_the_main_docs_quote_no_speedup_or_mat_without_its_source(doc):
    text = (ROOT / doc).read_text(encoding="utf-8")
    problems, vouched = doc_figures.check(doc, text)
    assert not problems
    unsourced = doc_figures.unsourced(doc, text, vouched)
    assert not unsourced, "figures with no source marker:\n  " + "\n  ".join(map(str, unsourced))


@pytest.mark.parametrize("doc", MAIN_DOCS)
def test_the_main_docs_mark_their_headline_figures(doc):
    text = (ROOT / doc).read_text(encoding="utf-8")
    assert "<!-- figure: docs/bench/results.json" in text
    assert "docs/bench/conversation/results.json" in text


def test_the_benchmark_guide_is_a_guide_and_the_past_runs_are_history():
    guide = (ROOT / "docs/benchmark.md").read_text(encoding="utf-8")
    assert len(guide.splitlines()) <= 400
    assert "bench/HISTORY.md" in guide
    history = (ROOT / "docs/bench/HISTORY.md").read_text(encoding="utf-8")
    assert "## Moved from the benchmark guide (issue 38" in history


def package_docstrings() -> list[tuple[str, str]]:
    out = []
    for path in sorted((ROOT / "recap").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        nodes = [tree, *(n for n in ast.walk(tree) if isinstance(n, (ast.ClassDef, ast.FunctionDef)))]
        out += [(f"{path.relative_to(ROOT)}:{getattr(n, 'name', '<module>')}", ast.get_docstring(n) or "")
                for n in nodes]
    return out


def test_recap_config_quotes_no_measured_figure():
    from recap.core.config import RecapConfig

    found = DOCSTRING_FIGURE.findall(RecapConfig.__doc__ or "")
    assert not found, f"RecapConfig's docstring quotes {found}: point to docs/benchmark.md instead"


def test_no_docstring_in_the_library_quotes_a_measured_speedup():
    found = [f"{where}: {m}" for where, doc in package_docstrings() for m in DOCSTRING_FIGURE.findall(doc)]
    assert not found, "measured figures in docstrings (point to the docs instead):\n  " + "\n  ".join(found)


# -- the checker itself: a wrong, a glued or an unmarked figure fails, a right one passes ----------

def check_text(text: str) -> tuple[list[str], list[str]]:
    problems, vouched = doc_figures.check("docs/x.md", text)
    return [str(p) for p in problems], [str(p) for p in doc_figures.unsourced("docs/x.md", text, vouched)]


def speedup(row: str) -> str:
    return f"{doc_figures.load('docs/bench/results.json')['summary'][row]['overall']['speedup']:.2f}x"


def test_a_figure_that_matches_its_source_passes_and_is_vouched_for():
    text = f"RECAP ran **{speedup('recap')}**<!-- figure: docs/bench/results.json " \
           "{summary.recap.overall.speedup:.2f}x --> over hf.\n"
    assert check_text(text) == ([], [])


def test_a_stale_figure_fails_naming_what_the_source_gives():
    text = "RECAP ran 9.99x<!-- figure: docs/bench/results.json {summary.recap.overall.speedup:.2f}x -->.\n"
    problems, _ = check_text(text)
    assert len(problems) == 1 and repr(speedup("recap")) in problems[0] and "docs/x.md:1" in problems[0]


def test_a_figure_is_matched_whole_not_as_the_tail_of_another_number():
    text = f"RECAP ran 1{speedup('recap')}<!-- figure: docs/bench/results.json " \
           "{summary.recap.overall.speedup:.2f}x -->.\n"
    assert check_text(text)[0]


def test_a_missing_file_or_path_fails():
    assert check_text("1.00x<!-- figure: docs/bench/nosuch.json {a:.2f}x -->\n")[0]
    assert check_text("1.00x<!-- figure: docs/bench/results.json {summary.nosuch.overall.mat:.2f}x -->\n")[0]


def test_a_marker_without_a_file_reads_the_file_of_the_marker_before():
    tr = speedup("tr")
    text = (f"{speedup('recap')}<!-- figure: docs/bench/results.json "
            "{summary.recap.overall.speedup:.2f}x -->"
            f" and {tr}<!-- figure: {{summary.tr.overall.speedup:.2f}}x -->\n")
    assert check_text(text) == ([], [])


def test_unmarked_speedups_mat_values_and_table_figures_are_reported():
    text = ("RECAP ran 1.56x, MAT 3.28; the target is 1.10x<!-- not measured: a target -->.\n\n"
            "| row | MAT |\n|---|---:|\n| recap | 3.28 |\n\n```bash\necho 2.00x\n```\n")
    _, unsourced = check_text(text)
    assert len(unsourced) == 3, unsourced
    assert any("'1.56x'" in u for u in unsourced) and any("MAT '3.28'" in u for u in unsourced)
    assert any("table figure '3.28'" in u for u in unsourced)


def test_a_table_marker_checks_every_cell_of_its_columns():
    rows = doc_figures.load("docs/bench/results.json")["summary"]
    good = f"{rows['tr']['overall']['mat']:.2f}"
    marker = ("<!-- table: docs/bench/results.json summary.{row}.overall"
              " | {mat:.2f} | {tokens_per_s:.1f} -->\n")
    head = "| method | MAT | tokens/s |\n|---|---:|---:|\n"
    ok = marker + head + f"| tr | {good} | {rows['tr']['overall']['tokens_per_s']:.1f} |\n| oracle | " \
        f"{rows['oracle']['overall']['mat']:.2f} | – |\n"
    assert check_text(ok) == ([], [])
    stale = ok.replace(f"| tr | {good} |", "| tr | 2.99 |")
    problems, _ = check_text(stale)
    assert len(problems) == 1 and "row 'tr', column 2 reads '2.99'" in problems[0]
    dash = ok.replace("| – |", "| 123.4 |")
    assert check_text(dash)[0], "a cell the source has no value for must read '–'"


def test_the_acceptance_prior_in_the_code_is_the_ablation_it_cites():
    """``SHAPES_MAT_CURVE`` quotes the ablation's fixed-budget MATs: the same file the docs read."""
    from recap.engine.autobudget import SHAPES_MAT_CURVE

    rows = doc_figures.load("docs/bench/ablation.json")["summary"]
    for budget, mat in SHAPES_MAT_CURVE:
        if budget:
            row = "recap" if budget == 24 else f"budget={budget}"
            assert round(rows[row]["overall"]["mat"], 2) == mat, (budget, mat)
