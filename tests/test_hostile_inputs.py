"""Inputs a hostile tester tried that vimpc took badly: each is now refused in one line
naming the key or argument, the value and the fix, before any long work."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from vimpc import cli, scenario
from vimpc.data import Dataset
from vimpc.errors import ConfigError, InputError
from vimpc.runs import store
from vimpc.scenario import checks as scenario_checks

ROOT = Path(__file__).parents[1]
PENDULUM = str(ROOT / "scenarios" / "pendulum_swingup.toml")


def _run_refused(args: list[str], message: str, tmp_path: Path, capsys) -> str:
    assert cli.main(["run", *args, "--out", str(tmp_path / "runs"), "--quiet"]) == 2
    printed = capsys.readouterr().err
    assert message in printed and printed.count("\n") == 1, printed
    assert not (tmp_path / "runs").exists()
    return printed


def test_a_scenario_path_too_long_for_the_file_system_is_one_line(tmp_path, capsys):
    # Path.is_file() raises OSError (ENAMETOOLONG) rather than answering False
    long = str(tmp_path / ("L" * 300 + ".toml"))
    printed = _run_refused(
        [long], "is no file that can be read (File name too long)", tmp_path, capsys
    )
    assert len(printed) < 600  # the name is shortened in the message
    with pytest.raises(ConfigError, match="cannot be read: File name too long"):
        scenario.read_toml(long)


def test_an_episode_longer_than_memory_is_refused_before_it_runs(tmp_path, capsys):
    steps = 10**14
    message = _run_refused(
        [PENDULUM, "--set", "episodes.count=1", "--set", f"episodes.steps={steps}"],
        f"episodes.steps = {steps} would record",
        tmp_path,
        capsys,
    )
    # the largest accepted count is named, and it is accepted
    largest = int(message.rsplit("episodes.steps <= ", 1)[1])
    assert 0 < largest < steps
    memory = scenario_checks._memory_bytes()
    assert largest * 8 * (41 * 2 + 2 * 2 + 1) <= memory
    cfg = scenario.load_scenario(PENDULUM, ["episodes.count=1", f"episodes.steps={largest}"])
    assert cfg["episodes"]["steps"] == largest
    with pytest.raises(ConfigError, match="more than this machine's"):
        scenario.load_scenario(PENDULUM, ["episodes.count=1", f"episodes.steps={largest + 1}"])


def _data(t: np.ndarray, dt: float) -> Dataset:
    n, t1 = t.shape
    x = np.zeros((n, t1, 2))
    return Dataset(t, x, x, np.zeros((n, t1 - 1, 1)), dt)


@pytest.mark.parametrize(
    "t, dt, where",
    [
        (np.zeros((2, 4)), 0.05, "trajectory 0 has a step of 0.0 s between samples 0 and 1"),
        (np.tile(0.05 * np.arange(4), (2, 1)), 0.3, "trajectory 0 has a step of 0.05 s"),
        (np.array([[0.0, 0.05, 0.1], [0.0, 0.05, 0.2]]), 0.05, "trajectory 1 has a step of"),
        (np.tile(0.05 * np.arange(4)[::-1], (1, 1)), 0.05, "a step of -0.05"),
    ],
    ids=["constant t", "dt not the samples' step", "one uneven step", "time runs back"],
)
def test_sample_times_must_advance_by_dt(t, dt, where):
    with pytest.raises(InputError, match="Dataset.t must advance by a uniform step") as err:
        _data(t, dt)
    assert where in str(err.value)


def test_sample_times_far_from_zero_pass_within_round_off():
    dt = 0.05
    t = 1e4 + dt * np.arange(201)[None]  # round-off of t, not of dt, in its differences
    assert _data(t, dt).n_steps == 200


def test_a_truncated_or_damaged_dataset_file_is_an_input_error(tmp_path):
    t = np.tile(0.05 * np.arange(4), (3, 1))
    path = _data(t, 0.05).save(tmp_path / "d.npz")
    whole = path.read_bytes()
    (tmp_path / "half.npz").write_bytes(whole[: len(whole) // 2])
    with pytest.raises(InputError, match="is not a vimpc dataset"):
        Dataset.load(tmp_path / "half.npz")
    # the zip directory intact, a member's bytes damaged
    damaged = bytearray(whole)
    start = whole.index(b"obs.npy") + 200
    damaged[start : start + 40] = b"\x00" * 40
    (tmp_path / "damaged.npz").write_bytes(bytes(damaged))
    try:
        loaded = Dataset.load(tmp_path / "damaged.npz")
    except InputError as err:
        assert "is not a vimpc dataset" in str(err) or "Dataset." in str(err)
    else:  # the damage fell in bytes no check reads: the data must then be intact
        assert np.array_equal(loaded.obs, np.zeros((3, 4, 2)))


# -- run folders and paths ------------------------------------------------------------------------

SHORT = ["--set", "episodes.steps=2", "--set", "controller.horizon=5", "--set", "episodes.count=3"]


@pytest.fixture
def interrupted_run(tmp_path, monkeypatch, capsys) -> Path:
    """The .partial folder of a run stopped by a Ctrl-C after its second episode."""
    real = store.save_episode
    calls = []

    def save_then_interrupt(*args, **kwargs):
        real(*args, **kwargs)
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(store, "save_episode", save_then_interrupt)
    args = ["run", PENDULUM, "--out", str(tmp_path / "runs"), "--quiet", "--no-plots", *SHORT]
    assert cli.main(args) == 130
    monkeypatch.undo()
    capsys.readouterr()
    (stage,) = (tmp_path / "runs" / "pendulum_swingup").iterdir()
    return stage


def _resume_refused(stage: Path, message: str, capsys) -> None:
    before = sorted((p.name, p.stat().st_size) for p in stage.iterdir())
    assert cli.main(["run", "--resume", str(stage), "--quiet", "--no-plots"]) == 2
    printed = capsys.readouterr().err
    assert message in printed and printed.count("\n") == 1, printed
    assert sorted((p.name, p.stat().st_size) for p in stage.iterdir()) == before


@pytest.mark.parametrize("which", ["npz", "json"])
def test_resume_refuses_a_kept_episode_it_cannot_read_before_running_any(
    which, interrupted_run, capsys
):
    arrays, record = store.episode_files(interrupted_run, 1)
    damaged = arrays if which == "npz" else record
    damaged.write_bytes(damaged.read_bytes()[:40])
    _resume_refused(interrupted_run, "1 kept episode(s)", capsys)
    # deleting the damaged episode, as the message says, lets it run again
    arrays.unlink()
    record.unlink()
    assert cli.main(["run", "--resume", str(interrupted_run), "--quiet", "--no-plots"]) == 0
    assert "1 of 3 episodes finished, running the 2 missing" in capsys.readouterr().out


def test_resume_refuses_a_configuration_edited_in_the_folder(interrupted_run, capsys):
    config = interrupted_run / store.CONFIG
    config.write_text(config.read_text().replace("horizon = 5", "horizon = 7"))
    _resume_refused(interrupted_run, "changed since the run began", capsys)


def test_paths_too_long_for_the_file_system_are_one_line(tmp_path, capsys):
    long = str(tmp_path / ("R" * 300))
    for args in (
        ["run", "--resume", long],
        ["run", PENDULUM, "--out", long, "--quiet", *SHORT],
        ["fit", PENDULUM, "-o", long + ".vimpc", "--quiet"],
    ):
        assert cli.main(args) == 2, args
        printed = capsys.readouterr().err
        assert "File name too long" in printed and printed.count("\n") == 1, printed
    assert list(tmp_path.iterdir()) == []


def test_an_integer_python_cannot_read_is_a_config_error(tmp_path, capsys):
    digits = "9" * 5000
    with pytest.raises(ConfigError, match="--set controller.horizon=9{60}... cannot be read"):
        scenario.parse_override(f"controller.horizon={digits}")
    path = tmp_path / "big.toml"
    path.write_text(f"[controller]\nhorizon = {digits}\n")
    with pytest.raises(ConfigError, match="cannot be read: Exceeds the limit"):
        scenario.read_toml(path)
