"""Checking a resolved scenario against its environment and model before any work: the
results folder name; sizes of costs and bounds; observation entries (an index or the env's
name for it, made an index); input bounds within the env's action bounds; observation
bounds, references and success targets within the range the env's states stay in; seeds
within range; the controller's problem size and an episode's record against memory; data
and excitation settings and dataset files; start states against hard constraints; and
combinations against the model (a transcription or a tightening the model cannot serve, a
calibration set too small for ``delta``). Every message names the scenario key, the value
and what was expected."""

from __future__ import annotations

import difflib
import math
import os
import re
from typing import Any

from vimpc._settings import MAX_SEED, ignored_message, inactive, resolve, unknown_key
from vimpc.data.excitation import EXCITATION_KINDS
from vimpc.errors import ConfigError, VimpcError
from vimpc.mpc.options import check_within_period
from vimpc.mpc.solvers import check_timed
from vimpc.scenario.schema import CIRCLE_KEYS, MODEL_KEYS, SCHEMA
from vimpc.scenario.specs import (
    EnvSpec,
    ModelSpec,
    build_plant,
    check_variation,
    closed_loop_calibration,
    fit_seeds,
)

#: a results folder name: one path component, not "." or ".."
_NAME = re.compile(r"[A-Za-z0-9._-]+")


def _check_name(name: str, origin: str = "") -> None:
    """``scenario.name`` names the run's folder under the results root, so it must stay one
    folder inside it."""
    if not _NAME.fullmatch(name) or name in (".", ".."):
        raise ConfigError(
            f"scenario.name = {name!r}{origin} must be one folder name: letters, digits, '-', "
            "'_' and '.', not empty and not '.' or '..' (the run is written to "
            "<--out>/<scenario.name>/)"
        )


