"""The run layer from Python: :func:`vimpc.run_scenario` and :func:`vimpc.run_sweep` give
what ``vimpc run`` and ``vimpc sweep`` give, refuse bad arguments before any work, and the
backends implement one protocol."""

from __future__ import annotations

import csv
import inspect
import json
import subprocess
import sys
from pathlib import Path

import pytest

import vimpc
from vimpc import cli
from vimpc.errors import ConfigError
from vimpc.runs import backends

ROOT = Path(__file__).parents[2]
PENDULUM = str(ROOT / "scenarios" / "pendulum_swingup.toml")
SETS = ["episodes.count=2", "episodes.steps=3", "controller.horizon=5"]


def _measured(per_episode: list[dict]) -> list[dict]:
    # without the wall-clock figures (solve and call times, late calls): the machine's load
    return [
        {k: v for k, v in m.items() if "time" not in k and "late" not in k} for m in per_episode
    ]


def _only(folder: Path) -> Path:
    (run,) = [p for p in folder.iterdir() if p.is_dir()]
    return run


def test_run_scenario_gives_the_episodes_of_vimpc_run(tmp_path, capsys):
    args = ["run", PENDULUM, "--out", str(tmp_path / "cli"), "--no-plots", "--quiet"]
    assert cli.main([*args, *[a for s in SETS for a in ("--set", s)]]) == 0
    command = json.loads(
        (_only(tmp_path / "cli" / "pendulum_swingup") / "metrics.json").read_text()
    )
    printed = capsys.readouterr().out

    result = vimpc.run_scenario(
        PENDULUM, overrides=SETS, out=tmp_path / "lib", plots=False, progress=False
    )
    assert result.exit_status == 0
    assert result.folder == _only(tmp_path / "lib" / "pendulum_swingup")
    assert not result.folder.name.endswith(".partial")
    assert result.metrics == json.loads((result.folder / "metrics.json").read_text())
    assert len(result.metrics["per_episode"]) == 2
    assert _measured(result.metrics["per_episode"]) == _measured(command["per_episode"])
    assert result.metrics["seeds"] == command["seeds"]
    # what the command prints is printed by the call
    out = capsys.readouterr().out
    assert out.splitlines()[0] == printed.splitlines()[0]
    assert f"results: {result.folder}" in out


def test_run_sweep_gives_the_summary_of_vimpc_sweep(tmp_path):
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(
        'scenario = "pendulum_swingup"\n[sweep]\nname = "horizons"\n[set]\n'
        "episodes.count = 2\nepisodes.steps = 3\n[grid]\ncontroller.horizon = [4, 5]\n",
        encoding="utf-8",
    )
    args = ["sweep", str(sweep), "--out", str(tmp_path / "cli"), "--no-plots", "--quiet"]
    assert cli.main(args) == 0
    result = vimpc.run_sweep(sweep, out=tmp_path / "lib", plots=False, progress=False)
    assert result.exit_status == 0 and result.failed == {}
    assert result.folder == tmp_path / "lib" / "horizons"
    assert [r["configuration"] for r in result.rows] == ["c00", "c01"]
    assert [r["controller.horizon"] for r in result.rows] == [4, 5]

    def rows(folder: Path) -> list[dict]:
        with open(folder / "summary.csv", newline="") as handle:
            return [
                {k: v for k, v in r.items() if "time" not in k and "late" not in k}
                for r in csv.DictReader(handle)
            ]

    assert rows(result.folder) == rows(tmp_path / "cli" / "horizons")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"workers": 0}, "--workers must be a positive integer, got 0"),
        ({"workers": 2.5}, "--workers must be a positive integer, got 2.5"),
        ({"backend": "dask"}, "--backend must be one of local, ray, got 'dask'"),
        ({"address": "auto"}, "--address 'auto' applies to --backend ray only"),
        ({"resume": "x", "refit": True}, "--refit cannot be combined with --resume"),
        ({"workers": "2"}, "--workers must be a positive integer, got '2'"),
        ({"overrides": "episodes.count=2"}, "overrides must be a list of KEY.SUB=VALUE strings"),
    ],
)
@pytest.mark.parametrize("call", ["run_scenario", "run_sweep"])
def test_bad_arguments_are_refused_before_any_work(call, kwargs, message, tmp_path):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(".", r"\.")):
        getattr(vimpc, call)(None, out=None if "resume" in kwargs else tmp_path / "o", **kwargs)
    assert not (tmp_path / "o").exists()


def test_import_vimpc_loads_the_run_layer_only_when_asked():
    code = (
        "import sys, vimpc\n"
        "assert 'vimpc.runs' not in sys.modules, 'vimpc.runs imported by import vimpc'\n"
        "assert vimpc.run_scenario.__module__ == 'vimpc.runs.run'\n"
        "assert vimpc.run_sweep.__module__ == 'vimpc.runs.sweep'\n"
        "assert 'ray' not in sys.modules and 'torch' not in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def _methods(cls) -> dict[str, list[str]]:
    return {
        name: list(inspect.signature(member).parameters)
        for name, member in vars(cls).items()
        if callable(member) and not name.startswith("_")
    }


@pytest.mark.parametrize("backend", [backends.LocalBackend, backends.RayBackend])
def test_every_backend_implements_the_protocol(backend):
    wanted = _methods(backends.Backend)
    assert wanted, "the protocol declares no methods"
    got = _methods(backend)
    assert {name: got.get(name) for name in wanted} == wanted
    assert isinstance(backend.name, str) and backend.name in backends.BACKENDS
