"""Packaging: the shipped scenarios travel in the wheel as package data, a scenario runs by
its name from any folder, an unknown name is answered with the shipped names, and the
README's examples write files of their own that git ignores."""

from __future__ import annotations

import importlib.resources
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from vimpc import cli
from vimpc.errors import ConfigError, InputError
from vimpc.scenario.catalog import find_scenario, shipped_folder, shipped_scenarios

ROOT = Path(__file__).parents[1]
SOURCE_SCENARIOS = sorted(p.name for p in (ROOT / "scenarios").glob("*.toml"))
SOURCE_SWEEPS = sorted(f"sweeps/{p.name}" for p in (ROOT / "scenarios" / "sweeps").glob("*.toml"))
SOURCE_MJCF = sorted(f"mujoco/{p.name}" for p in (ROOT / "scenarios" / "mujoco").glob("*.xml"))
SHORT = ["--set", "episodes.count=1", "--set", "episodes.steps=3", "--quiet", "--no-plots"]


def _build_wheel(dest: Path) -> Path:
    """A wheel built from a copy of the sources (so the shared tree gets no build/ folder)."""
    src = dest / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "*.so", "build")
    for part in ("vimpc", "envs", "scenarios"):
        shutil.copytree(ROOT / part, src / part, ignore=ignore)
    for part in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / part, src / part)
    cmd = [sys.executable, "-m", "pip", "wheel", str(src), "-w", str(dest / "wheel")]
    cmd += ["--no-deps", "--no-build-isolation", "-q"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (wheel,) = (dest / "wheel").glob("vimpc-*.whl")
    return wheel


def test_the_source_tree_ships_scenarios():
    assert "pendulum_swingup.toml" in SOURCE_SCENARIOS and len(SOURCE_SCENARIOS) >= 5


def test_the_wheel_carries_every_scenario(tmp_path):
    wheel = _build_wheel(tmp_path)
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = [f for f in SOURCE_SCENARIOS if f"vimpc_scenarios/{f}" not in names]
    assert not missing, f"scenario files missing from {wheel.name}: {missing}"
    assert {"vimpc_scenarios/__init__.py", "vimpc_scenarios/README.md"} <= names
    assert {"vimpc/scenario/catalog.py", "vimpc_envs/__init__.py", "vimpc/cli.py"} <= names
    # the data package holds the scenario and MJCF files only, no tests or results
    inside = {n for n in names if n.startswith("vimpc_scenarios/")}
    assert SOURCE_SWEEPS and len(SOURCE_MJCF) == 8
    assert inside == {
        f"vimpc_scenarios/{f}" for f in SOURCE_SCENARIOS + SOURCE_SWEEPS + SOURCE_MJCF
    } | {
        "vimpc_scenarios/__init__.py",
        "vimpc_scenarios/README.md",
    }


def test_the_package_data_resolves_through_importlib_resources():
    folder = importlib.resources.files("vimpc_scenarios")
    found = sorted(p.name for p in folder.iterdir() if p.name.endswith(".toml"))
    assert found == SOURCE_SCENARIOS
    assert shipped_folder().is_dir()
    assert sorted(shipped_scenarios()) == [name.removesuffix(".toml") for name in found]
    for name, path in shipped_scenarios().items():
        assert path.read_bytes() == (ROOT / "scenarios" / f"{name}.toml").read_bytes()


def test_the_mjcf_files_resolve_through_importlib_resources():
    from vimpc_envs.mujoco import shipped_mjcf

    for name in SOURCE_MJCF:
        stem = Path(name).stem
        path = shipped_mjcf(stem)
        assert path.read_bytes() == (ROOT / "scenarios" / name).read_bytes()
    with pytest.raises(InputError, match="MJCF name must be one of.*did you mean 'fourbar'"):
        shipped_mjcf("four_bar")


def test_an_install_without_the_data_package_falls_back_to_the_source_tree(monkeypatch):
    """An editable install made before the scenarios became package data has no
    vimpc_scenarios; its source tree still holds them, and without one the error says how to
    get them."""
    from vimpc.scenario import catalog

    monkeypatch.setattr(catalog, "PACKAGE", "vimpc_scenarios_not_installed")
    assert shipped_folder() == (ROOT / "scenarios").resolve()
    monkeypatch.setattr(catalog, "FALLBACK", "no_such_folder")
    with pytest.raises(ConfigError, match=r"shipped scenarios are missing.*reinstall vimpc"):
        shipped_folder()


@pytest.mark.slow
def test_a_regular_install_runs_a_scenario_by_name(tmp_path):
    """The hostile path: a wheel in a fresh venv (casadi and torch from the system), run
    from a folder that is no checkout."""
    wheel = _build_wheel(tmp_path)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--no-deps", "-q", str(wheel)]
    subprocess.run(pip, check=True, capture_output=True, timeout=300)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    vimpc = str(venv / "bin" / "vimpc")
    listed = subprocess.run([vimpc, "list"], cwd=elsewhere, capture_output=True, text=True)
    assert listed.returncode == 0, listed.stderr
    assert str(venv) in listed.stdout and "pendulum_swingup" in listed.stdout
    run = [vimpc, "run", "pendulum_swingup", *SHORT, "--out", str(tmp_path / "runs")]
    done = subprocess.run(run, cwd=elsewhere, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert len(list((tmp_path / "runs" / "pendulum_swingup").glob("*/metrics.json"))) == 1
    assert not list(elsewhere.iterdir())


# -- names and paths ---------------------------------------------------------------------------


def test_run_and_fit_by_name_from_another_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["run", "pendulum_swingup", *SHORT, "--out", "runs"]) == 0
    (run,) = (tmp_path / "runs" / "pendulum_swingup").iterdir()
    resolved = tomllib.loads((run / "config.resolved.toml").read_text(encoding="utf-8"))
    assert resolved["scenario"]["name"] == "pendulum_swingup"
    assert resolved["controller"]["horizon"] == 40  # the shipped file's value, read from it
    assert cli.main(["fit", "pendulum_swingup.toml", "-o", "p.vimpc", "--quiet"]) == 0
    assert (tmp_path / "p.vimpc").is_file()
    capsys.readouterr()


def test_an_unknown_name_lists_the_shipped_ones(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["run", "pendulum_swingp", "--out", "runs"]) == 2
    err = capsys.readouterr().err
    assert "did you mean 'pendulum_swingup'?" in err
    assert all(name in err for name in shipped_scenarios())
    assert not (tmp_path / "runs").exists()
    assert cli.main(["fit", "zzzz", "-o", "z.vimpc"]) == 2
    err = capsys.readouterr().err
    assert "neither a file" in err and "did you mean" not in err and "cartpole_safe" in err
    assert not (tmp_path / "z.vimpc").exists()


def test_a_missing_path_points_to_the_shipped_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"does not exist.*vimpc run pendulum_swingup"):
        find_scenario("scenarios/pendulum_swingup.toml")
    with pytest.raises(ConfigError, match=r"'nowhere/x.toml' does not exist.*rollingdisk"):
        find_scenario("nowhere/x.toml")


