"""The run store: the folders of runs and sweeps, what they hold while the work goes on,
how an unfinished one is recognised and resumed, and a sweep's summaries.

A run writes into ``<out>/<scenario>/<UTC timestamp>.partial/`` and renames it to
``<UTC timestamp>/`` once complete. Inside, while it runs:

- ``config.resolved.toml``: the configuration (written first);
- ``run.json``: the manifest of an unfinished run: the episodes and seeds it must run,
  those still missing, the model it uses (file and SHA-256), the vimpc version, and the
  command that resumes it. Its presence says "incomplete"; it is removed when the run is
  complete;
- ``episode_<k>.npz`` and ``episode_<k>.json`` (the trajectory's arrays, then its seed,
  metrics and the SHA-256 of both) for every finished episode, written as each one ends.
  An episode is finished when both files exist (the ``.json`` is written second); the
  manifest's list of missing episodes is refreshed after each, but the files are what
  counts. A resume keeps an episode only if its seed is the run's seed for it and its
  digest matches (:func:`check_episodes`);
- ``.lock``: held (``flock``) by the process that runs or resumes the folder, so a
  folder whose lock is free was left by a process that ended (Ctrl-C, an error, killed).

``metrics.json`` is written last, once every episode is finished: its presence marks a
complete run, as it always has.

A sweep writes ``<out>/<name>.partial/`` and renames it ``<out>/<name>/`` once every
configuration is complete: ``sweep.toml`` (the sweep file as given), ``sweep.json`` (its
manifest), per configuration a run folder as above (``<id>.partial/`` while unfinished)
and ``<id>.log``, and once complete ``summary.csv``, ``summary.md`` and ``summary.png``.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import json
import math
import os
import platform
import tomllib
import zipfile
from collections.abc import Sequence
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from vimpc._files import write_atomic
from vimpc.errors import ConfigError

try:
    import fcntl
except ImportError:  # not POSIX: no locks, a running folder looks like a stopped one
    fcntl = None

PARTIAL = ".partial"
MANIFEST = "run.json"
METRICS = "metrics.json"
CONFIG = "config.resolved.toml"
LOCK = ".lock"
DEFAULT_OUT = "results/runs"
DEFAULT_SWEEP_OUT = "results/sweeps"
SWEEP_MANIFEST = "sweep.json"
SWEEP_FILE = "sweep.toml"
SUMMARY_CSV, SUMMARY_MD, SUMMARY_PNG = "summary.csv", "summary.md", "summary.png"


def resume_command(stage: Path) -> str:
    return f"vimpc run --resume {stage}"


def episode_files(stage: Path, k: int) -> tuple[Path, Path]:
    return stage / f"episode_{k:03d}.npz", stage / f"episode_{k:03d}.json"


# -- the lock ------------------------------------------------------------------------------


class Lock:
    """The exclusive lock of a run folder, held until :meth:`release` or the process ends
    (the system drops it then, also after a kill)."""

    def __init__(self, stage: Path, *, wait: bool) -> None:
        # ``wait``: a new run's own folder, which another process may be probing for an
        # instant (:func:`is_running`); a resume must not wait for a live run to end
        self.path = stage / LOCK
        try:
            self._handle = open(self.path, "a+b")  # noqa: SIM115  (held for the run's life)
        except OSError as exc:
            raise ConfigError(
                f"the run folder {str(stage)!r} cannot be written ({exc.strerror or exc})"
            ) from None
        if fcntl is not None:
            try:
                fcntl.flock(self._handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except OSError:
                self._handle.close()
                raise ConfigError(
                    f"the run in {str(stage)!r} is being run by another vimpc process right "
                    "now; wait for it to end (or stop it) before resuming"
                ) from None

    def release(self, remove: bool = False) -> None:
        if self._handle.closed:
            return
        if remove:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
        self._handle.close()


def is_running(stage: Path) -> bool:
    """Whether a live process holds the folder's lock (or is just creating it)."""
    path = stage / LOCK
    if not path.exists():
        return not (stage / MANIFEST).exists()  # reserved this instant, lock to follow
    if fcntl is None:
        return False
    try:
        with open(path, "rb") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except FileNotFoundError:  # removed this instant by a run that completed
        return True
    except OSError:
        return True
    return False


# -- the manifest ------------------------------------------------------------------------------


def write_manifest(stage: Path, manifest: dict[str, Any]) -> None:
    write_atomic(stage / MANIFEST, json.dumps(manifest, indent=2) + "\n", overwrite=True)