def check(cfg: dict[str, Any]) -> None:
    """Every check across keys, against the env's sizes and against the model, before any
    env is built or any data collected (raises :class:`ConfigError`)."""
    from vimpc.models.calibration import minimum_calibration_size

    _check_name(cfg["scenario"]["name"])
    env = EnvSpec(cfg)
    nobs, nu = env.nobs, env.nu
    env_id = cfg["env"]["id"]
    ctrl, cost, cons = (
        cfg["controller"],
        cfg["controller"]["cost"],
        cfg["controller"]["constraints"],
    )

    def size(key: str, value: Any, n: int, what: str) -> None:
        if value is not None and len(value) != n:
            raise ConfigError(
                f"{key} must have {n} entries (one per {what} of {cfg['env']['id']}), got "
                f"{len(value)}: {value!r}"
            )

    def entry(key: str, value: int | str) -> int:
        """The observation index ``value`` gives, or names."""
        names = env.obs_names
        if isinstance(value, str):
            if value in names:
                return names.index(value)
            hint = difflib.get_close_matches(value, names, n=1)
            extra = f"; did you mean {hint[0]!r}?" if hint else ""
            raise ConfigError(
                f"{key} = {value!r} is not an observation name of {env_id}{extra} (names: "
                f"{', '.join(names)}; or an index 0 to {nobs - 1})"
            )
        if not 0 <= value < nobs:
            raise ConfigError(
                f"{key} = {value} is not an observation index of {env_id} "
                f"(0 to {nobs - 1}: {', '.join(names)})"
            )
        return value

    for key in ("Q", "Q_terminal", "reference"):
        size(f"controller.cost.{key}", cost[key], nobs, "observation")
    for key in ("R", "R_rate"):
        size(f"controller.cost.{key}", cost[key], nu, "input")
    size("controller.tube_Q", ctrl["tube_Q"], nobs, "observation")
    size("controller.tube_R", ctrl["tube_R"], nu, "input")
    for key in ("obs_min", "obs_max"):
        size(f"controller.constraints.{key}", cons[key], nobs, "observation")
    for key in ("u_min", "u_max"):
        size(f"controller.constraints.{key}", cons[key], nu, "input")
    cost["periodic"] = [
        entry(f"controller.cost.periodic[{i}]", item) for i, item in enumerate(cost["periodic"])
    ]
    # checked even when unused, so switching reference_from_env on cannot bring an error later
    cost["reference_index"] = entry("controller.cost.reference_index", cost["reference_index"])
    for lo_key, hi_key in (("u_min", "u_max"), ("obs_min", "obs_max")):
        lo, hi = cons[lo_key], cons[hi_key]
        for i, (a, b) in enumerate(zip(lo or [], hi or [], strict=False)):
            if a > b:
                raise ConfigError(
                    f"controller.constraints.{lo_key}[{i}] = {a} exceeds "
                    f"controller.constraints.{hi_key}[{i}] = {b}: infeasible bounds"
                )
    if env.foreign:
        _check_foreign(cfg)
    _check_input_bounds(cfg, env)
    _check_observation_bounds(cfg, env)
    _check_seeds(cfg)
    for i, circle in enumerate(cons["circles"]):
        where = f"controller.constraints.circles[{i}]"
        if not isinstance(circle, dict):
            raise ConfigError(f"{where} must be a table, got {circle!r}")
        circle = cons["circles"][i] = resolve(circle, CIRCLE_KEYS, where + ".")
        circle["indices"] = [
            entry(f"{where}.indices[{j}]", item) for j, item in enumerate(circle["indices"])
        ]
        if circle["indices"][0] == circle["indices"][1]:
            raise ConfigError(
                f"{where}.indices must be two different observation entries (the circle's "
                f"plane), got {circle['indices']!r}"
            )
    _check_metrics(cfg, entry, env)
    # after the entries are read (an index is checked even where it would not act)
    for prefix, key, acts, table in ignored_settings(cfg):
        raise ConfigError(ignored_message(prefix, key, table[key], acts, table))
    model = ModelSpec(cfg, env)
    check_variation(cfg, env, model)
    fields = model.fields
    if ctrl["transcription"] == "implicit" and "residual" not in fields:
        raise ConfigError(
            f"controller.transcription = 'implicit' needs a model with the integrator's "
            f"residual, and {model.what} has none (an explicit integrator, or substeps > 1); "
            "set controller.transcription = 'step' or 'auto'"
        )
    if ctrl["tightening"] == "tube" and "bound" not in fields:
        raise ConfigError(
            f"controller.tightening = 'tube' needs a model with a bound, and {model.what} has "
            "none; set model.bound = 'conformal' (calibrated on held-out data) or "
            "controller.tightening = 'none'"
        )
    _check_problem_size(cfg, env, model)
    _check_episode_size(cfg, env)
    _check_timing(ctrl, cfg["env"]["dt"])
    if cost["energy_weight"] > 0:
        if "energy" not in fields:
            raise ConfigError(
                f"controller.cost.energy_weight = {cost['energy_weight']} needs a model with an "
                f"energy, and {model.what} has none; set controller.cost.energy_weight = 0"
            )
        if cost["reference"] is None:
            raise ConfigError(
                "controller.cost.energy_weight needs controller.cost.reference (its energy is "
                "the target)"
            )
    if model.needs_fit:
        data = cfg["data"]
        _check_data_keys(cfg, env)
        if cfg["model"]["bound"] == "conformal":
            n_cal = (data["heldout_trajectories"] // 2) * data["steps"]
            need = minimum_calibration_size(cfg["model"]["delta"])
            if data["heldout_path"] is None and n_cal < need:
                raise ConfigError(
                    f"the calibration set (data.heldout_trajectories // 2 = "
                    f"{data['heldout_trajectories'] // 2} trajectories of data.steps = "
                    f"{data['steps']} steps: {n_cal} transitions) is too small for model.delta "
                    f"= {cfg['model']['delta']}: split conformal needs at least 1/delta - 1 = "
                    f"{need}; raise data.heldout_trajectories or data.steps, or model.delta"
                )
            if data["heldout_path"] is None and data["heldout_trajectories"] < 2:
                raise ConfigError(
                    "data.heldout_trajectories must be at least 2 with model.bound = "
                    "'conformal' (half calibrate, half validate)"
                )
    _check_closed_loop_calibration(cfg, model)
    # last: it builds the env (only for hard observation bounds or keep-out circles)
    _check_start_states(cfg, env)


def setting_tables(cfg: dict[str, Any]):
    """``(prefix, settings, table)`` for every table of a resolved configuration: the
    declarations each table was resolved against, and its values."""
    from vimpc.models import family

    for name, settings in SCHEMA.items():
        head, _, sub = name.partition(".")
        table = cfg[head][sub] if sub else cfg[head]
        yield f"{name}.", settings, table
    model = cfg["model"]
    yield "model.", {**MODEL_KEYS, **family(model["family"]).all_settings()}, model


def ignored_settings(cfg: dict[str, Any]) -> list[tuple[str, str, Any, dict[str, Any]]]:
    """``(prefix, key, condition, table)`` of every setting of a resolved configuration
    that is set away from its default where its declared condition (``Setting.acts``)
    fails: it would be ignored. The one rule for every table, the model family's too."""
    return [
        (prefix, key, acts, table)
        for prefix, settings, table in setting_tables(cfg)
        for key, acts in inactive(settings, table)
    ]


def _check_closed_loop_calibration(cfg: dict[str, Any], model: ModelSpec) -> None:
    """``data.calibration = "closed_loop"``: a conformal bound to calibrate, enough
    calibration episodes for ``model.delta`` (and the bound's horizon), and calibration
    episodes that are not the scenario's own episodes."""
    from vimpc.models.calibration import minimum_calibration_size

    data, mcfg = cfg["data"], cfg["model"]
    if not closed_loop_calibration(data):
        return
    where = "data.calibration = 'closed_loop'"
    if not model.needs_fit or mcfg["bound"] != "conformal":
        what = (
            f"model.bound = {mcfg['bound']!r}" if model.needs_fit else f"{model.what} is not fitted"
        )
        raise ConfigError(
            f"{where} calibrates a conformal bound on the controller's own episodes, but {what}; "
            "set model.bound = 'conformal' or data.calibration = 'heldout'"
        )
    delta, n, steps = mcfg["delta"], data["calibration_episodes"], cfg["episodes"]["steps"]
    need = minimum_calibration_size(delta)
    if mcfg.get("bound_level") != "horizon":
        enough, what = n * steps >= need, f"{need} transitions"
    else:  # the windows of whole episodes (exchangeable as episodes, not step by step)
        horizon = mcfg["bound_horizon"]
        enough = n >= need and steps >= horizon
        what = f"{need} episodes of at least model.bound_horizon = {horizon} steps"
    if not enough:
        raise ConfigError(
            f"data.calibration_episodes = {n} of episodes.steps = {steps} steps is too small a "
            f"calibration set for model.delta = {delta}: it needs {what}; raise "
            "data.calibration_episodes or model.delta"
        )
    first, count = cfg["episodes"]["seed"], cfg["episodes"]["count"]
    for k in range(data.get("fits", 1)):
        lo = fit_seeds(data, k)["calibration_seed"]
        hi = lo + n - 1
        if max(lo, first) <= min(hi, first + count - 1):
            raise ConfigError(
                f"fit {k}'s calibration episodes (seeds {lo} to {hi}) overlap the episodes' "
                f"seeds ({first} to {first + count - 1}), so the bound would be calibrated on "
                "the episodes it is measured on; move data.calibration_seed or episodes.seed"
            )


def _check_timing(ctrl: dict[str, Any], env_dt: float) -> None:
    """A time budget the solver can keep, within the sampling period (``controller.period``,
    else ``env.dt``)."""
    budget = ctrl["time_budget"]
    check_timed(ctrl["solver"], budget, ConfigError, "controller.")
    period, where = (ctrl["period"], "controller.period") if ctrl["period"] else (env_dt, "env.dt")
    check_within_period(budget, period, where, ConfigError, "controller.")


def _check_seeds(cfg: dict[str, Any]) -> None:
    """The last seed of every run of consecutive seeds stays a valid seed (<= MAX_SEED)."""
    for first, count in (
        ("episodes.seed", "episodes.count"),
        ("data.seed", "data.trajectories"),
        ("data.heldout_seed", "data.heldout_trajectories"),
        ("data.calibration_seed", "data.calibration_episodes"),
    ):
        (t1, k1), (t2, k2) = first.split("."), count.split(".")
        seed, n = cfg[t1][k1], cfg[t2][k2]
        if seed + n - 1 > MAX_SEED:
            fix = (
                f"set {first} <= {MAX_SEED - n + 1}"
                if n <= MAX_SEED + 1
                else f"set {count} <= {MAX_SEED + 1 - seed}"
            )
            raise ConfigError(
                f"{first} = {seed} with {count} = {n} uses seeds up to {seed + n - 1}, beyond "
                f"the largest seed {MAX_SEED} (2**32 - 1); {fix}"
            )


def _check_observation_bounds(cfg: dict[str, Any], env: EnvSpec) -> None:
    """Observation bounds the env's observation can reach: a bound beyond the range every
    state of the env stays in (its observation space) excludes every state; likewise a
    reference no state can reach, and a periodic entry listed twice."""
    cons = cfg["controller"]["constraints"]
    names = env.obs_names
    for i, value in enumerate(cfg["controller"]["cost"]["reference"] or []):
        if abs(value) > env.obs_limit[i]:
            raise ConfigError(
                f"controller.cost.reference[{i}] = {value} ({names[i]}) is outside the range "
                f"[{-env.obs_limit[i]:g}, {env.obs_limit[i]:g}] every observation of "
                f"{cfg['env']['id']} stays in, so no state can reach it"
            )
    periodic = cfg["controller"]["cost"]["periodic"]
    for j, i in enumerate(periodic):
        if i in periodic[:j]:
            raise ConfigError(
                f"controller.cost.periodic[{j}] = {names[i]!r} (entry {i}) is listed twice in "
                f"controller.cost.periodic = {periodic!r}; list each angle once"
            )
    for key, sign in (("obs_min", 1.0), ("obs_max", -1.0)):
        for i, value in enumerate(cons[key] or []):
            limit = env.obs_limit[i]
            if math.isfinite(value) and sign * value > limit:
                raise ConfigError(
                    f"controller.constraints.{key}[{i}] = {value} ({names[i]}) is outside the "
                    f"range [{-limit:g}, {limit:g}] every observation of {cfg['env']['id']} "
                    "stays in, so no state can meet it; give a bound within that range, or "
                    f"{'-inf' if sign > 0 else 'inf'} for none"
                )


def _check_problem_size(cfg: dict[str, Any], env: EnvSpec, model: ModelSpec) -> None:
    """The controller's NLP within :data:`vimpc.mpc.problem.MAX_DECISION_VARIABLES` (the
    model's state size where it is known, else the observation's)."""
    from vimpc.mpc.problem import check_problem_size

    ctrl = cfg["controller"]
    implicit = ctrl["transcription"] == "implicit" or (
        ctrl["transcription"] == "auto" and "residual" in model.fields
    )
    check_problem_size(
        ctrl["horizon"],
        model.nx or env.nobs,
        env.nu,
        implicit,
        key="controller.horizon",
        error=ConfigError,
    )


def _memory_bytes() -> int | None:
    """The machine's physical memory [bytes], None where the system does not say."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


#: an estimate of what one episode costs beyond its arrays [bytes]: its metrics (a dict
#: of some 60 numbers), its seed's entry in the run's manifest and its trajectory's fields
EPISODE_OVERHEAD = 4_000


def _check_episode_size(cfg: dict[str, Any], env: EnvSpec) -> None:
    """An episode's record fits in memory: each step keeps its plan, ``horizon + 1``
    observations (:class:`vimpc.closedloop.Trajectory`), so ``episodes.steps`` beyond
    memory would run for ever and end out of memory; and the run's records of all
    ``episodes.count`` episodes fit too (``episodes.count = 10^9`` grew to 24 GB without a
    word before the system ended it)."""
    memory = _memory_bytes()
    if memory is None:
        return
    steps, horizon = cfg["episodes"]["steps"], cfg["controller"]["horizon"]
    per_step = 8 * ((horizon + 1) * env.nobs + 2 * env.nobs + env.nu)
    if steps * per_step + EPISODE_OVERHEAD > memory:
        raise ConfigError(
            f"episodes.steps = {steps} would record {steps * per_step / 1e9:.3g} GB per "
            f"episode (each step keeps its plan of controller.horizon + 1 = {horizon + 1} "
            f"observations), more than this machine's {memory / 1e9:.3g} GB of memory; "
            f"set episodes.steps <= {(memory - EPISODE_OVERHEAD) // per_step}"
        )
    # a run keeps every episode's record until its summary and figures are made
    count = cfg["episodes"]["count"]
    per_episode = steps * per_step + EPISODE_OVERHEAD
    if count * per_episode > memory:
        raise ConfigError(
            f"episodes.count = {count} episodes of episodes.steps = {steps} steps would keep "
            f"about {count * per_episode / 1e9:.3g} GB of records ({per_episode / 1e3:.3g} "
            "kB each: a run keeps every episode's record for its summary and figures), more "
            f"than this machine's {memory / 1e9:.3g} GB of memory; set episodes.count <= "
            f"{memory // per_episode}"
        )


def _check_start_states(cfg: dict[str, Any], env: EnvSpec) -> None:
    """No episode starts where a hard observation bound or keep-out circle forbids: the
    controller could not keep a constraint its start already breaks. Each episode's start is
    the env's reset from that episode's seed (soft constraints allow it, and are skipped)."""
    import numpy as np

    cons = cfg["controller"]["constraints"]
    nobs = env.nobs
    lo = np.asarray(cons["obs_min"] or [-math.inf] * nobs, dtype=np.float64)
    hi = np.asarray(cons["obs_max"] or [math.inf] * nobs, dtype=np.float64)
    hard_box = not cons["soft_bounds"] and bool(np.isfinite(lo).any() or np.isfinite(hi).any())
    circles = [(i, c) for i, c in enumerate(cons["circles"]) if not c["soft"]]
    if not (hard_box or circles):
        return
    env_id = cfg["env"]["id"]
    if env.foreign:
        plant = build_plant(cfg)
    else:
        try:
            plant = env.cls(dt=cfg["env"]["dt"], **cfg["env"]["kwargs"])
        except TypeError as exc:
            raise ConfigError(f"env.kwargs do not fit {env_id}: {exc}") from None
        except VimpcError as exc:
            raise ConfigError(f"env.kwargs: {exc}") from None
    names = env.obs_names
    first, count = cfg["episodes"]["seed"], cfg["episodes"]["count"]
    for seed in range(first, first + count):
        plant.reset(seed=seed)
        x = np.asarray(plant.state, dtype=np.float64)
        where = f"episode {seed - first} (seed {seed}) starts at {_state_text(names, x)}"
        fix = (
            "widen it, set controller.constraints.soft_bounds = true, or choose "
            "episodes.seed so that episodes start inside"
        )
        if hard_box:
            for i in range(nobs):
                for key, bound, out in (
                    ("obs_min", lo[i], x[i] < lo[i]),
                    ("obs_max", hi[i], x[i] > hi[i]),
                ):
                    if out:
                        raise ConfigError(
                            f"controller.constraints.{key}[{i}] = {bound} ({names[i]}) is a hard "
                            f"bound the start already breaks: {where}, so the controller cannot "
                            f"keep it; {fix}"
                        )
        for j, c in circles:
            a, b = c["indices"]
            if math.hypot(x[a] - c["center"][0], x[b] - c["center"][1]) < c["radius"]:
                raise ConfigError(
                    f"controller.constraints.circles[{j}] (centre {c['center']}, radius "
                    f"{c['radius']} on {names[a]}, {names[b]}) is a hard keep-out circle the "
                    f"start lies inside: {where}, so the controller cannot keep it; move or "
                    "shrink it, or make it soft (soft = true)"
                )


def _state_text(names: tuple[str, ...], x: Any) -> str:
    return "(" + ", ".join(f"{n} = {float(v):.4g}" for n, v in zip(names, x, strict=True)) + ")"


def _check_input_bounds(cfg: dict[str, Any], env: EnvSpec) -> None:
    """``u_min`` and ``u_max`` within the env's action bounds (it clips inputs to them, so a
    wider bound would let the controller plan inputs that never act); unset, they are those
    bounds."""
    cons = cfg["controller"]["constraints"]
    low, high = env.input_bounds
    names = env.nominal.input_names
    for key, ends in (("u_min", low), ("u_max", high)):
        if cons[key] is None:
            cons[key] = list(ends)
            continue
        for i, value in enumerate(cons[key]):
            if not low[i] <= value <= high[i]:
                raise ConfigError(
                    f"controller.constraints.{key}[{i}] = {value} is outside the action bounds "
                    f"of {cfg['env']['id']}: it clips input {i} ({names[i]}) to "
                    f"[{low[i]}, {high[i]}]; give a value in that range, or leave "
                    f"controller.constraints.{key} unset for the env's bounds"
                )


def _check_foreign(cfg: dict[str, Any]) -> None:
    """What a foreign env cannot do: vimpc reaches it through ``reset`` and ``step`` alone,
    so it can neither place its start states, nor add noise to it, nor draw its plant."""
    env_id, data = cfg["env"]["id"], cfg["data"]
    if cfg["env"]["plant"] != "fixed":
        raise ConfigError(
            f"env.plant = {cfg['env']['plant']!r} draws plants, which vimpc cannot do for the "
            f"foreign env {env_id}: give plant variants through env.kwargs (another xml_file) "
            "and keep env.plant = 'fixed'"
        )
    if data["initial_state"] != "env" and (data["path"] is None or data["heldout_path"] is None):
        raise ConfigError(
            f"data.initial_state = {data['initial_state']!r} places start states, which a "
            f"foreign env ({env_id}) does not take: its trajectories start from its own reset; "
            "set data.initial_state = 'env' and widen the env's reset through env.kwargs (e.g. "
            "reset_noise_scale)"
        )
    if data["obs_noise"] is not None:
        raise ConfigError(
            f"data.obs_noise = {data['obs_noise']} would change the noise of the foreign env "
            f"{env_id}, whose own noise is the truth; remove data.obs_noise"
        )
    if cfg["controller"]["cost"]["reference_from_env"]:
        raise ConfigError(
            f"controller.cost.reference_from_env = true needs the env's reference(t), which the "
            f"foreign env {env_id} does not have; give controller.cost.reference"
        )


def _check_metrics(cfg: dict[str, Any], entry, env: EnvSpec) -> None:
    """The success test's entries as indices, and its per-entry values sized to them."""
    metrics = cfg["metrics"]
    has_target = metrics["success_target"] is not None or metrics["success_against_reference"]
    if (metrics["success_index"] is None) == has_target:
        raise ConfigError(
            "metrics.success_index goes with metrics.success_target or "
            "metrics.success_against_reference = true; set both or neither"
        )
    if metrics["success_target"] is not None and metrics["success_against_reference"]:
        raise ConfigError(
            f"metrics.success_target = {metrics['success_target']!r} would be ignored: with "
            "metrics.success_against_reference = true the controller's reference is the "
            "target; remove one of them"
        )
    given = metrics["success_index"]
    if given is None:
        return
    if isinstance(given, list):
        metrics["success_index"] = [
            entry(f"metrics.success_index[{i}]", item) for i, item in enumerate(given)
        ]
        n = len(given)
    else:
        metrics["success_index"] = entry("metrics.success_index", given)
        n = 1
    for key in ("success_target", "success_tolerance", "success_periodic"):
        value = metrics[key]
        if isinstance(value, list) and len(value) != n:
            raise ConfigError(
                f"metrics.{key} must be one value for every entry or have {n} entries (one per "
                f"entry of metrics.success_index = {given!r}), got {len(value)}: {value!r}"
            )
    target = metrics["success_target"]
    if target is not None:
        indices = metrics["success_index"]
        indices = indices if isinstance(indices, list) else [indices]
        targets = target if isinstance(target, list) else [target] * len(indices)
        for j, (i, value) in enumerate(zip(indices, targets, strict=True)):
            if abs(value) > env.obs_limit[i]:
                where = f"[{j}]" if isinstance(target, list) else ""
                raise ConfigError(
                    f"metrics.success_target{where} = {value} ({env.obs_names[i]}) is outside "
                    f"the range [{-env.obs_limit[i]:g}, {env.obs_limit[i]:g}] every observation "
                    f"of {cfg['env']['id']} stays in, so no episode can succeed"
                )


