"""The one contract between models and controllers: :class:`DiscreteModel`.

Every model, analytic or learned, ends as a frozen record of CasADi functions.
The controller, the metrics and the export see nothing else. This module imports
nothing of vimpc.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import tempfile
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import casadi as ca
import numpy as np

#: The marker every DiscreteModel file carries in its ``"format"`` key.
FILE_FORMAT = "vimpc.DiscreteModel/1"
#: The suffix of DiscreteModel files.
FILE_SUFFIX = ".vimpc"
_FORMAT_FAMILY = "vimpc.DiscreteModel/"
_FUNCTION_FIELDS = ("step", "residual", "bound", "from_obs", "to_obs", "constraint")
_REQUIRED_FUNCTIONS = ("step", "from_obs", "to_obs")


def _sizes(fn: ca.Function) -> tuple[list[int], list[int]]:
    return (
        [fn.size1_in(i) * fn.size2_in(i) for i in range(fn.n_in())],
        [fn.size1_out(i) * fn.size2_out(i) for i in range(fn.n_out())],
    )


def _expect(name: str, fn: ca.Function | None, ins: list[int], outs: list[int]) -> None:
    if fn is None:
        return
    if not isinstance(fn, ca.Function):
        raise TypeError(f"DiscreteModel.{name} must be a casadi.Function, got {type(fn).__name__}")
    got_in, got_out = _sizes(fn)
    if got_in != ins or got_out[: len(outs)] != outs or len(got_out) != len(outs):
        raise ValueError(
            f"DiscreteModel.{name} must map inputs of sizes {ins} to outputs of sizes {outs}, "
            f"got inputs {got_in} and outputs {got_out}"
        )


@dataclass(frozen=True)
class DiscreteModel:
    """Discrete-time dynamics ``x_next = step(x, u, p)`` as CasADi functions.

    Fields (see DESIGN.md, "The one contract"):
        dt: the model's step in seconds.
        nx, nu, np: state, input and parameter sizes.
        nobs: size of the environment observation ``(q, v)``.
        step: ``(x, u, p) -> x_next``; implicit integrators solve inside
            (rootfinder, derivatives by the implicit function theorem).
        residual: ``(x, u, x_next, p) -> r`` for implicit models; ``r == 0``
            exactly when ``x_next == step(x, u, p)``. ``None`` otherwise.
        bound: ``(x, u, p) -> e``, elementwise bound on the one-step error that
            holds with probability at least ``1 - delta``. ``None`` if absent.
        from_obs, to_obs: ``obs -> x`` and ``x -> obs``.
        constraint: ``x -> g``, holonomic constraint residual, or ``None``.
        state_names, input_names, param_names: for plots and messages.
        p_default: parameter values to use when the caller has none.
        info: free-form provenance (system, integrator, data, fit settings).

    A model saves to and loads from one ``.vimpc`` file (:meth:`save`, :meth:`load`), a
    JSON document that any CasADi program can read without vimpc; see :meth:`save` for
    the format and for generating C code.
    """

    dt: float
    nx: int
    nu: int
    np: int
    nobs: int
    step: ca.Function
    from_obs: ca.Function
    to_obs: ca.Function
    state_names: tuple[str, ...]
    input_names: tuple[str, ...]
    param_names: tuple[str, ...] = ()
    residual: ca.Function | None = None
    bound: ca.Function | None = None
    constraint: ca.Function | None = None
    p_default: np.ndarray = field(default_factory=lambda: np.zeros(0))
    info: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not (isinstance(self.dt, (int, float)) and self.dt > 0 and np.isfinite(self.dt)):
            raise ValueError(f"DiscreteModel.dt must be a positive finite float, got {self.dt!r}")
        for name in ("nx", "nu", "np", "nobs"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or value < 0:
                raise ValueError(f"DiscreteModel.{name} must be a non-negative int, got {value!r}")
        nx, nu, npar = self.nx, self.nu, self.np
        _expect("step", self.step, [nx, nu, npar], [nx])
        _expect("residual", self.residual, [nx, nu, nx, npar], [nx])
        _expect("bound", self.bound, [nx, nu, npar], [nx])
        _expect("from_obs", self.from_obs, [self.nobs], [nx])
        _expect("to_obs", self.to_obs, [nx], [self.nobs])
        if self.constraint is not None:
            _expect("constraint", self.constraint, [nx], [self.constraint.size1_out(0)])
        for name, size in (
            ("state_names", nx),
            ("input_names", nu),
            ("param_names", npar),
        ):
            names = getattr(self, name)
            if len(names) != size:
                raise ValueError(f"DiscreteModel.{name} must have {size} entries, got {names!r}")
        p_default = np.asarray(self.p_default, dtype=np.float64).reshape(-1)
        if p_default.shape != (npar,):
            raise ValueError(
                f"DiscreteModel.p_default must have shape ({npar},), got {p_default.shape}"
            )
        object.__setattr__(self, "p_default", p_default)
        object.__setattr__(self, "info", MappingProxyType(dict(self.info)))

    @property
    def implicit(self) -> bool:
        """True when the model carries the integrator's residual."""
        return self.residual is not None

    def save(self, path: str | os.PathLike[str], *, overwrite: bool = False) -> Path:
        """Write the model to one ``.vimpc`` file; returns its path.

        The write is atomic (a temporary file in the same directory, then renamed), and
        an existing file is replaced only with ``overwrite=True``.

        Raises:
            ValueError: ``path`` does not end in ``.vimpc``.
            FileExistsError: ``path`` exists and ``overwrite`` is false.
            TypeError: ``info`` holds something JSON cannot carry (the key is named).

        File format: UTF-8 JSON text, one object with

        - ``"format": "vimpc.DiscreteModel/1"`` (the marker; checked on load),
        - ``"casadi_version"``: the CasADi that wrote the functions,
        - ``"dt"``, ``"nx"``, ``"nu"``, ``"np"``, ``"nobs"``: numbers,
        - ``"state_names"``, ``"input_names"``, ``"param_names"``: lists of str,
        - ``"p_default"``: list of float,
        - ``"info"``: the provenance mapping (system, integrator, data, fit settings) as
          plain JSON; tuples come back as lists,
        - ``"functions"``: for each of ``step``, ``residual``, ``bound``, ``from_obs``,
          ``to_obs``, ``constraint`` either ``null`` or
          ``{"serialized": <casadi.Function.serialize() text>, "sha256": <hex digest of
          that text>}``.

        Any CasADi program (Python, C++, MATLAB) reads the file with its JSON library
        and calls ``casadi.Function.deserialize(doc["functions"]["step"]["serialized"])``
        (C++: ``casadi::Function::deserialize``), which gives a Function that evaluates
        and differentiates (the rootfinder of an implicit step included). Serialised
        functions are tied to CasADi's serialisation version; ``"casadi_version"`` says
        which CasADi to read them with if a newer one refuses. A function whose deserialised copy CasADi
        cannot differentiate (CasADi up to at least 3.8 rebuilds an SX function that
        calls another function, such as the Newton rootfinder inside a variational step,
        into one whose derivatives fail with "Duplicate") is stored expanded and inlined
        into an MX graph around the same inner calls: the same operations, so the same
        numbers, and derivatives work.

        C code: there is no export method, because CasADi's own code generation works
        on the functions: ``model.step.generate("step.c")`` or
        ``casadi.CodeGenerator("model.c")`` with ``add(model.step)``,
        ``add(model.step.jacobian())``, ``add(model.residual)``. This works for steps
        built on the ``fast_newton`` rootfinder (every vimpc variational model: the
        Newton loop and its dense LU are emitted as plain C, and derivatives through it
        by the implicit function theorem) and for explicit steps; a function built on a
        rootfinder plugin without code-generation support makes ``generate`` fail. A
        loaded model generates code the same way. Compile with e.g.
        ``gcc -fPIC -shared -O2 step.c -o step.so -lm`` and call through
        ``casadi.external("step", "./step.so")`` or from C via the generated
        ``step(arg, res, iw, w, mem)`` and ``step_work`` entry points.
        """
        target = _model_path(path)
        if not overwrite and target.exists():
            raise FileExistsError(f"{target} already exists; pass overwrite=True to replace it")
        text = json.dumps(self._to_document(), indent=2, allow_nan=False) + "\n"
        _write_atomic(target, text, overwrite)
        return target

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> DiscreteModel:
        """Read a model written by :meth:`save`.

        Raises:
            ValueError: ``path`` does not end in ``.vimpc``; the file is not a vimpc model
                file, has an unsupported format version, or is corrupt.
            FileNotFoundError: there is no such file.
        """
        source = _model_path(path)
        try:
            doc = json.loads(source.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"{source} is not a vimpc model file: not JSON text ({exc})") from None
        if not isinstance(doc, dict) or "format" not in doc:
            raise ValueError(
                f"{source} is not a vimpc model file: no 'format' marker (expected {FILE_FORMAT!r})"
            )
        fmt = doc["format"]
        if fmt != FILE_FORMAT:
            if isinstance(fmt, str) and fmt.startswith(_FORMAT_FAMILY):
                raise ValueError(
                    f"{source}: unsupported DiscreteModel file format {fmt!r}; "
                    f"this vimpc reads {FILE_FORMAT!r}"
                )
            raise ValueError(
                f"{source} is not a vimpc model file: format is {fmt!r}, expected {FILE_FORMAT!r}"
            )
        return cls._from_document(doc, source)

    def _to_document(self) -> dict[str, Any]:
        info = _json_info(self.info)
        p_default = [float(v) for v in self.p_default]
        if not all(math.isfinite(v) for v in p_default):
            raise ValueError(f"DiscreteModel.p_default must be finite to be saved, got {p_default}")
        functions: dict[str, Any] = {}
        for name in _FUNCTION_FIELDS:
            fn = getattr(self, name)
            if fn is None:
                functions[name] = None
            else:
                text = _serialize(name, fn)
                functions[name] = {"serialized": text, "sha256": _digest(text)}
        return {
            "format": FILE_FORMAT,
            "casadi_version": ca.__version__,
            "dt": float(self.dt),
            "nx": int(self.nx),
            "nu": int(self.nu),
            "np": int(self.np),
            "nobs": int(self.nobs),
            "state_names": [str(n) for n in self.state_names],
            "input_names": [str(n) for n in self.input_names],
            "param_names": [str(n) for n in self.param_names],
            "p_default": p_default,
            "info": info,
            "functions": functions,
        }

    @classmethod
    def _from_document(cls, doc: dict[str, Any], source: Path) -> DiscreteModel:
        def get(key: str, kind: type | tuple[type, ...], what: str) -> Any:
            if key not in doc:
                raise ValueError(f"{source} is corrupt: key {key!r} is missing")
            value = doc[key]
            if not isinstance(value, kind) or isinstance(value, bool):
                raise ValueError(f"{source} is corrupt: {key!r} must be {what}, got {value!r:.80}")
            return value

        def names(key: str) -> tuple[str, ...]:
            value = get(key, list, "a list of str")
            if not all(isinstance(v, str) for v in value):
                raise ValueError(f"{source} is corrupt: {key!r} must be a list of str")
            return tuple(value)

        p_default = get("p_default", list, "a list of numbers")
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in p_default):
            raise ValueError(f"{source} is corrupt: 'p_default' must be a list of numbers")
        functions = get("functions", dict, "an object")
        fns = {
            name: _deserialize(source, name, functions.get(name), doc.get("casadi_version"))
            for name in _FUNCTION_FIELDS
        }
        for name in _REQUIRED_FUNCTIONS:
            if fns[name] is None:
                raise ValueError(f"{source} is corrupt: function {name!r} is missing")
        try:
            return cls(
                dt=float(get("dt", (int, float), "a number")),
                nx=get("nx", int, "an int"),
                nu=get("nu", int, "an int"),
                np=get("np", int, "an int"),
                nobs=get("nobs", int, "an int"),
                state_names=names("state_names"),
                input_names=names("input_names"),
                param_names=names("param_names"),
                p_default=np.asarray(p_default, dtype=np.float64),
                info=get("info", dict, "an object"),
                **fns,
            )
        except (TypeError, ValueError) as exc:
            if str(exc).startswith(str(source)):
                raise
            raise ValueError(f"{source} is corrupt: {exc}") from exc

    def simulate(self, x0: Any, inputs: Any, p: Any = None) -> np.ndarray:
        """Roll ``step`` forward from ``x0`` under ``inputs`` (shape ``(N, nu)``); returns
        the ``(N + 1, nx)`` states. A numerical convenience for tests and plots."""
        p = self.p_default if p is None else np.asarray(p, dtype=np.float64)
        inputs = np.asarray(inputs, dtype=np.float64).reshape(-1, self.nu)
        xs = np.empty((len(inputs) + 1, self.nx))
        xs[0] = np.asarray(x0, dtype=np.float64).reshape(self.nx)
        for k, u in enumerate(inputs):
            xs[k + 1] = np.asarray(self.step(xs[k], u, p)).reshape(self.nx)
        return xs


