"""The provenance records of ``results/`` and the status command (``python -m vimpc.results``):
every result file has a record, the committed results/README.md is what the records
generate, a record's hash is the one the check recomputes, and a changed source shows."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from vimpc import _provenance, results

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = ROOT / "tests" / "experiments"


def test_every_result_file_has_a_record():
    statuses, uncovered = results.scan(ROOT)
    assert statuses
    assert [str(p.relative_to(ROOT)) for p in uncovered] == []


def test_committed_readme_is_what_the_records_generate():
    path = ROOT / "results" / "README.md"
    assert path.read_text() == results.readme(ROOT), (
        "results/README.md differs from its records: run `python -m vimpc.results --write`"
    )


def test_the_project_pages_quote_the_papers_results_as_the_records_give_them():
    """The documentation's results page holds the table of the papers' results, and every
    page (README.md, docs/) is what the records and claims render."""
    rendered = results.project_pages(ROOT)
    assert results.PAPERS_BEGIN in rendered[Path("docs/results/index.md")]
    for page, text in rendered.items():
        assert (ROOT / page).read_text() == text, (
            f"{page}'s generated blocks differ from the records and claims: run "
            "`python -m vimpc.results --write`"
        )


def test_the_project_pages_quote_their_figures_from_the_claims():
    """Every section of results/claims.toml has its one block on a page (README.md or
    docs/), and each block is what the claims render from their tables (with the tables'
    states)."""
    texts = {p: (ROOT / p).read_text() for p in results.pages(ROOT)}
    sections = {c.section for c in results.load_claims(ROOT)}
    assert sections >= {"safety", "tubes", "conformal", "solvers", "benchmarks", "models"}
    for section in sections:
        holders = [p for p, t in texts.items() if results.claims_begin(section) in t]
        assert len(holders) == 1, f"claims section {section!r} has blocks on {holders}"
        assert results.claims_end(section) in texts[holders[0]]
    assert texts == results.project_pages(ROOT), (
        "the pages' claims differ from their tables: run `python -m vimpc.results --write`"
    )


def test_a_claim_renders_into_a_documentation_page(tmp_path, monkeypatch):
    """A section's block may stand on a page under docs/ instead of README.md; a second
    block of the same section anywhere is refused."""
    root, _ = _claims_repo(tmp_path, monkeypatch, _claim("v {value:.3f}", 'where = { label = "a" }'),
                           readme_sections=())  # fmt: skip
    (root / "docs" / "concepts").mkdir(parents=True)
    page = root / "docs" / "concepts" / "p.md"
    page.write_text(f"# P\n\n{results.claims_begin('s')}\nold\n{results.claims_end('s')}\n")
    rendered = results.project_pages(root)
    assert "- v 0.123 (`results/x/t.md`, fresh)\n" in rendered[Path("docs/concepts/p.md")]
    assert "old" not in rendered[Path("docs/concepts/p.md")]
    assert results.main(["--root", str(root), "--write"]) == 0
    assert "- v 0.123 (`results/x/t.md`, fresh)" in page.read_text()
    (root / "README.md").write_text(f"{results.claims_begin('s')}\n{results.claims_end('s')}\n")
    with pytest.raises(results.ClaimError, match="'s' appears twice: in README.md and docs/"):
        results.project_pages(root)


def _claims_repo(tmp_path, monkeypatch, claims: str, readme_sections=("s",)):
    """A repository of one table (t.csv with rows a, b, b) with a record, the given claims
    and a README with a block per section."""
    root, script, table = _repo(tmp_path, monkeypatch)
    (root / "results" / "x" / "t.csv").write_text(
        "# command: python make.py\nlabel,kind,value\na,p,0.12345\nb,q,7\nb,r,8\n"
    )
    _provenance.write_record(table, command="c", script=script, outputs=["t.csv"], root=root)
    (root / "results" / "claims.toml").write_text(claims)
    readme = "# P\n\n" + "".join(
        f"{results.claims_begin(n)}\n{results.claims_end(n)}\n\nprose\n" for n in readme_sections
    )
    (root / "README.md").write_text(readme)
    return root, script


def _claim(text: str, where: str, section: str = "s", table: str = "results/x/t.csv") -> str:
    return f'[[claim]]\nsection = "{section}"\ntext = "{text}"\ntable = "{table}"\n{where}\n'


def test_a_claim_renders_its_row_with_the_format_and_the_state_of_its_table(tmp_path, monkeypatch):
    claims = _claim("value {value:.2f}, kind {kind}", 'where = { label = "a" }') + _claim(
        "q {q.value:d} and r {r.value:.1%}",
        'rows = { q = { label = "b", kind = "q" }, r = { label = "b", kind = "r" } }',
    )
    root, script = _claims_repo(tmp_path, monkeypatch, claims)
    text = results.project_readme(root)
    assert "- value 0.12, kind p (`results/x/t.md`, fresh)\n" in text
    assert "- q 7 and r 800.0% (`results/x/t.md`, fresh)\n" in text
    assert text.endswith("prose\n") and results.project_readme(root, text) == text
    script.write_text("print('another table')\n")  # the table's source changed
    assert "- value 0.12, kind p (`results/x/t.md`, stale)\n" in results.project_readme(root)
    assert results.main(["--root", str(root), "--write"]) == 0
    assert "(`results/x/t.md`, stale)" in (root / "README.md").read_text()


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ('where = { label = "c" }', r"where = \{'label': 'c'\} selects 0 rows of results/x/t.csv"),
        ('where = { label = "b" }', r"where = \{'label': 'b'\} selects 2 rows of results/x/t.csv"),
        ('rows = { one = { label = "b" } }', r"rows.one = \{'label': 'b'\} selects 2 rows"),
        (
            'where = { name = "a" }',
            r"where names column 'name', which results/x/t.csv does not have",
        ),
    ],
)
def test_a_selector_must_match_exactly_one_row(tmp_path, monkeypatch, where, message):
    root, _ = _claims_repo(tmp_path, monkeypatch, _claim("v {value}", where))
    with pytest.raises(
        results.ClaimError, match=r'claim 1 \(section "s", "v \{value\}"\): ' + message
    ):
        results.project_readme(root)


@pytest.mark.parametrize(
    ("claims", "sections", "message"),
    [
        (_claim("v {missing}", 'where = { label = "a" }'), ("s",), "has no column 'missing'"),
        (_claim("v {kind:.2f}", 'where = { label = "a" }'), ("s",), "cannot format 'p'"),
        (_claim("v", 'where = { label = "a" }', table="results/x/u.csv"), ("s",),
         "table results/x/u.csv does not exist"),
        (_claim("v", 'where = { label = "a" }'), ("s", "other"),
         'has a block for claims section "other", but results/claims.toml has no claim'),
        (_claim("v", 'where = { label = "a" }', section="elsewhere"), ("s",),
         'no page \\(README.md, or a page under docs/\\) has a block for section "elsewhere"'),
    ],
)  # fmt: skip
def test_a_claim_that_cannot_be_rendered_is_refused(tmp_path, monkeypatch, claims, sections,
                                                    message):  # fmt: skip
    root, _ = _claims_repo(tmp_path, monkeypatch, claims, sections)
    with pytest.raises(results.ClaimError, match=message):
        results.project_readme(root)
    assert results.main(["--root", str(root), "--write"]) == 2


def test_a_papers_row_is_as_stale_as_its_stalest_table(tmp_path, monkeypatch):
    root, script, table = _repo(tmp_path, monkeypatch)
    other = table.with_name("u.md")
    other.write_text("| b |\n")
    for t, verdict in ((table, None), (other, "partial")):
        _provenance.write_record(t, command="c", script=script, root=root, paper="Fig. 1",
                                 verdict=verdict)  # fmt: skip
    rows = results.papers(root, results.scan(root)[0]).splitlines()[2:]
    assert len(rows) == 1 and rows[0].startswith("| Fig. 1 | `results/x/t.md`, `results/x/u.md`")
    assert rows[0].endswith("| partial | fresh |")  # the verdict from the table that gives one
    script.write_text(script.read_text() + "\n# changed\n")
    assert results.papers(root, results.scan(root)[0]).splitlines()[2].endswith("| stale |")
    # a README without the markers is left as it is
    assert results.project_readme(root, "# P\n\nprose\n") == "# P\n\nprose\n"
    block = f"# P\n\n{results.PAPERS_BEGIN}\n{results.PAPERS_END}\n\nafter\n"
    assert "| Fig. 1 |" in results.project_readme(root, block)
    assert results.project_readme(root, block).endswith("\nafter\n")


def test_reproduction_verdicts_are_recorded():
    """The paper reproductions carry their verdicts; the marked-stale tables say why."""
    records = {s.table.relative_to(ROOT / "results").as_posix(): s for s in results.scan(ROOT)[0]}
    verdicts = {name: s.data.get("verdict") for name, s in records.items()}
    assert verdicts["lsi/pendulum.md"] == "reproduced"
    assert verdicts["lsi/henon_heiles.md"] == "partial"
    assert verdicts["hamel/disk.md"] == "reproduced"
    assert verdicts["dlnn/symmetries.md"] == "not reproduced"
    assert verdicts["clnn/chain_baselines_ratios.md"] == "partial"
    # Figs. 1a and 1b and the bound's coverage and width re-run and read
    assert verdicts["gp_vi/energy.md"] == "partial"
    assert verdicts["gp_vi/constraints.md"] == "reproduced"
    assert verdicts["gp_vi/coverage.md"] == "partial"
    assert records["scenarios/summary.md"].state == "stale (marked)"


def _repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, Path]:
    """A repository of one script and one table; the records hash the script alone (the
    installed package lies outside it)."""
    monkeypatch.setattr(_provenance, "PACKAGES", ())
    root = tmp_path / "repo"
    (root / "results" / "x").mkdir(parents=True)
    (root / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    script = root / "make.py"
    script.write_text("print('table')\n")
    table = root / "results" / "x" / "t.md"
    table.write_text("# t\n")
    (root / "results" / "x" / "t.csv").write_text("a\n1\n")
    return root, script, table


def test_a_changed_source_makes_its_record_stale(tmp_path, monkeypatch):
    root, script, table = _repo(tmp_path, monkeypatch)
    record = _provenance.write_record(
        table, command="python make.py", script=script, outputs=["t.csv"], root=root
    )
    data = json.loads(record.read_text())
    assert "make.py" in data["sources"] and data["command"] == "python make.py"
    assert results.status(record, root).state == "fresh"
    assert results.scan(root)[1] == []
    (root / "results" / "x" / "t_plot.png").write_bytes(b"png")  # named after its table
    (root / "results" / "x" / "other.png").write_bytes(b"png")
    assert [p.name for p in results.scan(root)[1]] == ["other.png"]
    script.write_text("print('another table')\n")
    stale = results.status(record, root)
    assert (stale.state, stale.changed) == ("stale", ["make.py"])
    script.unlink()
    assert results.status(record, root).changed == ["make.py (missing)"]


def test_a_rerun_keeps_the_verdict_with_the_commit_it_judged(tmp_path, monkeypatch):
    root, script, table = _repo(tmp_path, monkeypatch)
    record = _provenance.write_record(
        table, command="c", script=script, root=root, paper="Fig. 1", verdict="partial"
    )
    judged = json.loads(record.read_text())
    judged["verdict_commit"] = "0" * 40
    record.write_text(json.dumps(judged))
    _provenance.write_record(table, command="c", script=script, root=root)
    again = json.loads(record.read_text())
    assert (again["paper"], again["verdict"], again["verdict_commit"]) == (
        "Fig. 1",
        "partial",
        "0" * 40,
    )
    assert "(judged at 0000000)" in results.generated(root, *results.scan(root))


def test_a_record_refuses_an_unknown_verdict(tmp_path, monkeypatch):
    root, script, table = _repo(tmp_path, monkeypatch)
    with pytest.raises(_provenance.ProvenanceError, match="verdict='fine': expected one of"):
        _provenance.write_record(table, command="c", script=script, root=root, verdict="fine")
    assert not _provenance.record_path(table).exists()


def test_readme_keeps_the_text_around_the_generated_table(tmp_path, monkeypatch):
    root, script, table = _repo(tmp_path, monkeypatch)
    _provenance.write_record(table, command="c", script=script, root=root)
    text = results.readme(root, "# Results\n\nhand-written\n")
    assert text.startswith("# Results\n\nhand-written\n\n" + results.BEGIN)
    assert "`x/t.md`" in text and text.rstrip().endswith(results.END)
    assert results.readme(root, text + "\nafter\n") == text + "\nafter\n"


@pytest.mark.filterwarnings("ignore::vimpc.errors.FitWarning")
def test_a_quick_run_writes_a_record_the_check_finds_fresh(tmp_path, monkeypatch):
    """structure_preservation.py in its quick mode (its own writer) and the shared
    write_table both leave a record whose hash the check recomputes from the files."""
    monkeypatch.syspath_prepend(str(EXPERIMENTS))
    module = importlib.import_module("structure_preservation")
    module.main(["--quick", "--out", str(tmp_path)])
    record = _provenance.record_path(tmp_path / "summary.md")
    data = json.loads(record.read_text())
    assert data["script"] == "tests/experiments/structure_preservation.py"
    assert {"tests/experiments/structure_preservation.py", "vimpc/integrators/__init__.py"} <= set(
        data["sources"]
    )
    assert {"summary.csv", "energy.png"} <= set(data["outputs"])
    assert results.status(record, ROOT).state == "fresh"
    tables = importlib.import_module("_tables")
    tables.write_table(tmp_path, "t", "T", "python x.py", "", [{"a": 1.0}])
    assert results.status(_provenance.record_path(tmp_path / "t.md"), ROOT).state == "fresh"


def test_the_status_command_prints_the_counts():
    done = subprocess.run(
        [sys.executable, "-m", "vimpc.results", "--root", str(ROOT)],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    assert "records:" in done.stdout.splitlines()[-1]
    assert "stale (marked)      results/scenarios/summary.md" in done.stdout


def test_a_rerun_keeps_the_verdict_and_its_note(tmp_path, monkeypatch):
    root, script, table = _repo(tmp_path, monkeypatch)
    record = _provenance.write_record(table, command="c", script=script, root=root,
                                      verdict="partial")  # fmt: skip
    data = json.loads(record.read_text())
    data["verdict_note"] = "read from the table"
    record.write_text(json.dumps(data))
    _provenance.write_record(table, command="c", script=script, root=root)  # the re-run
    again = json.loads(record.read_text())
    assert (again["verdict"], again["verdict_note"]) == ("partial", "read from the table")