def _check_data_keys(cfg: dict[str, Any], env: EnvSpec) -> None:
    data = cfg["data"]
    for key in ("low", "high"):
        if data["initial_state"] != "env" and data[key] is None:
            raise ConfigError(
                f"data.initial_state = {data['initial_state']!r} samples a box: set data.low "
                f"and data.high ({env.nobs} entries: {', '.join(env.obs_names)})"
            )
        if data[key] is not None:
            if len(data[key]) != env.nobs:
                raise ConfigError(
                    f"data.{key} must have {env.nobs} entries (one per observation), got "
                    f"{len(data[key])}"
                )
            if not all(math.isfinite(v) for v in data[key]):
                raise ConfigError(f"data.{key} must be finite, got {data[key]!r}")
    if data["low"] is not None and data["high"] is not None:
        for i, (a, b) in enumerate(zip(data["low"], data["high"], strict=True)):
            if a > b:
                raise ConfigError(f"data.low[{i}] = {a} exceeds data.high[{i}] = {b}")
    if data["initial_state"] != "env":
        for key in ("low", "high"):
            for i, value in enumerate(data[key]):
                if abs(value) > env.obs_limit[i]:
                    raise ConfigError(
                        f"data.{key}[{i}] = {value} ({env.obs_names[i]}) is outside the range "
                        f"[{-env.obs_limit[i]:g}, {env.obs_limit[i]:g}] the env's states stay "
                        "in, so trajectories cannot start there"
                    )
    kind = data["excitation"]
    allowed = EXCITATION_KINDS[kind]
    for key in data["excitation_options"]:
        if key not in allowed:
            raise unknown_key("data.excitation_options.", key, allowed)
    if data["path"] is None or data["heldout_path"] is None:
        _check_excitation(cfg, env)
    train = (data["seed"], data["seed"] + data["trajectories"])
    held = (data["heldout_seed"], data["heldout_seed"] + data["heldout_trajectories"])
    overlap = max(train[0], held[0]) < min(train[1], held[1])
    if data["path"] is None and data["heldout_path"] is None and overlap:
        raise ConfigError(
            f"data.seed = {data['seed']} and data.heldout_seed = {data['heldout_seed']} give "
            "overlapping reset seeds, so held-out trajectories would repeat training ones; "
            f"set data.heldout_seed >= {data['seed'] + data['trajectories']}"
        )
    for key in ("path", "heldout_path"):
        if data[key] is not None:
            _check_dataset_file(f"data.{key}", data[key], cfg, env)


