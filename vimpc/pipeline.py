"""Wiring a validated scenario: env, data, fitted model (cached), controller, episodes.

``data -> fit -> model``: a model family that needs fitting (a learned family, or any
family asked for a calibrated bound) gets training trajectories and held-out
trajectories collected from the scenario env's true system (or read from ``.npz``
files), is fitted, evaluated on the held-out validation half and exported. The exported
model is cached as a ``.vimpc`` file keyed by a hash of the env, data and model settings
and the vimpc version, so a repeated run reuses it instead of fitting again; every
consumer (a serial run, each worker process, ``vimpc fit``) then uses the functions read
from that one file, so their numbers are identical.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from vimpc import __version__
from vimpc._jit import cache_root, check_writable
from vimpc._processes import in_processes
from vimpc.data import Dataset
from vimpc.dynamics import DiscreteModel
from vimpc.errors import ConfigError, VimpcError
from vimpc.scenario import build_family
from vimpc.scenario.records import Scenario, as_scenario, as_table
from vimpc.scenario.specs import closed_loop_calibration

#: a scenario as the pipeline's functions take it: its record, or (for code that still holds
#: one) the resolved configuration dict, made a record once at the function's entry
ScenarioLike = Scenario | dict[str, Any]

#: steps of the multi-step prediction error in the fit summary
PREDICTION_STEPS = 20


# -- the env ----------------------------------------------------------------------------------


def build_env(cfg: ScenarioLike, *, obs_noise: float | None = None):
    """The scenario's environment (unwrapped, no time limit: episodes set the length)."""
    import gymnasium
    import vimpc_envs  # noqa: F401  (registers the environment ids)

    scenario = as_scenario(cfg)
    env = scenario.env
    if env.adapter is not None:  # any other gymnasium env, behind its declared adapter
        from vimpc.scenario.specs import build_plant

        return build_plant(scenario)
    kwargs = env.kwargs.to_dict()  # the env's own arguments, as plain lists and dicts
    if obs_noise is not None:
        kwargs["obs_noise"] = obs_noise
    try:
        return gymnasium.make(env.id, dt=env.dt, **kwargs).unwrapped
    except TypeError as exc:
        raise ConfigError(f"env.kwargs do not fit {env.id}: {exc}") from None
    except VimpcError as exc:
        raise ConfigError(f"env: {exc}") from None


# -- data ---------------------------------------------------------------------------------------


def collect(cfg: ScenarioLike, env, part: str, progress: bool = False) -> Dataset:
    """Collect the ``"train"`` or ``"heldout"`` trajectories of the scenario's ``data`` from
    ``env``'s true system (a copy with ``data.obs_noise`` when that is set). ``cfg`` may
    also be a mapping holding only a ``data`` table (absent keys take their defaults)."""
    from vimpc.data import halton, make_excitation, onto_constraints, rollout_env, uniform

    d = as_table(cfg, "data")
    if part == "train":
        n, seed = d.trajectories, d.seed
    else:
        n, seed = d.heldout_trajectories, d.heldout_seed
    if d.obs_noise is not None:
        env = build_env(cfg, obs_noise=d.obs_noise)
    options = d.excitation_options.to_dict()
    low = np.asarray(env.action_space.low, dtype=np.float64)
    high = np.asarray(env.action_space.high, dtype=np.float64)
    if d.excitation == "random_steps":
        options.setdefault("low", low.tolist())
        options.setdefault("high", high.tolist())
    elif d.excitation == "chirp":
        options.setdefault("amplitude", np.minimum(-low, high).tolist())
    rng = np.random.default_rng(seed)
    inputs = np.stack(
        [
            make_excitation(d.excitation, d.steps, env.nominal_system.nu, env.dt, rng, **options)
            for _ in range(n)
        ]
    )
    states = None
    if d.initial_state == "uniform":
        states = uniform(d.low, d.high, n, rng)
    elif d.initial_state == "halton":
        states = halton(d.low, d.high, n, seed=seed)
    if states is not None:
        states = onto_constraints(env.true_system, states)
    meta = {
        "part": part,
        "excitation": {"kind": d.excitation, **options},
        "initial_state": d.initial_state,
    }
    feedback = None
    if d.collection == "nominal_controller":
        feedback = _NominalFeedback(as_scenario(cfg), env)
        meta["collection"] = "nominal_controller (the excitation a dither on its input)"
    return rollout_env(
        env, n, d.steps, inputs, seed, metadata=meta, progress=progress, initial_states=states,
        feedback=feedback,
    )  # fmt: skip