# -- files ---------------------------------------------------------------------------


def _model_path(path: str | os.PathLike[str]) -> Path:
    target = Path(os.fspath(path))
    if target.suffix != FILE_SUFFIX:
        raise ValueError(
            f"{target}: a DiscreteModel file must have the suffix {FILE_SUFFIX!r}, "
            f"got {target.suffix or 'none'!r}"
        )
    return target


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def _json_problem(value: Any, where: str) -> str | None:
    """Where ``value`` stops being plain JSON (``None`` if it is)."""
    if value is None or isinstance(value, (str, bool, int)):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{where} is the non-finite float {value!r}"
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            problem = _json_problem(item, f"{where}[{i}]")
            if problem:
                return problem
        return None
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{where} has the non-str key {key!r}"
            problem = _json_problem(item, f"{where}[{key!r}]")
            if problem:
                return problem
        return None
    return f"{where} is a {type(value).__name__} ({value!r:.60})"


def _json_info(info: Mapping[str, Any]) -> dict[str, Any]:
    for key, value in info.items():
        if not isinstance(key, str):
            raise TypeError(f"DiscreteModel.info key {key!r} is not a str, so it cannot be saved")
        problem = _json_problem(value, f"info[{key!r}]")
        if problem:
            raise TypeError(
                f"DiscreteModel.info[{key!r}] is not JSON-serialisable: {problem}; use "
                "str, int, float, bool, None, lists and str-keyed dicts (numpy values: "
                ".tolist() or float())"
            )
    return json.loads(json.dumps(dict(info), allow_nan=False))