def _check_excitation(cfg: dict[str, Any], env: EnvSpec) -> None:
    """``data.excitation_options`` as the collection will use them (the defaults from the
    action bounds filled in the same way), tried on one step."""
    import numpy as np

    from vimpc.data import make_excitation

    data = cfg["data"]
    options = dict(data["excitation_options"])
    low, high = (list(ends) for ends in env.input_bounds)
    if data["excitation"] == "random_steps":
        options.setdefault("low", low)
        options.setdefault("high", high)
    elif data["excitation"] == "chirp":
        options.setdefault("amplitude", [min(-a, b) for a, b in zip(low, high, strict=True)])
    try:
        make_excitation(
            data["excitation"],
            data["steps"],
            env.nu,
            cfg["env"]["dt"],
            np.random.default_rng(0),
            **options,
        )
    except VimpcError as exc:
        raise ConfigError(
            f"data.excitation_options = {data['excitation_options']!r} (data.excitation = "
            f"{data['excitation']!r}): {exc}"
        ) from None


def _check_dataset_file(key: str, path: str, cfg: dict[str, Any], env: EnvSpec) -> None:
    import numpy as np

    from vimpc.data import Dataset

    try:
        data = Dataset.load(path)
    except FileNotFoundError:
        raise ConfigError(f"{key} = {path!r}: no such file") from None
    except VimpcError as exc:
        raise ConfigError(f"{key} = {path!r}: {exc}") from None
    dt = cfg["env"]["dt"]
    if not np.isclose(data.dt, dt, rtol=1e-9, atol=0.0):
        raise ConfigError(
            f"{key} = {path!r} holds data sampled every {data.dt} s, but env.dt is {dt} s"
        )
    system = data.metadata.get("system")
    if system is not None and system != env.system:
        raise ConfigError(
            f"{key} = {path!r} holds data of a {system}, but the env is a {env.system}"
        )
    if data.nobs != env.nobs or data.nu != env.nu:
        raise ConfigError(
            f"{key} = {path!r} holds {data.nobs} observations and {data.nu} inputs per sample; "
            f"{cfg['env']['id']} has {env.nobs} and {env.nu}"
        )