class _NominalFeedback:
    """The scenario's controller on the nominal model of the env's system (midpoint VI, no
    tightening: it has no bound), as ``(obs, t) -> u`` for :func:`rollout_env`."""

    def __init__(self, cfg: Scenario, env) -> None:
        from vimpc.models import NominalModel

        model = NominalModel(env.nominal_system, env.dt).fit().discrete_model()
        plain = cfg.replace(controller=cfg.controller.replace(tightening="none"))
        self.controller = build_controller(plain, model, env)

    def reset(self) -> None:
        self.controller.reset()

    def __call__(self, obs: np.ndarray, t: float) -> np.ndarray:
        return self.controller(obs, t).u


def _dataset(cfg: Scenario, env, part: str, progress: bool) -> Dataset:
    path = cfg.data.path if part == "train" else cfg.data.heldout_path
    return Dataset.load(path) if path is not None else collect(cfg, env, part, progress)


def split_heldout(data: Dataset) -> tuple[Dataset, Dataset]:
    """``(calibration, validation)``: the first half of the held-out trajectories and the rest."""
    k = data.n_trajectories // 2
    if k < 1:
        raise ConfigError(
            f"the held-out data hold {data.n_trajectories} trajectory; calibration and "
            "validation need at least 2 (data.heldout_trajectories)"
        )
    first, rest = np.arange(k), np.arange(k, data.n_trajectories)

    def part(idx: np.ndarray, name: str) -> Dataset:
        meta = {**data.metadata, "heldout_part": name}
        return Dataset(
            data.t[idx], data.obs[idx], data.states[idx], data.inputs[idx], data.dt, meta
        )

    return part(first, "calibration"), part(rest, "validation")


# -- the model ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelSource:
    """The scenario's model and where it came from.

    ``path`` is the file every consumer loads (``None``: the model is built from the
    scenario, with nothing to fit); ``report`` is the fit summary (``None`` without a
    fit); ``reused`` says the fit came from the cache.
    """

    model: DiscreteModel
    path: Path | None
    report: dict[str, Any] | None = None
    reused: bool = False


def cache_dir() -> Path:
    """Where fitted models are cached: ``$VIMPC_CACHE``, else ``$XDG_CACHE_HOME/vimpc``, else
    ``~/.cache/vimpc`` (compiled controllers go to its ``compiled`` folder)."""
    return cache_root()


