"""The layers of DESIGN.md ("Layout") as import-linter checks them ([tool.importlinter] in
pyproject.toml): the code keeps every contract, the contracts catch a cycle and a forbidden
import (lazy ones too), and importing the controller loads no learning library."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).parents[1]
CONFIG = ROOT / "pyproject.toml"
CONTRACTS = [
    c["name"] for c in tomllib.loads(CONFIG.read_text())["tool"]["importlinter"]["contracts"]
]


def _tree(folder: Path, vimpc: Path, envs: Path) -> Path:
    """``folder`` with the packages ``vimpc`` and ``vimpc_envs`` (the installed name of
    ``envs/``) of the given sources, so that a process with ``folder`` first on its path
    reads these and not those of another install."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vimpc").symlink_to(vimpc, target_is_directory=True)
    (folder / "vimpc_envs").symlink_to(envs, target_is_directory=True)
    return folder


def _python(code: str, tree: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(tree), "COLUMNS": "200", "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _lint(tree: Path) -> tuple[int, dict[str, str], str]:
    """Run import-linter on ``tree`` with this project's contracts: its exit code, each
    contract's verdict (``KEPT`` / ``BROKEN``) and the whole output."""
    code = (
        "import sys\n"
        "from importlinter.cli import lint_imports\n"
        f"sys.exit(lint_imports(config_filename={str(CONFIG)!r}, no_cache=True, no_logo=True))\n"
    )
    done = _python(code, tree)
    out = done.stdout + done.stderr
    verdicts = {}
    for name in CONTRACTS:
        lines = [line for line in out.splitlines() if line.startswith(name + " ")]
        assert len(lines) == 1, out
        verdicts[name] = lines[0][len(name) :].split()[0]
    return done.returncode, verdicts, out


def test_the_code_keeps_every_layer_contract(tmp_path):
    returncode, verdicts, out = _lint(_tree(tmp_path, ROOT / "vimpc", ROOT / "envs"))
    assert verdicts == dict.fromkeys(CONTRACTS, "KEPT"), out
    assert returncode == 0, out


def test_the_contracts_catch_a_cycle_and_a_forbidden_import(tmp_path):
    """A copy of the package with a plotting module importing the report (which imports the
    plotting modules) and the controller importing torch, both inside a function."""
    ignore = shutil.ignore_patterns("__pycache__")
    vimpc = shutil.copytree(ROOT / "vimpc", tmp_path / "src" / "vimpc", ignore=ignore)
    envs = shutil.copytree(ROOT / "envs", tmp_path / "src" / "envs", ignore=ignore)
    with open(vimpc / "plotting" / "style.py", "a") as f:
        f.write(
            "\n\ndef _width():\n    from vimpc.report import KEY_WIDTH\n\n    return KEY_WIDTH\n"
        )
    with open(vimpc / "mpc" / "tube.py", "a") as f:
        f.write("\n\ndef _learn():\n    import torch\n\n    return torch\n")
    returncode, verdicts, out = _lint(_tree(tmp_path / "tree", vimpc, envs))
    assert returncode != 0, out
    broken = {name for name, verdict in verdicts.items() if verdict == "BROKEN"}
    assert broken == {
        "vimpc follows the pipeline: a module imports only from the layers below it",
        "no import cycles between the modules of a package",
        "vimpc.mpc imports no learning or env library",
    }, out
    assert "vimpc.plotting.style -> vimpc.report" in out
    assert "vimpc.mpc.tube -> torch" in out


def _loaded_by_importing_mpc(tmp_path) -> set[str]:
    code = (
        "import json, sys\n"
        "import vimpc.mpc\n"
        "print(json.dumps(sorted(m for m in ('torch', 'gpytorch', 'gymnasium') if m in sys.modules)))\n"
    )
    done = _python(code, _tree(tmp_path, ROOT / "vimpc", ROOT / "envs"))
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.splitlines()[-1]))


def test_importing_the_controller_loads_no_learning_library(tmp_path):
    assert not _loaded_by_importing_mpc(tmp_path) & {"torch", "gpytorch"}


def test_importing_the_controller_loads_no_env_library(tmp_path):
    assert "gymnasium" not in _loaded_by_importing_mpc(tmp_path)


def test_importing_vimpc_and_its_envs_loads_no_mujoco(tmp_path):
    """MuJoCo is an extra: ``import vimpc``, ``import vimpc_envs`` (which registers
    ``vimpc/MujocoPlant-v0``) and making one of vimpc's own envs never load it; making the
    MuJoCo plant does."""
    code = (
        "import json, sys\n"
        "import gymnasium, vimpc, vimpc_envs\n"
        "before = 'mujoco' in sys.modules\n"
        "assert 'vimpc/MujocoPlant-v0' in gymnasium.registry\n"
        "gymnasium.make('vimpc/Pendulum-v0', jit=False)\n"
        "own = 'mujoco' in sys.modules\n"
        "from vimpc_envs.mujoco import shipped_mjcf\n"
        "gymnasium.make('vimpc/MujocoPlant-v0', xml_file=shipped_mjcf('pendulum'))\n"
        "print(json.dumps([before, own, 'mujoco' in sys.modules]))\n"
    )
    tree = _tree(tmp_path, ROOT / "vimpc", ROOT / "envs")
    (tree / "vimpc_scenarios").symlink_to(ROOT / "scenarios", target_is_directory=True)
    done = _python(code, tree)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == [False, False, True]