def _differentiable(fn: ca.Function) -> bool:
    try:
        fn.forward(1)
        fn.reverse(1)
    except RuntimeError:
        return False
    return True


def _inlined(fn: ca.Function) -> ca.Function:
    """``fn`` expanded to scalar operations and inlined into MX, inner calls kept."""
    expanded = fn.expand()
    args = fn.mx_in()
    return ca.Function(
        fn.name(), args, expanded.call(args, True, False), fn.name_in(), fn.name_out()
    )


def _serialize(name: str, fn: ca.Function) -> str:
    """``fn.serialize()``, or that of an equivalent function whose deserialised copy
    CasADi can differentiate (see :meth:`DiscreteModel.save`)."""
    text = fn.serialize()
    if _differentiable(ca.Function.deserialize(text)):
        return text
    with contextlib.suppress(RuntimeError):
        inlined = _inlined(fn).serialize()
        if _differentiable(ca.Function.deserialize(inlined)):
            return inlined
    warnings.warn(
        f"DiscreteModel.{name}: CasADi cannot differentiate the function it deserialises "
        "from this model; it is saved as is, so the loaded copy evaluates but has no "
        "derivatives",
        RuntimeWarning,
        stacklevel=4,
    )
    return text


def _deserialize(source: Path, name: str, entry: Any, version: Any) -> ca.Function | None:
    if entry is None:
        return None
    if not (
        isinstance(entry, dict)
        and isinstance(entry.get("serialized"), str)
        and isinstance(entry.get("sha256"), str)
    ):
        raise ValueError(
            f"{source} is corrupt: function {name!r} must be null or an object with "
            "'serialized' and 'sha256' strings"
        )
    text = entry["serialized"]
    if not text.isascii() or _digest(text) != entry["sha256"]:
        raise ValueError(
            f"{source} is corrupt: function {name!r} does not match its sha256 checksum"
        )
    try:
        fn = ca.Function.deserialize(text)
    except RuntimeError as exc:
        detail = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        raise ValueError(
            f"{source}: CasADi {ca.__version__} cannot deserialise function {name!r} "
            f"(written by CasADi {version}): {detail}"
        ) from None
    if fn.is_null():
        raise ValueError(f"{source} is corrupt: function {name!r} is empty")
    return fn


def _write_atomic(target: Path, text: str, overwrite: bool) -> None:
    """Write ``text`` to ``target`` through a temporary file in the same directory."""
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        if overwrite:
            os.replace(tmp, target)
            return
        try:
            os.link(tmp, target)  # atomic and never replaces an existing file
        except FileExistsError:
            raise FileExistsError(
                f"{target} already exists; pass overwrite=True to replace it"
            ) from None
        except OSError:  # no hard links on this file system
            if target.exists():
                raise FileExistsError(
                    f"{target} already exists; pass overwrite=True to replace it"
                ) from None
            os.replace(tmp, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