def read_manifest(stage: Path) -> dict[str, Any] | None:
    try:
        return json.loads((stage / MANIFEST).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{str(stage / MANIFEST)!r} cannot be read: {exc}") from None


def finished(stage: Path, count: int) -> list[int]:
    """The episodes (indices) whose two files exist."""
    return [k for k in range(count) if all(p.exists() for p in episode_files(stage, k))]


def check_episodes(stage: Path, ks: list[int], seeds: list[int]) -> None:
    """Refuse a folder whose kept episodes ``ks`` cannot all be read back (a damaged or
    truncated file), or whose files are not those the run wrote: an episode of another
    seed than ``seeds[k]`` (a file copied in from another run), or one whose digest does
    not match (arrays or metrics edited). The run's metrics would take them as they are."""
    unreadable, foreign = [], []
    for k in ks:
        try:
            traj, metrics = load_episode(stage, k)
            record = json.loads(episode_files(stage, k)[1].read_text())
        except (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile) as exc:
            unreadable.append((k, f"{type(exc).__name__}: {str(exc)[:120]}"))
            continue
        if not isinstance(record, dict) or record.get("seed") != seeds[k]:
            got = record.get("seed") if isinstance(record, dict) else None
            foreign.append((k, f"seed {got!r}, but the run's episode {k} has seed {seeds[k]}"))
        elif record.get("sha256") != episode_digest(stage, k, record):
            foreign.append((k, "its files do not match the SHA-256 recorded when it was kept"))
    for bad, what in ((unreadable, "cannot be read back"), (foreign, "are not this run's")):
        if bad:
            k, why = bad[0]
            names = " and ".join(p.name for p in episode_files(stage, k))
            raise ConfigError(
                f"--resume: {len(bad)} kept episode(s) in {str(stage)!r} {what} (episodes "
                f"{[b[0] for b in bad][:10]}; episode {k}: {why}); delete {names} (and the "
                "others' files) to run those episodes again, then resume"
            )


def episode_digest(stage: Path, k: int, record: dict[str, Any]) -> str:
    """The SHA-256 of episode ``k``'s arrays file and of its record's seed and metrics."""
    digest = hashlib.sha256()
    with open(episode_files(stage, k)[0], "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    kept = {"seed": record.get("seed"), "metrics": record.get("metrics")}
    digest.update(json.dumps(kept, sort_keys=True).encode("utf-8"))
    return digest.hexdigest()


def text_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def config_digest(stage: Path) -> str | None:
    """The digest of the run's ``config.resolved.toml`` (None: it cannot be read)."""
    try:
        return text_digest((stage / CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def tidy(stage: Path, count: int) -> None:
    """Remove what an ended process left half-done in its own folder: temporary files of
    interrupted writes, and the arrays of an episode whose metrics were never written
    (the episode runs again)."""
    for tmp in stage.glob(".*.tmp"):
        tmp.unlink(missing_ok=True)
    for k in range(count):
        arrays, record = episode_files(stage, k)
        if arrays.exists() and not record.exists():
            arrays.unlink()


# -- episodes ------------------------------------------------------------------------------------


def save_episode(stage: Path, k: int, seed: int, traj, metrics: dict[str, Any]) -> None:
    """Keep one finished episode: its arrays, then its seed, metrics and their digest
    (which mark it finished)."""
    arrays, record = episode_files(stage, k)
    write_atomic(arrays, lambda h: np.savez(h, **traj.arrays()))
    # the metrics as they read back from JSON, so the digest is that of what is kept
    info = json.loads(json.dumps({"seed": int(seed), "metrics": metrics}))
    info["sha256"] = episode_digest(stage, k, info)
    write_atomic(record, json.dumps(info, indent=2) + "\n")


def load_episode(stage: Path, k: int):
    """``(trajectory, metrics)`` of a kept episode."""
    from vimpc.closedloop import Trajectory

    arrays, record = episode_files(stage, k)
    info = json.loads(record.read_text())
    with np.load(arrays) as data:
        traj = Trajectory(**{name: data[name] for name in data.files}, seed=info["seed"])
    return traj, info["metrics"]


# -- configurations ------------------------------------------------------------------------------


def flat(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}`` (a TOML dotted key is a nested table)."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flat(value, name + "."))
        else:
            out[name] = value
    return out


def config_differences(stage: Path, cfg: dict[str, Any]) -> list[str]:
    """The keys whose value in ``cfg`` differs from the run's ``config.resolved.toml``, as
    ``"key = <there> there, <here> here"`` lines (empty: the same configuration)."""
    from vimpc.scenario import dump_toml

    try:
        there = flat(tomllib.loads((stage / CONFIG).read_text(encoding="utf-8")))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{str(stage / CONFIG)!r} cannot be read: {exc}") from None
    here = flat(tomllib.loads(dump_toml(cfg)))
    lines = []
    for key in sorted(set(there) | set(here)):
        a, b = there.get(key, "(unset)"), here.get(key, "(unset)")
        if a != b:
            lines.append(f"{key} = {a!r} there, {b!r} here")
    return lines


def unfinished_runs(root: Path, name: str) -> list[tuple[Path, dict[str, Any] | None]]:
    """The ``.partial`` folders of scenario ``name`` under ``root`` that no live process
    holds, with their manifests (``None``: stopped before its manifest was written)."""
    base = root / name
    if not base.is_dir():
        return []
    out = []
    for stage in sorted(base.glob("*" + PARTIAL)):
        if not stage.is_dir() or is_running(stage):
            continue
        try:
            manifest = read_manifest(stage)
        except ConfigError:
            manifest = None
        out.append((stage, manifest))
    return out


def resolve(folder: str | os.PathLike[str]) -> tuple[Path, Path]:
    """``(final, stage)`` of the run folder a user named (either name of it)."""
    if not str(folder).strip():
        raise ConfigError("--resume needs the run folder vimpc run printed, got an empty path")
    path = Path(folder).resolve()  # "." or "run/.." name a folder too
    if path.parent == path:
        raise ConfigError(f"--resume: {str(folder)!r} is the root folder, not a run folder")
    if path.name.endswith(PARTIAL):
        return path.with_name(path.name[: -len(PARTIAL)]), path
    return path, path.with_name(path.name + PARTIAL)


# -- a new run folder ----------------------------------------------------------------------------


def reserve_run_dir(root: Path, name: str) -> tuple[Path, Path]:
    """``(final, staging)`` for a new run: ``root/name/<UTC timestamp>[-k]`` and its
    ``.partial`` twin, which is created here. Creation is exclusive, so runs started at
    the same moment get folders of their own: a name is taken when its staging folder is
    created by this process and no finished folder of that name exists."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    base = root / name
    try:
        base.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"--out: cannot create {str(base)!r}: {exc.strerror}") from None
    for k in range(10_000):
        final = base / (stamp if k == 0 else f"{stamp}-{k}")
        stage = final.with_name(final.name + PARTIAL)
        try:
            stage.mkdir()
        except FileExistsError:
            continue
        except OSError as exc:
            raise ConfigError(f"--out: cannot write in {str(base)!r}: {exc.strerror}") from None
        if final.exists():  # finished by another run since this name was free
            stage.rmdir()
            continue
        return final, stage
    raise ConfigError(f"--out: no free run folder for {stamp} in {str(base)!r}")


def usable_folder(path: Path, what: str) -> None:
    """Refuse an output location that is a file or cannot be written, before any work."""
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{what} {str(path)!r} is a file, not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"{what} {str(path)!r} cannot be created: {exc.strerror}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError(f"{what} {str(path)!r} is not writable")


def episode_seeds(cfg) -> list[int]:
    """The reset seeds of a run's episodes."""
    ep = cfg.episodes
    return [ep.seed + k for k in range(ep.count)]


def vimpc_version() -> str:
    from vimpc import __version__

    return __version__


def versions() -> dict[str, str]:
    """The versions a run records (``versions.json``)."""
    out = {"python": platform.python_version(), "platform": platform.platform()}
    for pkg in ("vimpc", "numpy", "scipy", "casadi", "gymnasium", "matplotlib"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def load_average() -> float | None:
    """The machine's 1-minute load average (``None`` where the system has none)."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):  # not every system has one
        return None


def begin_run(stage: Path, cfg, scenario_file: str, overrides: Sequence[str]) -> dict[str, Any]:
    """Write a new run's configuration and manifest into its (empty) ``stage`` folder, as
    every run has them before its episodes; returns the manifest."""
    from vimpc import scenario

    text = scenario.dump_toml(cfg)
    write_atomic(stage / CONFIG, text)
    count = cfg.episodes.count
    manifest = {
        "complete": False,
        "scenario": cfg.scenario.name,
        "config_sha256": text_digest(text),
        "scenario_file": scenario_file,
        "overrides": list(overrides),
        "episodes": count,
        "seeds": episode_seeds(cfg),
        "finished": 0,
        "missing": list(range(count)),
        "model": None,  # recorded once the model is built, loaded or fitted
        "vimpc": vimpc_version(),
        "sessions": [],
        "resume": resume_command(stage),
    }
    write_manifest(stage, manifest)
    return manifest


# -- resuming a run ------------------------------------------------------------------------------


def mention_unfinished(root: Path, name: str, cfg) -> None:
    """Say where unfinished runs of this scenario are and how to finish them."""
    unfinished = unfinished_runs(root, name)
    if len(unfinished) > 5:
        print(
            f"note: {len(unfinished)} unfinished runs of {name} are in {root / name}; the last 5:"
        )
    for stage, manifest in unfinished[-5:]:
        if manifest is None:
            print(
                f"note: {stage} was left by a run that stopped before it began its episodes; "
                "it holds nothing to resume (remove it)"
            )
            continue
        done = len(finished(stage, manifest.get("episodes", 0)))
        try:
            same = not config_differences(stage, cfg)
        except ConfigError:
            same = False
        print(
            f"note: an unfinished run of {name} is in {stage} ({done} of "
            f"{manifest.get('episodes', '?')} episodes done, "
            f"{'the same configuration as this run' if same else 'another configuration'}); "
            f"this run starts afresh. To finish that one instead: "
            f"{resume_command(stage)}"
        )


def check_same_run(stage: Path, manifest: dict, cfg) -> None:
    """Refuse a resume whose remaining episodes would not match the finished ones: another
    scenario, other settings, another vimpc version, another model file."""
    there = manifest.get("scenario")
    here = cfg.scenario.name
    if there != here:
        raise ConfigError(
            f"--resume: {str(stage)!r} is a run of scenario {there!r}, not {here!r}; give "
            f"that scenario (or none: the folder's configuration is used)"
        )
    recorded = manifest.get("config_sha256")  # absent in runs begun by older versions
    if recorded is not None and config_digest(stage) != recorded:
        raise ConfigError(
            f"--resume: {str(stage / CONFIG)!r} changed since the run began (its "
            f"digest is not the one {MANIFEST} recorded): the finished episodes ran "
            "with another configuration, so the folder cannot be resumed; start a new run"
        )
    differences = config_differences(stage, cfg)
    if differences:
        shown = "\n  ".join(differences[:12])
        more = f"\n  ... and {len(differences) - 12} more" if len(differences) > 12 else ""
        raise ConfigError(
            f"--resume: the run in {str(stage)!r} was made with another configuration, so the "
            f"remaining episodes would not match the finished ones:\n  {shown}{more}\n"
            "resume with the same scenario and --set overrides (or with none: the folder's "
            "own configuration is used), or start a new run"
        )
    if manifest.get("vimpc") != vimpc_version():
        raise ConfigError(
            f"--resume: the run in {str(stage)!r} was made with vimpc {manifest.get('vimpc')}, "
            f"this is vimpc {vimpc_version()}; its remaining episodes could differ. Finish it "
            "with that version or start a new run"
        )
    if manifest.get("seeds") != episode_seeds(cfg):
        raise ConfigError(
            f"--resume: the seeds recorded in {str(stage / MANIFEST)!r} do not "
            "follow from its configuration (episodes.seed, episodes.count); the folder was "
            "edited, so it cannot be resumed"
        )
    for model in manifest.get("fits") or [manifest.get("model")]:
        check_same_model(model)


def check_same_model(model) -> None:
    """Refuse a resume whose recorded model file is gone or changed."""
    from vimpc import pipeline

    if model is not None and model.get("path") is not None:
        path = Path(model["path"])
        if not path.is_file():
            raise ConfigError(
                f"--resume: the model file {str(path)!r} the finished episodes used is gone "
                "(a cleared cache?); the remaining episodes would use another model. Start "
                "a new run"
            )
        if pipeline.file_digest(path) != model.get("sha256"):
            raise ConfigError(
                f"--resume: the model file {str(path)!r} changed since the finished episodes "
                "used it (a refit, or another file there); the remaining episodes would use "
                "another model. Start a new run"
            )


def open_run(stage: Path) -> tuple[dict[str, Any], dict[str, Any], Lock] | None:
    """``(cfg, manifest, lock)`` of a sweep configuration's unfinished run folder, locked
    and checked as a resumed run is; ``None`` when the run is complete (a complete folder
    not yet renamed is renamed here)."""
    from vimpc import scenario

    final = stage.with_name(stage.name[: -len(PARTIAL)])
    if (final / METRICS).is_file():
        return None
    lock = Lock(stage, wait=False)
    try:
        if (stage / METRICS).is_file():  # complete, but not yet renamed
            (stage / MANIFEST).unlink(missing_ok=True)
            lock.release(remove=True)
            os.rename(stage, final)
            return None
        manifest = read_manifest(stage)
        if manifest is None:
            raise ConfigError(f"{str(stage)!r} has no {MANIFEST}; remove the folder")
        cfg = scenario.load_scenario(stage / CONFIG)
        check_same_run(stage, manifest, cfg)
        count = manifest["episodes"]
        tidy(stage, count)
        check_episodes(stage, finished(stage, count), manifest["seeds"])
    except BaseException:
        lock.release()
        raise
    return cfg, manifest, lock


# -- a sweep folder ------------------------------------------------------------------------------


def toml_value(v: Any) -> str:
    """A TOML value that :func:`vimpc.scenario.parse_override` reads back as ``v``."""
    from vimpc.scenario.schema import toml_value as scenario_value

    try:
        return scenario_value(v)
    except TypeError:
        raise ConfigError(
            f"cannot use a {type(v).__name__} value as an override, got {v!r}"
        ) from None


class SweepLock:
    """The sweep folder's ``flock``, held while a process runs the sweep."""

    def __init__(self, stage: Path) -> None:
        self._handle = open(stage / LOCK, "a+b")  # noqa: SIM115  (held for the sweep's life)
        if fcntl is not None:
            try:
                fcntl.flock(self._handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                self._handle.close()
                raise ConfigError(
                    f"the sweep in {str(stage)!r} is being run by another vimpc process right "
                    "now; wait for it to end (or stop it)"
                ) from None

    def release(self) -> None:
        self._handle.close()


def write_sweep_manifest(stage: Path, manifest: dict[str, Any]) -> None:
    write_atomic(stage / SWEEP_MANIFEST, json.dumps(manifest, indent=2) + "\n", overwrite=True)


def status(stage: Path, cid: str) -> str:
    """``"complete"``, ``"unfinished"`` or ``"not begun"``: configuration ``cid``'s run."""
    if (stage / cid / METRICS).is_file():
        return "complete"
    if (stage / (cid + PARTIAL)).is_dir():
        return "unfinished"
    return "not begun"


def sweep_resume_command(stage: Path) -> str:
    return f"vimpc sweep --resume {stage}"


def cfg_digest(cfg: dict[str, Any]) -> str:
    from vimpc import scenario

    return text_digest(scenario.dump_toml(cfg))


# -- a sweep's summary -----------------------------------------------------------------------

#: the summary's figures: (column, its 95 % interval column or None, heading)
FIGURES = (
    ("success_rate", "success_rate_ci95", "success rate"),
    ("violation_rate", "violation_rate_ci95", "episodes with a violation"),
    ("min_margin_mean", "min_margin_mean_ci95", "mean episode minimum margin"),
    ("cost_mean", "cost_mean_ci95", "mean episode cost"),
    ("solve_time_median_ms", None, "median solve time [ms]"),
    ("failed_solves", None, "failed solves"),
    ("late_solves", None, "late solves"),
)


def summary_rows(folder: Path, manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per configuration from its run's ``metrics.json``: its overrides, episodes,
    outcome and :data:`FIGURES` with their 95 % intervals (Wilson for rates, percentile
    bootstrap over episodes for means)."""
    from vimpc.closedloop.metrics import bootstrap_interval

    rows = []
    for e in manifest["configurations"]:
        metrics = json.loads((folder / e["id"] / METRICS).read_text())
        row: dict[str, Any] = {"configuration": e["id"], **e["overrides"]}
        row["episodes"] = metrics["episodes"]
        row["outcome"] = metrics["outcome"]
        costs = [m["cost"] for m in metrics["per_episode"] if "cost" in m]
        metrics["cost_mean_ci95"] = bootstrap_interval(costs)
        for key, ci, _ in FIGURES:
            row[key] = metrics.get(key, math.nan)
            if ci is not None:
                row[ci] = metrics.get(ci, [math.nan, math.nan])
        rows.append(row)
    return rows


def _fmt(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return toml_value(value) if isinstance(value, (list, dict)) else str(value)
    if isinstance(value, int):
        return str(value)
    return "nan" if math.isnan(value) else f"{value:.4g}"


def summary_csv(rows: list[dict[str, Any]], keys: Sequence[str]) -> str:
    """The rows as CSV: each interval as ``<name>_ci95_low`` and ``_high`` columns."""
    header = ["configuration", *keys, "episodes", "outcome"]
    for key, ci, _ in FIGURES:
        header.append(key)
        if ci is not None:
            header += [f"{ci}_low", f"{ci}_high"]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    for row in rows:
        line = [row["configuration"], *[_fmt(row.get(k, "")) for k in keys]]
        line += [row["episodes"], row["outcome"]]
        for key, ci, _ in FIGURES:
            value = row[key]
            line.append(value if isinstance(value, int) else repr(float(value)))
            if ci is not None:
                line += [repr(float(row[ci][0])), repr(float(row[ci][1]))]
        writer.writerow(line)
    return buffer.getvalue()


def summary_markdown(rows: list[dict[str, Any]], manifest: dict[str, Any]) -> str:
    keys = manifest["keys"]
    header = ["configuration", *keys, "episodes", "outcome"] + [h for _, _, h in FIGURES]
    lines = [
        f"Sweep of {Path(manifest['scenario_file']).name} ({len(rows)} configurations); "
        "[95 % intervals]: Wilson for rates, percentile bootstrap over episodes for means.",
        _sharing(manifest),
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    for row in rows:
        cells = [row["configuration"], *[_fmt(row.get(k, "")) for k in keys]]
        cells += [str(row["episodes"]), row["outcome"]]
        for key, ci, _ in FIGURES:
            text = _fmt(row[key])
            if ci is not None and not math.isnan(row[ci][0]):
                text += f" [{_fmt(row[ci][0])}, {_fmt(row[ci][1])}]"
            cells.append(text)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _sharing(manifest: dict[str, Any]) -> str:
    """How many configurations ran at once while the solve times were measured."""
    ran = [s for s in manifest["sessions"] if "processes" in s]
    counts = sorted({s["processes"] for s in ran}) or [1]
    cores = max((s.get("cores", 1) for s in ran), default=1)
    what = "configuration"
    if any(s.get("backend") == "ray" for s in ran):
        what = "configuration or Ray episode" if any("backend" not in s for s in ran) else "Ray"
    return (
        f"Solve times were measured with {' or '.join(map(str, counts))} {what} "
        f"process{'es' if counts[-1] > 1 else ''} at once on {cores} usable "
        f"core{'s' if cores != 1 else ''} (vimpc sweep --workers)."
    )


def summary_figure(rows: list[dict[str, Any]], path: Path, manifest: dict[str, Any]) -> None:
    """The configurations side by side: each figure with an interval, as a point and bar."""
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    panels = [f for f in FIGURES if f[1] is not None]
    fig = Figure(figsize=(3.2 * len(panels), 3.4 + 0.12 * len(rows)), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    labels = [
        r["configuration"]
        + ("\n" + ", ".join(f"{k}={_fmt(r[k])}" for k in manifest["keys"] if k in r))
        for r in rows
    ]
    y = np.arange(len(rows))
    for ax, (key, ci, heading) in zip(axes, panels, strict=True):
        value = np.array([float(r[key]) for r in rows])
        low = np.array([float(r[ci][0]) for r in rows])
        high = np.array([float(r[ci][1]) for r in rows])
        has = np.isfinite(low) & np.isfinite(value)
        # an interval's end past its figure by round-off is no negative bar
        err = np.maximum(np.vstack([value - low, high - value]), 0.0)
        ax.errorbar(value[has], y[has], xerr=err[:, has], fmt="o", color="C0", capsize=3)
        ax.plot(value[~has], y[~has], "o", color="C0", mfc="none")
        if not np.any(np.isfinite(value)):
            ax.text(0.5, 0.5, "not measured", ha="center", va="center", transform=ax.transAxes)
        ax.set_title(heading, fontsize=9)
        ax.set_yticks(y)
        ax.set_yticklabels(labels if ax is axes[0] else [], fontsize=7)
        ax.set_ylim(len(rows) - 0.5, -0.5)
        ax.ticklabel_format(axis="x", useOffset=False)
        ax.grid(True, axis="x", alpha=0.3)
    fig.suptitle(
        f"{Path(manifest['scenario_file']).stem}: {len(rows)} configurations, 95 % intervals "
        "(open: no interval)",
        fontsize=10,
    )
    write_atomic(path, lambda h: fig.savefig(h, format="png", dpi=110), overwrite=True)