def test_an_existing_file_wins_over_a_shipped_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shipped = shipped_scenarios()["pendulum_swingup"]
    local = tmp_path / "pendulum_swingup.toml"
    local.write_text(shipped.read_text(encoding="utf-8").replace("horizon = 40", "horizon = 7"))
    assert find_scenario("pendulum_swingup.toml") == Path("pendulum_swingup.toml")
    assert find_scenario(str(local)) == local
    # the bare name is the shipped scenario's (only an existing path is taken as a file)
    assert find_scenario("pendulum_swingup") == shipped
    # a folder of that name (results/runs/pendulum_swingup, say) is no scenario file
    (tmp_path / "runs" / "pendulum_swingup").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "runs")
    assert find_scenario("pendulum_swingup") == shipped
    with pytest.raises(ConfigError, match="is a folder, not a scenario file"):
        find_scenario("../runs")


def test_the_list_names_the_shipped_scenarios(capsys):
    assert cli.main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    first = {line.split()[0] for line in lines if line.strip()}
    assert set(shipped_scenarios()) <= first
    assert any("vimpc run pendulum_swingup" in line for line in lines)


def test_shipped_scenarios_name_no_files_relative_to_the_current_folder():
    """Files a scenario names are read relative to the current folder, so a shipped scenario
    that named one would fail when run by name from elsewhere."""
    for name, path in shipped_scenarios().items():
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
        named = {
            f"{table}.{key}": doc.get(table, {}).get(key)
            for table, key in (("data", "path"), ("data", "heldout_path"), ("model", "path"))
        }
        assert all(v is None for v in named.values()), f"{name} names files: {named}"


# -- the README's examples -----------------------------------------------------------------------


def _written_files(text: str) -> list[str]:
    """Every file the commands and code of a README write by name (``-o X``, ``--output X``,
    ``save_model(..., "X")``)."""
    out = re.findall(r"(?:-o|--output)\s+([^\s`]+)", text)
    out += re.findall(r"save_model\([^,]+,\s*[\"']([^\"']+)[\"']", text)
    return out


@pytest.mark.parametrize("readme", ["README.md", "scenarios/README.md"])
def test_readme_examples_write_distinct_ignored_files(readme):
    written = _written_files((ROOT / readme).read_text(encoding="utf-8"))
    assert written, f"found no file {readme} writes: the patterns above miss its examples"
    assert len(written) == len(set(written)), f"{readme} writes a file twice: {written}"
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("no git checkout to ask about ignored files")
    for name in written:
        done = subprocess.run(["git", "check-ignore", "-q", name], cwd=ROOT)
        assert done.returncode == 0, f"{name} (written by {readme}) is not git-ignored"