def _file_digest(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def file_digest(path: str | Path) -> str:
    """SHA-256 of a file's bytes (the identity of a model file a run used)."""
    return _file_digest(str(path))


def check_cache_writable() -> Path:
    """The cache folder (:func:`cache_dir`), created if needed, after checking a file can be
    written there; a :class:`ConfigError` naming the place and ``VIMPC_CACHE`` otherwise.

    A fit runs only after this check, so a cache that cannot take the fitted model is
    found before the data are collected, not after the fit."""
    folder = cache_dir()
    where = "VIMPC_CACHE" if os.environ.get("VIMPC_CACHE") else "the cache folder (set VIMPC_CACHE)"
    if folder.exists() and not folder.is_dir():
        raise ConfigError(
            f"{where} {str(folder)!r} is a file, not a folder; fitted models are cached there. "
            "Point VIMPC_CACHE at a writable folder"
        )
    try:
        check_writable(folder)
    except OSError as exc:
        raise ConfigError(
            f"{where} {str(folder)!r} cannot be written ({exc.strerror or exc}); fitted models "
            "are cached there. Point VIMPC_CACHE at a writable folder"
        ) from None
    return folder


#: The generation of the code that builds fitted models. It enters every cache key, so a fit
#: cached by code that exported a different model is fitted again rather than reused; it
#: moves whenever a change alters what a fit exports (2: implicit steps refuse failed and
#: spurious Newton roots with NaN; 3: the model records the box of its data, ``data_box``;
#: 4: a horizon-level bound's windows calibration uses every window, by conformal risk control;
#: 5: a bound is NaN at a non-finite argument, the MX linear solves of CLNN, CHNN, GP-VI and
#: Hamel give NaN rather than an evaluation error at a singular matrix, GP-VI's projection NaN
#: where it fails).
FIT_GENERATION = 5
#: Per family, the generation of its export where it moved after FIT_GENERATION (entering the
#: key only where given, so the other families' cached fits stay valid). dlnn and lnn 2: the
#: model carries its residual's Jacobian in closed form (``residual_jacobian``). clnn and chnn
#: 2: the step is written on MX with its residual's Jacobian, from_obs projects. mlp_residual
#: and gp_residual 2: the network's weights, the posteriors' numbers are the model's ``p``.
FAMILY_GENERATION = {
    "dlnn": 2, "lnn": 2, "clnn": 2, "chnn": 2, "mlp_residual": 2, "gp_residual": 2
}  # fmt: skip


def closed_loop_code_digest() -> str:
    """SHA-256 of the sources of ``vimpc.mpc`` and ``vimpc.closedloop``: what a bound
    calibrated on the controller's own episodes depends on besides the settings."""
    digest = hashlib.sha256()
    root = Path(__file__).parent
    for folder in ("mpc", "closedloop"):
        for file in sorted((root / folder).glob("*.py")):
            digest.update(file.name.encode() + b"\0" + file.read_bytes())
    return digest.hexdigest()


def cache_key(cfg: ScenarioLike) -> str:
    """Hash of everything a fit depends on: the env, the data settings (and the contents of
    data files), the model settings, the vimpc version and :data:`FIT_GENERATION`; for a
    bound calibrated in closed loop, the controller's settings and code too."""
    s = as_scenario(cfg)
    # the payload is of the plain resolved tables, so keys made before the records stay
    data = s.data.to_dict()
    # one fit's data and model do not depend on how many fits a run makes, nor on the
    # plants its episodes draw: a fit cached before these keys existed stays valid
    data.pop("fits", None)
    if data.get("collection") == "open_loop":  # a fit cached before closed-loop data stays
        del data["collection"]
    env = s.env.to_dict()
    env.pop("plant")
    if env["adapter"] is None:  # vimpc's own env: the key of a fit cached before adapters
        del env["adapter"]
    xml = env["kwargs"].get("xml_file")
    if isinstance(xml, str):  # the plant's file by its contents: the same file elsewhere is
        env["kwargs"] = {**env["kwargs"], "xml_file": None, "xml_file_sha256": _file_digest(xml)}
    extra = {}
    if closed_loop_calibration(data):
        # the bound is calibrated on the controller's own episodes: they depend on it, on
        # the episodes' length and on the plants they draw
        env["plant"] = s.env.plant
        extra = {
            "controller": s.controller.to_dict(),
            "episode_steps": s.episodes.steps,
            # and on the controller's and the closed loop's code: a bound calibrated by
            # another version of them is not this controller's
            "closed_loop_code": closed_loop_code_digest(),
        }
    else:  # a fit cached before the closed-loop calibration existed stays valid
        for key in ("calibration", "calibration_episodes", "calibration_seed"):
            data.pop(key, None)
    for key in ("path", "heldout_path"):
        if data[key] is not None:
            data[key + "_sha256"] = _file_digest(data[key])
            data[key] = None  # the same file elsewhere is the same data
    payload = {
        "vimpc": __version__,
        "generation": FIT_GENERATION,
        "env": env,
        "data": data,
        "model": s.model.to_dict(),
        **extra,
    }
    if s.model.family in FAMILY_GENERATION:
        payload["family_generation"] = FAMILY_GENERATION[s.model.family]
    text = json.dumps(payload, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def obtain_model(
    cfg: ScenarioLike,
    env,
    *,
    refit: bool = False,
    progress: bool = False,
    log: Callable[[str], None] = print,
    workers: int = 1,
) -> ModelSource:
    """The scenario's model: loaded (``model.path``), built (nothing to fit), taken from the
    cache, or collected, fitted, evaluated and cached. ``workers``: processes for the
    closed-loop calibration episodes (``data.calibration = "closed_loop"``)."""
    from vimpc.model_file import load, save

    cfg = as_scenario(cfg)
    model_cfg = cfg.model
    if model_cfg.path is not None:
        return ModelSource(load(model_cfg.path), Path(model_cfg.path))
    closed_loop = closed_loop_calibration(cfg.data)
    if closed_loop:  # first a per-step bound on the held-out data, for the controller
        level = {"bound_level": model_cfg.bound_level, "bound_horizon": model_cfg.bound_horizon}
        step_level = model_cfg.replace(bound_level="step", bound_horizon=0)
        family = build_family(cfg.replace(model=step_level), env.nominal_system)
    else:
        family = build_family(cfg, env.nominal_system)
    if not family.needs_fit():
        return ModelSource(family.discrete_model(), None)
    key = cache_key(cfg)
    target = cache_dir() / f"{cfg.scenario.name}-{key}.vimpc"
    if target.exists() and not refit:
        try:
            model = load(target)
        except (ValueError, VimpcError) as exc:
            log(f"the fit cached at {target} is unreadable ({exc}); fitting again")
            refit = True
        else:
            log(f"reused the fit cached at {target} (no refit; --refit fits again)")
            return ModelSource(model, target, model.info.get("fit"), reused=True)
    check_cache_writable()  # before the data and the fit, not after
    train = _dataset(cfg, env, "train", progress)
    heldout = _dataset(cfg, env, "heldout", progress)
    calibration, validation = split_heldout(heldout)
    try:
        family.fit(train, calibration if family.bound != "none" else None)
        if closed_loop:
            calibration = calibrate_closed_loop(
                cfg, family, train, level, workers=workers, progress=progress, log=log
            )
    except VimpcError as exc:
        raise ConfigError(f"fitting model.family = {model_cfg.family!r}: {exc}") from exc
    model = family.discrete_model()
    report = fit_report(
        model, train, calibration, validation, family.fit_time_, system=env.nominal_system
    )
    report["calibration"] = "closed_loop" if closed_loop else "heldout"
    info = {**model.info, "fit": report, "cache_key": key, "data_box": data_box(train, calibration)}
    model = replace(model, info=info)
    try:
        save(model, target, overwrite=refit)
    except FileExistsError:  # a concurrent run cached the same fit meanwhile
        pass
    return ModelSource(load(target), target, report)


def calibrate_closed_loop(
    cfg: ScenarioLike,
    family,
    train: Dataset,
    level: dict[str, Any],
    *,
    workers: int = 1,
    progress: bool = False,
    log: Callable[[str], None] = print,
) -> Dataset:
    """Calibrate ``family``'s conformal bound on closed-loop episodes of the scenario's own
    controller (``data.calibration = "closed_loop"``) and return them as a :class:`Dataset`.

    ``family`` is fitted, its bound calibrated per step on the held-out open-loop
    trajectories. The calibration episodes run as the scenario's episodes do
    (``episodes.steps`` steps, the env's plants: with ``env.plant = "per_episode"`` each its
    own), from reset seeds ``data.calibration_seed + i``, with the controller on that
    model. The bound is then calibrated again on their transitions with the scenario's
    ``level`` (``bound_level`` and ``bound_horizon``): on the states and inputs the
    controller visits, not an open-loop excitation's. The calibration transitions are
    exchangeable with the transitions of episodes run by that controller; the scenario's
    controller uses the new bound, so its episodes differ from them as much as the bound
    changes the plans (the closed-loop coverage of the run measures what holds).
    """
    from tqdm import tqdm

    from vimpc.model_file import save

    cfg = as_scenario(cfg)
    d = cfg.data
    seeds = list(range(d.calibration_seed, d.calibration_seed + d.calibration_episodes))
    workers = min(workers, len(seeds))
    processes = "in this process" if workers <= 1 else f"in {workers} worker processes"
    log(
        f"calibrating the bound on {len(seeds)} closed-loop episodes of "
        f"{cfg.episodes.steps} steps (seeds {seeds[0]} to {seeds[-1]}) {processes}, the "
        "controller's model bounded per step on held-out data"
    )
    folder = check_cache_writable()
    fd, name = tempfile.mkstemp(prefix="preliminary-", suffix=".vimpc", dir=folder)
    os.close(fd)
    try:
        save(family.discrete_model(), name, overwrite=True)
        total = len(seeds) * cfg.episodes.steps
        with tqdm(total=total, desc="calibration episodes", unit="step", disable=not progress) as b:
            results = run_episodes(
                cfg, name, seeds, workers=workers,
                on_step=lambda: b.update(1), on_episode=None if workers <= 1 else b.update,
            )  # fmt: skip
    finally:
        Path(name).unlink(missing_ok=True)
    closed = trajectories_dataset(
        [traj for traj, _ in results],
        {"part": "calibration", "closed_loop": True, "seeds": [seeds[0], seeds[-1]]},
    )
    family.recalibrate(train, closed, **level)
    return closed


def trajectories_dataset(trajectories: Sequence[Any], metadata: dict[str, Any]) -> Dataset:
    """Closed-loop episodes of equal length as a :class:`Dataset` (measured observations,
    true states, applied inputs)."""
    return Dataset(
        np.stack([tr.t for tr in trajectories]),
        np.stack([tr.obs for tr in trajectories]),
        np.stack([tr.states for tr in trajectories]),
        np.stack([tr.inputs for tr in trajectories]),
        float(trajectories[0].t[1] - trajectories[0].t[0]),
        metadata,
    )


def data_box(*datasets: Dataset) -> dict[str, Any]:
    """The box the model was trained and calibrated on: the per-entry min and max of the true
    states ``(q, v)`` of ``datasets`` (the observation's coordinates)."""
    states = np.concatenate([d.states.reshape(-1, d.states.shape[-1]) for d in datasets])
    return {
        "low": states.min(axis=0).tolist(),
        "high": states.max(axis=0).tolist(),
        "of": "true states of the training and calibration data",
    }


def fit_config(cfg: ScenarioLike, k: int) -> Scenario:
    """The scenario of fit ``k`` of ``data.fits``: its own data seeds
    (:func:`vimpc.scenario.specs.fit_seeds`) and one fit, so fit 0 is the scenario's single
    fit (the same cache entry)."""
    from vimpc.scenario.specs import fit_seeds

    cfg = as_scenario(cfg)
    return cfg.replace(data={**fit_seeds(cfg.data, k), "fits": 1})


def obtain_models(
    cfg: ScenarioLike,
    env,
    *,
    refit: bool = False,
    progress: bool = False,
    log: Callable[[str], None] = print,
) -> list[ModelSource]:
    """The scenario's ``data.fits`` models (:func:`obtain_model` of each
    :func:`fit_config`), in fit order."""
    cfg = as_scenario(cfg)
    out = []
    for k in range(cfg.data.fits):
        out.append(obtain_model(fit_config(cfg, k), env, refit=refit, progress=progress, log=log))
    return out


def build_model(cfg: ScenarioLike, env) -> DiscreteModel:
    """The scenario's model (see :func:`obtain_model`), without the messages."""
    return obtain_model(cfg, env, log=lambda _: None).model


def fit_report(
    model: DiscreteModel,
    train: Dataset,
    calibration: Dataset,
    validation: Dataset,
    fit_time: float,
    *,
    system: Any = None,
) -> dict[str, Any]:
    """The fit summary: sizes, fit time, one-step and multi-step RMS prediction errors per
    observation entry on the validation data, and the bound's coverage there (per step, and
    for a horizon-level bound per window of its horizon). With the nominal ``system``
    (a :class:`~vimpc.mechanics.MechanicalSystem`), ``long_rollout``: the energy drift,
    constraint residuals and failures of the model's long unforced rollouts from the
    validation data's starts (:func:`vimpc.models.evaluation.long_rollout_metrics`)."""
    from vimpc.models import evaluation

    steps = min(PREDICTION_STEPS, validation.n_steps)
    one = evaluation.prediction_errors(model, validation, 1)
    many = evaluation.prediction_errors(model, validation, steps)
    report: dict[str, Any] = {
        "fit_time_s": float(fit_time),
        "train_transitions": int(train.n_trajectories * train.n_steps),
        "calibration_transitions": int(calibration.n_trajectories * calibration.n_steps),
        "validation_transitions": int(validation.n_trajectories * validation.n_steps),
        "one_step_rmse": _rmse(one),
        "multi_step": int(steps),
        "multi_step_rmse": _rmse(many),
    }
    failed = int(np.sum(~np.all(np.isfinite(one), axis=1)))
    failed_many = int(np.sum(~np.all(np.isfinite(many), axis=1)))
    notes = model.info.get("fit_notes")
    if notes:
        report["notes"] = list(notes)
    if failed or failed_many:
        # a model's step can fail far from its data (a learned Lagrangian's Newton solve):
        # the RMS is over the predictions that exist, the failures are counted
        report["failed_predictions"] = {"one_step": failed, "multi_step": failed_many}
    if model.bound is not None:
        report["delta"] = model.delta
        report["validation_coverage"] = evaluation.coverage(model, validation)
        horizon = model.bound_info.horizon
        if horizon is not None and horizon <= validation.n_steps:
            # a horizon-level bound: the share of validation windows with every step inside
            from vimpc.models.calibration import horizon_coverage

            report["bound_horizon"] = horizon
            report["validation_horizon_coverage"] = horizon_coverage(model, validation, horizon)
    if system is not None:
        report["long_rollout"] = evaluation.long_rollout_metrics(model, system, validation)
    return report


def _rmse(errors: np.ndarray) -> list[float | None]:
    """RMS per column over the rows without a NaN (None where no row is finite)."""
    finite = errors[np.all(np.isfinite(errors), axis=1)]
    if not len(finite):
        return [None] * errors.shape[1]
    return np.sqrt(np.mean(finite**2, axis=0)).tolist()


# -- the controller -------------------------------------------------------------------------------


def build_controller(cfg: ScenarioLike, model: DiscreteModel, env):
    """The MPC of a scenario: costs and constraints on the observation."""
    from vimpc.mpc import MPC, Constraints, Cost, EnergyShaping, PathConstraint

    cfg = as_scenario(cfg)
    ccfg = cfg.controller
    cost_cfg, cons_cfg = ccfg.cost, ccfg.constraints
    reference: Any = cost_cfg.reference
    if cost_cfg.reference_from_env:
        if not hasattr(env, "reference"):
            raise ConfigError(
                f"controller.cost.reference_from_env: {cfg.env.id} has no reference(t)"
            )
        base = (
            np.zeros(model.nobs)
            if cost_cfg.reference is None
            else np.asarray(cost_cfg.reference, float)
        )
        index = cost_cfg.reference_index

        def reference(t, env=env, base=base, index=index):
            value = np.asarray(env.reference(t), dtype=float)
            if value.shape == (model.nobs,):
                return value
            out = base.copy()
            out[index] = float(value)  # a scalar reference fills one observation entry
            return out

    energy = None
    if cost_cfg.energy_weight > 0:
        energy = EnergyShaping(weight=cost_cfg.energy_weight)
    cost = Cost(
        Q=cost_cfg.Q,
        R=cost_cfg.R,
        Q_terminal=cost_cfg.Q_terminal,
        reference=reference,
        R_rate=cost_cfg.R_rate,
        periodic=tuple(cost_cfg.periodic),
        energy=energy,
    )
    low, high = env.action_space.low, env.action_space.high
    circles = [
        PathConstraint.keep_out(
            f"circle{i}",
            model.nobs,
            c.indices,
            c.center,
            c.radius,
            soft=c.soft,
            weight=c.weight,
        )
        for i, c in enumerate(cons_cfg.circles)
    ]
    constraints = Constraints(
        u_min=low if cons_cfg.u_min is None else cons_cfg.u_min,
        u_max=high if cons_cfg.u_max is None else cons_cfg.u_max,
        obs_min=cons_cfg.obs_min,
        obs_max=cons_cfg.obs_max,
        soft_bounds=cons_cfg.soft_bounds,
        bound_weight=cons_cfg.bound_weight,
        path=tuple(circles),
    )
    # every declared option reaches the controller, the tube's only where it applies
    # the controller takes plain values (lists, dicts), as a user passes them
    plain = ccfg.to_dict()
    options = {key: plain[key] for key in MPC.settings if key not in TUBE_KEYS}
    options.update(_tube_options(plain))
    if options["period"] is None:  # called once per env step
        options["period"] = float(cfg.env.dt)
    try:
        return MPC(
            model,
            cost=cost,
            constraints=constraints,
            obs_names=env.obs_names,
            **options,
        )
    except VimpcError as exc:
        raise ConfigError(f"controller: {exc}") from None


def _tube_options(ccfg: dict[str, Any]) -> dict[str, Any]:
    """The tube's settings that apply: those the scenario's tightening strategy reads
    (:func:`vimpc.mpc.tightening.tightening_class`), so a scenario keeps its tube settings
    when an override turns the tube off (``controller.tightening = "none"``) or makes it
    open loop."""
    from vimpc.mpc.tightening import tightening_class

    reads = tightening_class(ccfg).READS
    return {key: ccfg[key] for key in TUBE_KEYS if key in reads}


#: the options of the tube's shape, passed to the controller only where they apply
TUBE_KEYS = ("tube", "tube_memory", "tube_Q", "tube_R", "tube_errors")


def success_test(cfg: ScenarioLike):
    """The scenario's success criterion on a trajectory, or None: every entry of
    ``metrics.success_index`` within its tolerance of its target (or of the controller's
    reference) at every step of the last ``success_window`` seconds, angles wrapped where
    ``success_periodic`` says so. ``cfg`` may also be a mapping holding only a ``metrics``
    table."""
    m = as_table(cfg, "metrics")
    if m.success_index is None:
        return None
    index = np.atleast_1d(np.asarray(m.success_index, dtype=int))

    def per_entry(value: Any, dtype: type) -> np.ndarray:  # one value for all, or one per entry
        return np.broadcast_to(np.asarray(value, dtype=dtype), index.shape)

    tol = per_entry(m.success_tolerance, np.float64)
    periodic = per_entry(m.success_periodic, bool)
    against_reference = m.success_against_reference
    target = None if against_reference else per_entry(m.success_target, np.float64)
    window = m.success_window

    def success(traj) -> bool:
        recent = traj.t >= traj.t[-1] - window
        goal = traj.reference[recent][:, index] if against_reference else target
        tail = traj.states[recent][:, index] - goal
        tail = np.where(periodic, np.angle(np.exp(1j * tail)), tail)
        return bool(np.all(np.abs(tail) <= tol))

    return success


# -- episodes ------------------------------------------------------------------------------------


class EpisodeRunner:
    """Everything one process needs to run episodes of a scenario: env, model, controller.

    Built the same way in the parent (serial runs) and in every worker process, from the
    configuration and the model file, so an episode gives the same numbers wherever it runs.
    ``model_path`` is one file (or ``None``: built from the scenario), or one per fit of
    ``data.fits``; the models and controllers of the fits are built when first used.
    ``model`` and ``controller`` are fit 0's.
    """

    def __init__(
        self, cfg: ScenarioLike, model_path: str | Path | None | Sequence[str | None]
    ) -> None:
        self.cfg = cfg = as_scenario(cfg)
        if isinstance(model_path, (list, tuple)):
            self._paths = [None if p is None else str(p) for p in model_path]
        else:
            self._paths = [None if model_path is None else str(model_path)]
        self.env = build_env(cfg)
        self._fits: dict[int, tuple[DiscreteModel, Any]] = {}
        self.model, self.controller = self.fit(0)
        self.success = success_test(cfg)

    def fit(self, k: int) -> tuple[DiscreteModel, Any]:
        """``(model, controller)`` of fit ``k``."""
        from vimpc.model_file import load

        if not 0 <= k < len(self._paths):
            raise ConfigError(f"fit {k} does not exist: this run has {len(self._paths)} fits")
        if k not in self._fits:
            path = self._paths[k]
            if path is not None:
                model = load(path)
            else:
                model = build_family(self.cfg, self.env.nominal_system).discrete_model()
            self._fits[k] = (model, build_controller(self.cfg, model, self.env))
        return self._fits[k]

    def run(self, seed: int, on_step: Callable[[int], None] | None = None, fit: int = 0):
        """One episode from ``seed`` with the model of fit ``fit``: ``(trajectory,
        metrics)``. With ``env.plant = "per_episode"`` the env's true plant is first drawn
        from :func:`vimpc.scenario.specs.plant_seed` of the episode's seed. The metrics
        record the fit, the plant's ``param_seed`` and, for a model that records the box of
        its data, the share of steps outside it."""
        from vimpc.closedloop import episode_metrics, run_episode
        from vimpc.scenario.specs import plant_seed

        model, controller = self.fit(fit)
        if self.cfg.env.plant == "per_episode":
            self.env.set_plant(plant_seed(self.cfg.env.kwargs.get("param_seed", 0), seed))
        traj = run_episode(self.env, controller, self.cfg.episodes.steps, seed, on_step=on_step)
        metrics = episode_metrics(
            traj,
            success=self.success,
            periodic=tuple(self.cfg.controller.cost.periodic),
            tracked=np.flatnonzero(np.diag(controller.cost.Q)).tolist(),
            model=model,
            safety=controller.safety_function,
            data_box=model.info.get("data_box"),
        )
        metrics["fit"] = int(fit)
        metrics["plant_seed"] = int(self.env.param_seed)
        return traj, metrics


_RUNNER: EpisodeRunner | BaseException | None = None


def _init_worker(cfg: dict[str, Any], model_path) -> None:
    """Build the worker's runner; Ctrl-C is left to the parent, which ends the workers. An
    error is kept for the first episode to raise (a pool would restart a worker whose
    initializer fails, again and again)."""
    import signal

    global _RUNNER
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        _RUNNER = EpisodeRunner(cfg, model_path)
    except Exception as exc:  # raised in the parent by the first episode
        _RUNNER = exc


def _run_in_worker(item: tuple[int, int, int]):
    if isinstance(_RUNNER, BaseException):
        raise _RUNNER
    index, seed, fit = item
    return index, _RUNNER.run(seed, fit=fit)


def run_episodes(
    cfg: dict[str, Any],
    model_path: str | Path | None | Sequence[str | None],
    seeds: Sequence[int],
    *,
    fits: Sequence[int] | None = None,
    workers: int = 1,
    on_step: Callable[[], None] | None = None,
    on_episode: Callable[[int], None] | None = None,
    on_result: Callable[[int, tuple[Any, dict[str, Any]]], None] | None = None,
    runner: EpisodeRunner | None = None,
) -> list[tuple[Any, dict[str, Any]]]:
    """Run one episode per seed; results in the order of ``seeds``. ``model_path`` is one
    model file or one per fit; ``fits[i]`` is the fit episode ``i`` uses (all 0 by default).

    With ``workers > 1`` the episodes run in that many processes (at most one per seed;
    the CLI also caps them by the cores, :func:`vimpc._processes.worker_count`) (spawned,
    each building its own :class:`EpisodeRunner`), with the same results as a serial run; an exception
    or a Ctrl-C in the parent ends the workers at once. ``on_step`` is called after every
    step of a serial run, ``on_episode(steps)`` after every finished episode (progress
    bars), ``on_result(i, (trajectory, metrics))`` in this process as soon as the episode
    of ``seeds[i]`` is finished (in any order with workers), so a caller can keep each
    one before the next ends.
    """
    from vimpc._checks import positive_int

    workers = min(positive_int("workers", workers), max(1, len(seeds)))  # no idle processes
    if isinstance(model_path, (list, tuple)):
        path: Any = [None if p is None else str(p) for p in model_path]
    else:
        path = None if model_path is None else str(model_path)
    fits = [0] * len(seeds) if fits is None else [int(k) for k in fits]
    if len(fits) != len(seeds):
        raise ConfigError(f"fits must give one fit per seed ({len(seeds)}), got {len(fits)}")
    if workers <= 1:
        runner = runner or EpisodeRunner(cfg, path)
        out = []
        for i, seed in enumerate(seeds):
            tick = (lambda _: on_step()) if on_step else None
            out.append(runner.run(seed, on_step=tick, fit=fits[i]))
            if on_result is not None:
                on_result(i, out[-1])
            if on_episode is not None:
                on_episode(len(out[-1][0].inputs))
        return out
    results: dict[int, Any] = {}

    def done(item) -> None:
        index, result = item
        results[index] = result
        if on_result is not None:
            on_result(index, result)
        if on_episode is not None:
            on_episode(len(result[0].inputs))

    items = [(i, seed, fits[i]) for i, seed in enumerate(seeds)]
    in_processes(_run_in_worker, items, workers, done, "episode",
                 initializer=_init_worker, initargs=(cfg, path))  # fmt: skip
    return [results[i] for i in range(len(seeds))]
