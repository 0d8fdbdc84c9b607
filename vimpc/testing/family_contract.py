"""The contract every registered model family must satisfy, as an inheritable suite.

:class:`ModelFamilyContract` checks one family of :data:`vimpc.models.registry.FAMILIES`
on a small case (:class:`SmallCase`: an environment, a tiny dataset and small settings
that fit in a few seconds): ``fit`` returns ``self``; use before ``fit`` raises
:class:`~vimpc.errors.NotFittedError` naming the family (a family that needs no fit
exports the same model before and after); ``provides()`` is known before the fit and names
exactly the optional fields the exported model has; the exported model passes
:class:`~vimpc.testing.DiscreteModelContract` (the suite is inherited); it saves and
loads bit for bit; loaded in a fresh process it steps without importing torch or gpytorch,
and ``vimpc run`` with it as ``model.path`` imports neither; unknown settings are refused
naming the key; the settings round-trip through a scenario file and its schema; two fits
with the same seed and data give bit-identical models.

A test module parametrises the suite over the registry, so a newly registered family is
checked at once, and fails (not skips) until it has a small case::

    SMALL_CASES = {"nominal": nominal_case, "gp_vi": gp_vi_case, ...}
    globals().update(ModelFamilyContract.for_registry(SMALL_CASES))

A small case comes from the mapping (keyed by family name, a function returning a
:class:`SmallCase`) or, failing that, from a classmethod ``small_case()`` on the family.
The fit is made once per family and shared by every check (the checks never change it).
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

import casadi as ca
import numpy as np

from vimpc.data.dataset import Dataset
from vimpc.dynamics import ARGUMENTS, FUNCTION_FIELDS, DiscreteModel
from vimpc.errors import InputError, NotFittedError
from vimpc.mechanics.system import MechanicalSystem
from vimpc.testing.model_contract import DiscreteModelContract

#: The optional DiscreteModel fields ``provides()`` speaks of.
OPTIONAL_FIELDS = ("residual", "bound", "energy", "constraint", "velocity_constraint")

#: DiscreteModelContract attributes a small case may set (its tolerances and flags).
CONTRACT_OPTIONS = (
    "residual_tol",
    "jacobian_rtol",
    "n_samples",
    "fd_step",
    "roundtrip_tol",
    "constraint_preserving",
    "velocity_constraint_preserving",
    "manifold_tol",
    "constraint_tol",
    "coverage_alpha",
)

#: Modules no saved model may need at control time.
TRAINING_MODULES = ("torch", "gpytorch")

# seconds a child process (load and step, or a two-step `vimpc run`) may take
_CHILD_TIMEOUT = 120.0


@dataclasses.dataclass(frozen=True)
class SmallCase:
    """A family's small fixture for :class:`ModelFamilyContract`.

    Attributes:
        system: the system the family is built from (the env's nominal system).
        env_id: the gymnasium id whose system ``system`` is (for the scenario checks and
            the ``vimpc run`` check).
        dt: the model step [s], the env's ``dt`` in the scenario.
        settings: the family's settings (small: the fit takes a few seconds).
        obs_low, obs_high: the box of observations ``(q, v)`` the checks sample states
            from (through the model's ``from_obs``), where the fitted model is valid.
        input_low, input_high: the box of inputs the checks sample.
        data: the training data (None for a family that learns nothing).
        calibration: held-out data for ``bound = "conformal"``.
        heldout: optional held-out data the bound's coverage is checked on.
        env_kwargs: the env's keyword arguments in the scenario (``env.kwargs``).
        contract: DiscreteModelContract options (:data:`CONTRACT_OPTIONS`): tolerances of
            the family's Newton solves, ``constraint_preserving`` and so on.
    """

    system: MechanicalSystem
    env_id: str
    dt: float
    settings: Mapping[str, Any]
    obs_low: Any
    obs_high: Any
    input_low: Any
    input_high: Any
    data: Dataset | None = None
    calibration: Dataset | None = None
    heldout: Dataset | None = None
    env_kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    contract: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.system, MechanicalSystem):
            raise InputError(
                f"SmallCase.system must be a MechanicalSystem, got {type(self.system).__name__}"
            )
        unknown = sorted(set(self.contract) - set(CONTRACT_OPTIONS))
        if unknown:
            raise InputError(
                f"SmallCase.contract takes the DiscreteModelContract options "
                f"{list(CONTRACT_OPTIONS)}, got {unknown}"
            )
        s = self.system
        for name, size in (
            ("obs_low", s.nq + s.nv),
            ("obs_high", s.nq + s.nv),
            ("input_low", s.nu),
            ("input_high", s.nu),
        ):
            value = np.asarray(getattr(self, name), dtype=np.float64).reshape(-1)
            if value.shape != (size,) or not np.all(np.isfinite(value)):
                raise InputError(
                    f"SmallCase.{name} must be {size} finite numbers ({s.name}), got "
                    f"{getattr(self, name)!r}"
                )
            object.__setattr__(self, name, value)
        for low, high in (("obs_low", "obs_high"), ("input_low", "input_high")):
            if np.any(getattr(self, low) > getattr(self, high)):
                raise InputError(f"SmallCase.{low} exceeds {high} in some entry")


def _num(fn: ca.Function, *args: Any) -> np.ndarray:
    """``fn`` on numbers: its outputs (one or more) as one flat float64 array."""
    out = fn(*args)
    outs = out if isinstance(out, (tuple, list)) else [out]
    return np.concatenate(
        [np.asarray(ca.DM(o).full(), dtype=np.float64).reshape(-1, order="F") for o in outs]
    )


def _fields(model: DiscreteModel) -> frozenset[str]:
    return frozenset(f for f in OPTIONAL_FIELDS if getattr(model, f) is not None)


def _hex(a: np.ndarray) -> list[str]:
    return [float(v).hex() for v in np.asarray(a, dtype=np.float64).reshape(-1)]


def _run_child(args: list[str], what: str) -> dict[str, Any]:
    """Run ``python args`` in a fresh process; the JSON object its last output line holds."""
    done = subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=_CHILD_TIMEOUT
    )
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0 and lines, (
        f"{what} failed (exit {done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    )
    return json.loads(lines[-1])


# the fresh process: load the model, step at the given points, report the training modules
_LOAD_AND_STEP = """
import json, sys
import numpy as np
import vimpc
model = vimpc.load_model(sys.argv[1])
points = json.loads(sys.argv[2])
out = []
for x, u in points:
    x = np.array([float.fromhex(v) for v in x]); u = np.array([float.fromhex(v) for v in u])
    y = np.asarray(model.step(x, u, model.p_default), dtype=np.float64).reshape(-1)
    out.append([float(v).hex() for v in y])
print(json.dumps({"steps": out, "modules": [m for m in MODULES if m in sys.modules]}))
""".replace("MODULES", repr(TRAINING_MODULES))

# the fresh process: `vimpc run` in this process, then report the training modules
_CLI_RUN = """
import json, sys
from vimpc.cli import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "modules": [m for m in MODULES if m in sys.modules]}))
""".replace("MODULES", repr(TRAINING_MODULES))


class ModelFamilyContract(DiscreteModelContract):
    """Inheritable checks that a registered model family keeps the family contract.

    A subclass sets :attr:`family_name` and :attr:`small_cases` (see
    :meth:`for_registry`). Every ``test_*`` method of :class:`DiscreteModelContract` runs on
    the exported model of the family's small case, with the case's contract options.
    """

    #: the registered name of the family under test
    family_name: ClassVar[str]
    #: family name -> function returning its :class:`SmallCase`
    small_cases: ClassVar[Mapping[str, Callable[[], SmallCase]]] = {}
    #: how many random points the bit-exactness checks use
    n_points: ClassVar[int] = 5
    #: a family's bound comes through Bound.apply: NaN at a NaN or inf argument
    bound_nan_at_nonfinite = True

    # ---- parametrisation over the registry ------------------------------------------------

    @classmethod
    def for_family(
        cls, name: str, small_cases: Mapping[str, Callable[[], SmallCase]]
    ) -> type[ModelFamilyContract]:
        """A test class (``Test...``) of this suite for the family registered as ``name``."""
        title = "".join(part.capitalize() for part in name.split("_"))
        return type(
            f"Test{title}FamilyContract",
            (cls,),
            {"family_name": name, "small_cases": dict(small_cases), "__module__": cls.__module__},
        )

    @classmethod
    def for_registry(
        cls, small_cases: Mapping[str, Callable[[], SmallCase]]
    ) -> dict[str, type[ModelFamilyContract]]:
        """One test class per family of :data:`vimpc.models.registry.FAMILIES`, by class
        name (for a test module's ``globals()``)."""
        from vimpc.models.registry import FAMILIES

        classes = [cls.for_family(name, small_cases) for name in sorted(FAMILIES)]
        return {c.__name__: c for c in classes}

    # ---- the shared fixture (once per test class) ------------------------------------------

    def family_class(self) -> type:
        from vimpc.models.registry import family

        return family(self.family_name)

    def _cached(self, key: str, make: Callable[[], Any]) -> Any:
        cls = type(self)
        store = cls.__dict__.get("_family_contract_cache")
        if store is None:
            store = {}
            cls._family_contract_cache = store
        if key not in store:
            store[key] = make()
        return store[key]

    def _case(self) -> SmallCase:
        return self._cached("case", self._make_case)

    def _make_case(self) -> SmallCase:
        name = getattr(type(self), "family_name", None)
        assert name is not None, f"{type(self).__name__} must set family_name"
        cls = self.family_class()
        make = self.small_cases.get(name) or getattr(cls, "small_case", None)
        assert make is not None, (
            f"model family {name!r} ({cls.__module__}.{cls.__name__}) is registered in "
            f"vimpc.models.registry.FAMILIES but has no small case for the family contract: "
            f"add an entry {name!r} to SMALL_CASES in tests/models/test_family_contract.py (a "
            f"function returning vimpc.testing.SmallCase: an env id, a tiny dataset and small "
            f"settings that fit in a few seconds), or a classmethod small_case() returning one "
            f"on {cls.__name__}"
        )
        case = make()
        assert isinstance(case, SmallCase), (
            f"the small case of {name!r} must be a vimpc.testing.SmallCase, got "
            f"{type(case).__name__}"
        )
        return case

    def new_family(self, **extra: Any) -> Any:
        """An unfitted family of the small case (``extra`` settings added)."""
        case = self._case()
        return self.family_class()(case.system, case.dt, **{**case.settings, **extra})

    def _fit_once(self) -> tuple[Any, Any, frozenset[str]]:
        """(the family, what its ``fit`` returned, ``provides()`` before the fit)."""

        def make() -> tuple[Any, Any, frozenset[str]]:
            case = self._case()
            fam = self.new_family()
            before = fam.provides()
            return fam, fam.fit(case.data, case.calibration), before

        return self._cached("fit", make)

    def fitted(self) -> Any:
        return self._fit_once()[0]

    def _saved(self) -> Path:
        """The exported model written to a ``.vimpc`` file (kept for the class)."""

        def make() -> Path:
            from vimpc.model_file import save

            return save(self._model(), self._folder() / f"{self.family_name}.vimpc")

        return self._cached("saved", make)

    def _folder(self) -> Path:
        """A temporary folder for the class's files (removed with the class's cache)."""
        keep = self._cached(
            "folder", lambda: tempfile.TemporaryDirectory(prefix="vimpc-family-contract-")
        )
        return Path(keep.name)

    def _points(self, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
        rng = np.random.default_rng(seed)
        n = self.n_points
        return list(zip(self.sample_states(rng, n), self.sample_inputs(rng, n), strict=True))

    # ---- DiscreteModelContract hooks ---------------------------------------------------------

    def make_model(self) -> DiscreteModel:
        return self.fitted().discrete_model()

    def sample_states(self, rng: np.random.Generator, n: int) -> np.ndarray:
        case, model = self._case(), self._model()
        obs = rng.uniform(case.obs_low, case.obs_high, size=(n, case.obs_low.size))
        return np.array([_num(model.from_obs, o) for o in obs]).reshape(n, model.nx)

    def sample_inputs(self, rng: np.random.Generator, n: int) -> np.ndarray:
        case = self._case()
        return rng.uniform(case.input_low, case.input_high, size=(n, case.input_low.size))

    def heldout_transitions(self, rng: np.random.Generator):
        data = self._case().heldout
        if data is None:
            return None
        model = self._model()
        X, U, Xn = data.pairs("obs")
        state = model.from_obs.map(len(X))
        to_state = lambda A: np.asarray(state(A.T)).T  # noqa: E731
        return to_state(X), U, to_state(Xn)

    # ---- the family contract -----------------------------------------------------------------

    def test_has_small_case(self) -> None:
        """The family has a small case (a registered family without one fails here)."""
        case = self._case()
        fam = self.new_family()
        assert fam.name == self.family_name, (
            f"the family registered as {self.family_name!r} calls itself {fam.name!r}"
        )
        assert case.data is not None or not fam.needs_training_data(), (
            f"family {self.family_name!r} learns from data: its small case must give data"
        )

    def test_fit_returns_self(self) -> None:
        fam, returned, _ = self._fit_once()
        assert returned is fam, (
            f"{type(fam).__name__}.fit must return self, got {type(returned).__name__}"
        )

    def test_use_before_fit(self) -> None:
        """Before ``fit``, a family that needs one raises NotFittedError naming the family
        (``discrete_model()``, ``recalibrate()``); one that needs none exports the same
        model before and after ``fit``. ``fit()`` without data is refused by a family that
        learns, before any work."""
        fam = self.new_family()
        cls_name = type(fam).__name__
        if fam.needs_fit():
            for call, run in (
                ("discrete_model()", fam.discrete_model),
                ("recalibrate()", fam.recalibrate),
            ):
                try:
                    run()
                except NotFittedError as exc:
                    message = str(exc)
                    assert cls_name in message and repr(self.family_name) in message, (
                        f"{call} before fit: the NotFittedError must name {cls_name} and "
                        f"family {self.family_name!r}, got {message!r}"
                    )
                else:
                    raise AssertionError(
                        f"{cls_name}.{call} before fit did not raise NotFittedError "
                        f"(needs_fit() is True)"
                    )
        else:
            assert not fam.needs_training_data(), (
                f"{cls_name}.needs_fit() is False but needs_training_data() is True"
            )
            before = fam.discrete_model()
            after = self._model()
            for x, u in self._points(self.seed + 7):
                a, b = (
                    _num(before.step, x, u, before.p_default),
                    _num(after.step, x, u, after.p_default),
                )
                assert a.tobytes() == b.tobytes(), (
                    f"{cls_name} needs no fit, yet its model before fit steps to {a.tolist()} "
                    f"and after fit to {b.tolist()} at x={x.tolist()}, u={u.tolist()}"
                )
        if fam.needs_training_data():
            try:
                fam.fit(None)
            except InputError as exc:
                assert cls_name in str(exc), f"fit(None) must name {cls_name}, got {exc}"
            else:
                raise AssertionError(f"{cls_name}.fit(None) learned from no data")

    def test_provides_matches_the_exported_model(self) -> None:
        """``provides()`` (known from the settings, before the fit) names exactly the
        optional fields of the exported model, and ``delta`` comes with the bound."""
        fam, _, before = self._fit_once()
        model = self._model()
        exported = _fields(model)
        assert fam.provides() == before, (
            f"provides() changed with the fit: {sorted(before)} before, "
            f"{sorted(fam.provides())} after"
        )
        assert before == exported, (
            f"provides() says {sorted(before)}, the exported model has {sorted(exported)} "
            f"(missing from provides: {sorted(exported - before)}; promised but absent: "
            f"{sorted(before - exported)})"
        )
        assert (model.delta is None) == (model.bound is None), (
            f"delta must come with the bound, got delta={model.delta!r} with bound "
            f"{'present' if model.bound is not None else 'absent'}"
        )
        assert (model.bound_info is None) == (model.bound is None), (
            f"the bound's record must come with the bound, got bound_info="
            f"{model.bound_info!r} with bound "
            f"{'present' if model.bound is not None else 'absent'}"
        )
        if model.bound_info is not None:
            record, settings = model.bound_info, fam.get_settings()
            assert record.delta == settings["delta"], (record.delta, settings["delta"])
            level = settings.get("bound_level", "step")
            horizon = settings.get("bound_horizon") if level == "horizon" else None
            assert (record.level, record.horizon) == (level, horizon), (
                f"the bound's record says level {record.level!r}, horizon {record.horizon!r}; "
                f"the settings ask for {level!r}, {horizon!r}"
            )
            assert record.method == settings["bound"], (
                f"the bound's record names the method {record.method!r}, the setting is "
                f"bound = {settings['bound']!r}"
            )

    def test_save_and_load_are_bit_exact(self) -> None:
        """The saved and loaded model has the same metadata and, for every function, the
        same outputs bit for bit at random arguments (and the same step Jacobian)."""
        from vimpc.model_file import load

        model, loaded = self._model(), load(self._saved())
        for name in ("dt", "nx", "nu", "np", "nobs", "delta", "bound_info"):
            assert getattr(loaded, name) == getattr(model, name), (
                f"{name}: {getattr(model, name)!r} saved, {getattr(loaded, name)!r} loaded"
            )
        for name in ("state_names", "input_names", "param_names"):
            assert tuple(getattr(loaded, name)) == tuple(getattr(model, name)), name
        assert loaded.p_default.tobytes() == np.asarray(model.p_default).tobytes()
        expected_info = json.loads(json.dumps(dict(model.info)))  # tuples as lists
        assert loaded.info == expected_info, (
            f"info differs after loading: {loaded.info!r} != {expected_info!r}"
        )
        rng = np.random.default_rng(self.seed + 11)
        jac_in = [ca.MX.sym(n, model.step.size_in(i)) for i, n in enumerate(ARGUMENTS["step"])]
        for x, u in self._points(self.seed + 3):
            p = model.p_default
            x_next = _num(model.step, x, u, p)
            values = {
                "x": x,
                "u": u,
                "p": p,
                "x_next": x_next + 1e-3 * rng.standard_normal(x_next.shape),
                "obs": _num(model.to_obs, x),
            }
            for name in FUNCTION_FIELDS:
                a, b = getattr(model, name), getattr(loaded, name)
                assert (a is None) == (b is None), f"{name} lost or gained in the file"
                if a is None:
                    continue
                args = [values[k] for k in ARGUMENTS[name]]
                got, want = _num(b, *args), _num(a, *args)
                assert got.tobytes() == want.tobytes(), (
                    f"{name} after loading gives {got.tolist()}, before {want.tolist()} at "
                    f"{dict(zip(ARGUMENTS[name], (v.tolist() for v in args), strict=True))}"
                )
            for wrt in (0, 1):
                jac = [
                    ca.Function("J", jac_in, [ca.jacobian(m.step(*jac_in), jac_in[wrt])])
                    for m in (model, loaded)
                ]
                want, got = (np.asarray(j(x, u, p), dtype=np.float64) for j in jac)
                assert got.tobytes() == want.tobytes(), (
                    f"d step / d {ARGUMENTS['step'][wrt]} after loading differs by "
                    f"{np.max(np.abs(got - want)):.3g} at x={x.tolist()}, u={u.tolist()}"
                )

    def test_loaded_model_steps_without_torch(self) -> None:
        """In a fresh process, loading the file and stepping imports neither torch nor
        gpytorch, and gives the same steps bit for bit as this process."""
        model = self._model()
        points = self._points(self.seed + 5)
        sent = json.dumps([[_hex(x), _hex(u)] for x, u in points])
        out = _run_child(["-c", _LOAD_AND_STEP, str(self._saved()), sent], "load and step")
        assert out["modules"] == [], (
            f"loading a {self.family_name!r} model and stepping it imported {out['modules']}"
        )
        want = [_hex(_num(model.step, x, u, model.p_default)) for x, u in points]
        assert out["steps"] == want, (
            f"the fresh process stepped to {out['steps']}, this one to {want}"
        )

    def test_run_from_the_saved_model_imports_no_torch(self) -> None:
        """``vimpc run`` on a two-step scenario with ``model.path`` set to the saved model
        finishes and imports neither torch nor gpytorch."""
        case = self._case()
        folder = self._folder()
        path = folder / "run_scenario.toml"
        model_table = {"family": self.family_name, "path": str(self._saved()), **case.settings}
        path.write_text(self._scenario_text(model_table, "family_contract_run"), "utf-8")
        args = ["run", str(path), "--out", str(folder / "runs"), "--no-plots", "--quiet"]
        out = _run_child(["-c", _CLI_RUN, *args], "vimpc run")
        assert out["code"] == 0, f"vimpc run exited with {out['code']}"
        assert out["modules"] == [], (
            f"vimpc run with a saved {self.family_name!r} model imported {out['modules']}"
        )
        runs = list((folder / "runs").glob("family_contract_run/*/metrics.json"))
        assert len(runs) == 1, f"vimpc run wrote {len(runs)} metrics.json files, expected 1"
        used = json.loads(runs[0].read_text("utf-8"))["model"].get("path")
        assert used == str(self._saved()), f"the run used the model {used!r}, not the file"

    def test_unknown_settings_are_refused(self) -> None:
        """A misspelt setting is refused naming the key, with a "did you mean"; a key no
        family has, naming it."""
        cls = self.family_class()
        case = self._case()
        key = next(iter(cls.all_settings()))
        for wrong, hint in ((key + "x", f"did you mean {key!r}"), ("no_such_setting", None)):
            try:
                cls(case.system, case.dt, **{**case.settings, wrong: 1})
            except InputError as exc:
                assert repr(wrong) in str(exc), f"the error must name {wrong!r}, got {exc}"
                if hint:
                    assert hint in str(exc), f"the error must say {hint!r}, got {exc}"
            else:
                raise AssertionError(f"{cls.__name__} accepted the unknown setting {wrong!r}")

    def test_settings_round_trip_through_the_scenario(self) -> None:
        """The declared settings are the scenario's ``[model]`` keys: every one has its
        row in the schema tables (``vimpc schema``); a scenario with the case's settings
        resolves to the family's settings, builds a family with the same settings, and its
        resolved file reads back to itself."""
        from vimpc import scenario
        from vimpc.scenario.specs import EnvSpec, build_family

        cls, case = self.family_class(), self._case()
        declared = cls.all_settings()
        markdown = scenario.schema_markdown()
        section = markdown.split(f'### `model.family = "{self.family_name}"`', 1)
        assert len(section) == 2, f"vimpc schema has no table for family {self.family_name!r}"
        table = section[1].split("###", 1)[0]
        missing = [k for k in declared if f"| `model.{k}` |" not in table]
        assert not missing, f"vimpc schema's {self.family_name!r} table lacks {missing}"
        folder = self._folder()
        first = folder / "settings_scenario.toml"
        model_table = {"family": self.family_name, **case.settings}
        first.write_text(self._scenario_text(model_table, "family_contract_settings"), "utf-8")
        cfg = scenario.load_scenario(first)
        given = self.new_family().get_settings()
        assert list(given) == list(declared), (
            f"get_settings() keys {list(given)} differ from the declaration {list(declared)}"
        )
        resolved = cfg.model.settings.to_dict()  # the family's own settings, plain
        assert resolved == given, f"the scenario resolved to {resolved}, the family has {given}"
        built = build_family(cfg, EnvSpec(cfg).nominal)
        assert type(built) is cls and built.get_settings() == given, (
            f"the scenario built {built!r}, expected the settings {given}"
        )
        again = folder / "settings_scenario_again.toml"
        again.write_text(scenario.dump_toml(cfg), "utf-8")
        assert scenario.load_scenario(again) == cfg, "the resolved scenario did not read back"

    def test_fit_is_deterministic(self) -> None:
        """A second fit on the same data with the same settings (seed included) gives the
        same step and bound bit for bit."""
        case = self._case()
        first = self._model()
        second = self.new_family().fit(case.data, case.calibration).discrete_model()
        for x, u in self._points(self.seed + 13):
            p = first.p_default
            for name in ("step", "bound"):
                a, b = getattr(first, name), getattr(second, name)
                assert (a is None) == (b is None), f"{name} present in one fit only"
                if a is None:
                    continue
                one, two = _num(a, x, u, p), _num(b, x, u, p)
                assert one.tobytes() == two.tobytes(), (
                    f"two fits of {self.family_name!r} give {name} {one.tolist()} and "
                    f"{two.tolist()} at x={x.tolist()}, u={u.tolist()}"
                )

    # ---- helpers -------------------------------------------------------------------------------

    def _scenario_text(self, model_table: Mapping[str, Any], name: str) -> str:
        """A two-step scenario of the case's env with ``model_table`` as ``[model]``."""
        from vimpc.scenario import dump_toml

        case = self._case()
        s = case.system
        raw = {
            "scenario": {"name": name},
            "env": {"id": case.env_id, "dt": case.dt, "kwargs": dict(case.env_kwargs)},
            "data": {},
            "model": dict(model_table),
            "controller": {
                "horizon": 3,
                "transcription": "step",
                "cost": {"Q": [1.0] * (s.nq + s.nv), "R": [0.01] * s.nu},
                "constraints": {},
            },
            "episodes": {"count": 1, "steps": 2, "seed": 0},
            "metrics": {},
        }
        return dump_toml(raw)


def _option(name: str) -> property:
    default = getattr(DiscreteModelContract, name)

    def get(self: ModelFamilyContract) -> Any:
        return self._case().contract.get(name, default)

    get.__doc__ = f"``{name}`` of the small case's ``contract`` (default {default!r})."
    return property(get)


# the small case sets DiscreteModelContract's tolerances and flags
for _name in CONTRACT_OPTIONS:
    setattr(ModelFamilyContract, _name, _option(_name))
del _name
