"""What a scenario's env and model are, read from their classes before either is built: the
env's system, sizes, names and limits (:class:`EnvSpec`), the model's fields and whether it
must be fitted (:class:`ModelSpec`, from a saved model file or the family's declaration), and
the unfitted family itself (:func:`build_family`). A spec that cannot be made says why, naming
the scenario key."""

from __future__ import annotations

import difflib
import inspect
import math
from pathlib import Path
from typing import Any

from vimpc.errors import ConfigError, VimpcError

#: The most ground-truth substeps in one control step of an env: its one-step function is
#: built over all of them, which took 1.7 s at 10^5 substeps (env.dt = 10 s at the default
#: 1e-4 s substep) and grows linearly (ENV_SECONDS_PER_SUBSTEP each, measured with the
#: pendulum); env.dt = 1e9 s ran out of memory with a C++ bad_alloc.
MAX_ENV_SUBSTEPS = 100_000
ENV_SECONDS_PER_SUBSTEP = 1.4e-5


#: the control step of vimpc's own envs when ``env.dt`` is not given
DEFAULT_DT = 0.01


class EnvSpec:
    """What a scenario's env is, read from its class (vimpc's own envs) or from the env and
    its ``[env.adapter]`` declaration (any other gymnasium env, built once to check the maps
    against its spaces): system, sizes, names and limits. Fills ``env.dt`` in ``cfg`` where
    the scenario leaves it unset."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        import gymnasium
        from vimpc_envs._base import MechanicalEnv  # (the package registers the ids)

        env_cfg = cfg["env"]
        env_id = env_cfg["id"]
        if ":" in env_id:  # "module:Id-v0": the module registers the id, as gymnasium.make does
            _import_env_module(env_id)
        bare = env_id.split(":", 1)[-1]
        if bare not in gymnasium.registry:
            ids = [k for k in gymnasium.registry if k.startswith("vimpc/")]
            hint = difflib.get_close_matches(bare, list(gymnasium.registry), n=1)
            extra = f"; did you mean {hint[0]!r}?" if hint else ""
            raise ConfigError(
                f"env.id {env_id!r} is not a registered environment{extra} (vimpc ids: {ids}; "
                "or any gymnasium id, with [env.adapter])"
            )
        entry = gymnasium.spec(bare).entry_point
        try:
            cls = (
                gymnasium.envs.registration.load_env_creator(entry)
                if isinstance(entry, str)
                else entry
            )
        except ImportError as exc:
            raise ConfigError(f"env.id {env_id!r} cannot be loaded: {_missing_hint(exc)}") from None
        self.cls = cls
        self.foreign = not (isinstance(cls, type) and issubclass(cls, MechanicalEnv))
        if self.foreign:
            self._foreign(cfg)
            return
        if env_cfg.get("adapter") is not None:
            raise ConfigError(
                f"env.adapter is for environments that are not vimpc's own; {env_id} knows its "
                "system, observation and limits: remove [env.adapter]"
            )
        if env_cfg["dt"] is None:
            env_cfg["dt"] = DEFAULT_DT
        kwargs = env_cfg["kwargs"]
        if "dt" in kwargs:
            raise ConfigError("set the control step as env.dt, not env.kwargs.dt")
        default = inspect.signature(MechanicalEnv.__init__).parameters["substep"].default
        substep = kwargs.get("substep", default)
        if isinstance(substep, (int, float)) and not isinstance(substep, bool) and substep > 0:
            n = env_cfg["dt"] / substep
            if n > MAX_ENV_SUBSTEPS:
                raise ConfigError(
                    f"env.dt = {env_cfg['dt']} s is {n:.3g} substeps of the env's ground "
                    f"truth ({substep:g} s each), above the limit of {MAX_ENV_SUBSTEPS} "
                    f"(vimpc.scenario.specs.MAX_ENV_SUBSTEPS): the env would be built for "
                    f"about {n * ENV_SECONDS_PER_SUBSTEP:.3g} s and step slower still; give "
                    f"env.dt <= {MAX_ENV_SUBSTEPS * substep:g} s"
                )
        params = kwargs.get("params") or {}
        if not isinstance(params, dict):
            raise ConfigError(f"env.kwargs.params must be a table, got {params!r}")
        try:
            system = cls.system_type(**params)
        except VimpcError as exc:
            raise ConfigError(f"env.kwargs.params: {exc}") from None
        self.system = system.name
        self.nominal = system
        names = system.coordinate_names
        self.obs_names = (*names, *(f"{n}_dot" for n in names))
        self.nobs = system.nq + system.nv
        self.nu = system.nu
        self.action_limit = tuple(cls.action_limit)
        self.obs_limit = tuple(float(v) for v in cls.observation_limit)

    def _foreign(self, cfg: dict[str, Any]) -> None:
        env_cfg = cfg["env"]
        if env_cfg.get("adapter") is None:
            raise ConfigError(
                f"env.id {env_cfg['id']!r} is not a vimpc environment, so vimpc does not know "
                "how its observation and action relate to a model: declare [env.adapter] (the "
                "catalog system, the observation and action maps, the true limits; see "
                "vimpc_envs.adapter)"
            )
        plant = build_plant(cfg)
        try:
            if env_cfg["dt"] is None:
                env_cfg["dt"] = plant.dt
            system = plant.nominal_system
            self.plant_metadata = plant.metadata_for_dataset()
            self.safety_limits = plant.safety_limits
            self.action_low = tuple(float(v) for v in plant.action_space.low)
            self.action_high = tuple(float(v) for v in plant.action_space.high)
        finally:
            plant.close()
        self.system = system.name
        self.nominal = system
        self.obs_names = plant.obs_names
        self.nobs = system.nq + system.nv
        self.nu = system.nu
        self.action_limit = tuple(
            max(-lo, hi) for lo, hi in zip(self.action_low, self.action_high, strict=True)
        )
        self.obs_limit = (math.inf,) * self.nobs

    @property
    def input_bounds(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """``(low, high)``: the bounds the env clips each model input to."""
        if self.foreign:
            return self.action_low, self.action_high
        return tuple(-float(a) for a in self.action_limit), tuple(
            float(a) for a in self.action_limit
        )


def _import_env_module(env_id: str) -> None:
    import importlib

    module = env_id.split(":", 1)[0]
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise ConfigError(
            f"env.id {env_id!r}: module {module!r} cannot be imported ({exc})"
        ) from None


def _missing_hint(exc: BaseException) -> str:
    text = str(exc)
    if "mujoco" in text.lower() or "imageio" in text.lower():
        return f'{text}; MuJoCo envs need the extra: pip install -e ".[mujoco]"'
    return text


def build_plant(cfg: dict[str, Any] | Any):
    """The scenario's foreign env behind its adapter (:class:`vimpc_envs.adapter.ForeignPlant`),
    every error a :class:`ConfigError` naming the key: an ``env.kwargs.xml_file`` that does
    not exist or does not parse (MuJoCo's own message, with the path), MuJoCo not installed,
    maps that do not fit the env's spaces."""
    import gymnasium
    from vimpc_envs.adapter import AdapterSpec, ForeignPlant

    env_cfg = cfg["env"]
    env_id = env_cfg["id"]
    kwargs = env_cfg["kwargs"]
    kwargs = kwargs.to_dict() if hasattr(kwargs, "to_dict") else dict(kwargs)
    adapter = env_cfg["adapter"]
    adapter = adapter.to_dict() if hasattr(adapter, "to_dict") else adapter
    xml = kwargs.get("xml_file")
    if xml is not None:
        if not isinstance(xml, str) or not xml:
            raise ConfigError(f"env.kwargs.xml_file must be the path of an MJCF file, got {xml!r}")
        if not Path(xml).is_file():
            raise ConfigError(
                f"env.kwargs.xml_file = {xml!r}: no such file (a path relative to the scenario "
                "file, or absolute; on the command line, relative to the working folder)"
            )
    try:
        spec = AdapterSpec.parse(adapter)
    except VimpcError as exc:
        raise ConfigError(str(exc)) from None
    try:
        env = gymnasium.make(env_id, **kwargs).unwrapped
    except gymnasium.error.DependencyNotInstalled as exc:
        raise ConfigError(f"env.id {env_id!r}: {_missing_hint(exc)}") from None
    except ImportError as exc:
        raise ConfigError(f"env.id {env_id!r}: {_missing_hint(exc)}") from None
    except TypeError as exc:
        raise ConfigError(f"env.kwargs do not fit {env_id}: {exc}") from None
    except Exception as exc:  # noqa: BLE001  (a simulator's own error: MuJoCo's XML parser)
        where = f"env.kwargs.xml_file = {xml!r}" if xml is not None else f"env.id {env_id!r}"
        raise ConfigError(
            f"{where}: {env_id} could not be made: {type(exc).__name__}: {str(exc).strip()}"
        ) from None
    try:
        return ForeignPlant(env, spec, env_cfg["dt"], env_id)
    except VimpcError as exc:
        env.close()
        raise ConfigError(str(exc)) from None


class ModelSpec:
    """What the scenario's model will be: its fields, and whether it must be fitted."""

    def __init__(self, cfg: dict[str, Any], env: EnvSpec) -> None:
        mcfg = cfg["model"]
        dt = cfg["env"]["dt"]
        if mcfg["path"] is not None:
            from vimpc.model_file import load

            if not Path(mcfg["path"]).exists():
                raise ConfigError(f"model.path = {mcfg['path']!r}: no such file")
            try:
                model = load(mcfg["path"])
            except (ValueError, VimpcError) as exc:
                raise ConfigError(f"model.path: {exc}") from None
            system = model.info.get("system")
            problems = []
            if abs(model.dt - dt) > 1e-12 * dt:
                problems.append(f"it steps dt = {model.dt} s, env.dt is {dt} s")
            if system is not None and system != env.system:
                problems.append(f"it models a {system}, the env is a {env.system}")
            if model.nobs != env.nobs or model.nu != env.nu:
                problems.append(
                    f"it takes {model.nobs} observations and {model.nu} inputs, the env has "
                    f"{env.nobs} and {env.nu}"
                )
            problems += _settings_differences(mcfg, model.info)
            recorded = model.bound_info
            if recorded is not None:
                short = _horizon_shortfall(cfg, recorded.level, recorded.horizon)
                problems += [f"its bound: {short}"] if short else []
            if problems:
                raise ConfigError(
                    f"model.path = {mcfg['path']!r} does not fit the scenario: "
                    + "; ".join(problems)
                )
            self.fields = frozenset(
                name
                for name in ("residual", "bound", "energy", "constraint", "velocity_constraint")
                if getattr(model, name) is not None
            )
            self.needs_fit = False
            self.what = f"the saved model {mcfg['path']!r}"
            self.nx = model.nx
            return
        family = build_family(cfg, env.nominal)
        self.fields = family.provides()
        self.needs_fit = family.needs_fit()
        self.what = f"model.family = {mcfg['family']!r} with these settings"
        self.nx: int | None = None  # known once built; the observation's size stands in


def _settings_differences(mcfg: dict[str, Any], info: Any) -> list[str]:
    """Where the scenario's model settings differ from those a saved model records (a model
    that records none is taken as it is)."""
    settings = info.get("settings")
    if not isinstance(settings, dict):
        return []
    out = []
    if info.get("model") not in (None, mcfg["family"]):
        out.append(f"it is a {info['model']!r} model, model.family is {mcfg['family']!r}")
    for key, value in settings.items():
        if key in mcfg and mcfg[key] != value:
            out.append(f"model.{key} = {mcfg[key]!r}, but the saved model has {key} = {value!r}")
    return out


def build_family(cfg: dict[str, Any], nominal_system):
    """The scenario's model family, unfitted: the env's nominal system with
    ``model.params``, the env's ``dt`` and the family's settings."""
    from vimpc.models import family

    mcfg = cfg["model"]
    cls = family(mcfg["family"])
    system = nominal_system
    if mcfg["params"]:
        try:
            system = system.with_params(**mcfg["params"])
        except VimpcError as exc:
            raise ConfigError(f"model.params: {exc}") from None
    settings = {k: mcfg[k] for k in cls.all_settings()}
    try:
        built = cls(system, cfg["env"]["dt"], **settings)
    except VimpcError as exc:
        raise ConfigError(f"model: {exc}") from None
    problem = _horizon_shortfall(cfg, settings.get("bound_level"), settings.get("bound_horizon"))
    if problem:
        raise ConfigError(f"model.bound_horizon = {settings['bound_horizon']}: {problem}")
    return built


def _horizon_shortfall(cfg: dict[str, Any], level: Any, steps: Any) -> str:
    """Why a horizon-level bound of ``steps`` steps does not cover the controller's horizon
    ("" when it does, or the bound is per step)."""
    horizon = cfg.get("controller", {}).get("horizon")
    if level != "horizon" or not isinstance(horizon, int) or not isinstance(steps, int):
        return ""
    if steps >= horizon:
        return ""
    return (
        f"a horizon-level bound covers {steps} consecutive steps, fewer than the "
        f"controller's horizon of {horizon}: set it to controller.horizon = {horizon}"
    )


# -- variation: plants per episode, repeated fits ---------------------------------------------

#: fit k of ``data.fits`` collects with ``data.seed`` and ``data.heldout_seed`` plus
#: ``k * FIT_SEED_STRIDE``; the runs of seeds of all fits are checked not to overlap
FIT_SEED_STRIDE = 10_000_000
#: a word mixed into the plant seeds, so a plant's draw is not the reset draw of a seed
PLANT_SEED_KEY = 0x504C414E


def plant_seed(base: int, episode_seed: int) -> int:
    """The ``param_seed`` of an episode's plant with ``env.plant = "per_episode"``: a 32-bit
    word of NumPy's ``SeedSequence((base, episode_seed, PLANT_SEED_KEY))``, ``base`` being
    ``env.kwargs.param_seed`` (0 by default). Deterministic; different episodes get
    different plants."""
    import numpy as np

    words = np.random.SeedSequence((int(base), int(episode_seed), PLANT_SEED_KEY))
    return int(words.generate_state(1, np.uint32)[0])


#: the seed keys of ``[data]`` that fit k shifts by ``k * FIT_SEED_STRIDE``
FIT_SEED_KEYS = ("seed", "heldout_seed", "calibration_seed")


def fit_seeds(data: dict[str, Any], k: int) -> dict[str, int]:
    """The seeds of fit ``k`` (0-based) of ``data.fits``: each of :data:`FIT_SEED_KEYS`."""
    return {key: data[key] + k * FIT_SEED_STRIDE for key in FIT_SEED_KEYS}


def closed_loop_calibration(data: dict[str, Any]) -> bool:
    """Whether ``data`` asks for a bound calibrated on closed-loop episodes."""
    return data.get("calibration", "heldout") == "closed_loop"


def fit_seed_runs(data: dict[str, Any]) -> list[tuple[int, int, str]]:
    """``(first, last, what)``: the runs of reset seeds every fit of ``data.fits`` uses."""
    runs = []
    for k in range(data.get("fits", 1)):
        seeds = fit_seeds(data, k)
        runs.append((seeds["seed"], seeds["seed"] + data["trajectories"] - 1,
                     f"fit {k}'s training data"))  # fmt: skip
        held = seeds["heldout_seed"]
        runs.append((held, held + data["heldout_trajectories"] - 1, f"fit {k}'s held-out"))
        if closed_loop_calibration(data):
            cal = seeds["calibration_seed"]
            runs.append((cal, cal + data["calibration_episodes"] - 1,
                         f"fit {k}'s calibration episodes"))  # fmt: skip
    return runs


def check_variation(cfg: dict[str, Any], env: EnvSpec, model: ModelSpec) -> None:
    """``env.plant`` and ``data.fits`` against the env, the data and the model: a
    :class:`ConfigError` naming the key and its value, before any work."""
    from vimpc._settings import MAX_SEED

    plant, kwargs = cfg["env"]["plant"], cfg["env"]["kwargs"]
    if plant == "per_episode":
        from vimpc_envs._base import MechanicalEnv

        default = inspect.signature(MechanicalEnv.__init__).parameters["perturbation"].default
        perturbation = kwargs.get("perturbation", default)
        friction_drawn = kwargs.get("friction") is None and any(f > 0 for f in env.cls.friction_max)
        if not (isinstance(perturbation, (int, float)) and perturbation > 0) and not (
            friction_drawn
        ):
            why = (
                "its friction is given (env.kwargs.friction)"
                if kwargs.get("friction") is not None
                else f"{env.cls.__name__} draws no friction"
            )
            raise ConfigError(
                f"env.plant = 'per_episode' needs an env that draws plants, but "
                f"{cfg['env']['id']} with env.kwargs.perturbation = {perturbation!r} cannot: "
                f"the masses are not perturbed and {why}, so every episode would get the same "
                "plant; set env.kwargs.perturbation > 0 or env.plant = 'fixed'"
            )
    fits = cfg["data"]["fits"]
    if fits == 1:
        return
    data = cfg["data"]
    where = f"data.fits = {fits}"
    if not model.needs_fit:
        raise ConfigError(
            f"{where} repeats the data collection and the fit, but {model.what} is not fitted "
            "(a saved model, or a family without data and without a calibrated bound); set "
            "data.fits = 1"
        )
    for key in ("path", "heldout_path"):
        if data[key] is not None:
            raise ConfigError(
                f"{where} collects new data for each fit, but data.{key} = {data[key]!r} gives "
                f"saved data that every fit would share; remove data.{key} or set data.fits = 1"
            )
    runs = fit_seed_runs(data)
    top = max(r[1] for r in runs)
    if top > MAX_SEED:
        raise ConfigError(
            f"{where} uses seeds up to {top} (fit k adds k * {FIT_SEED_STRIDE}), beyond the "
            f"largest seed {MAX_SEED}; lower data.fits, data.seed, data.heldout_seed or "
            "data.calibration_seed"
        )
    runs.sort()
    for (a0, a1, a), (b0, _, b) in zip(runs, runs[1:], strict=False):
        if b0 <= a1:
            raise ConfigError(
                f"{where}: {a} (seeds {a0} to {a1}) and {b} (from seed {b0}) overlap, so the "
                f"fits would share trajectories; keep data.trajectories, "
                f"data.heldout_trajectories and data.calibration_episodes below "
                f"{FIT_SEED_STRIDE} and data.seed, data.heldout_seed and data.calibration_seed "
                "apart"
            )
