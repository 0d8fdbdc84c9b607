"""The ``.vimpc`` file: one :class:`~vimpc.dynamics.DiscreteModel` as a JSON document.

File format ``vimpc.DiscreteModel/3``: UTF-8 JSON text, one object with

- ``"format": "vimpc.DiscreteModel/3"`` (the marker; checked on load),
- ``"casadi_version"``: the CasADi that wrote the functions,
- ``"dt"``, ``"nx"``, ``"nu"``, ``"np"``, ``"nobs"``: numbers,
- ``"state_names"``, ``"input_names"``, ``"param_names"``: lists of str,
- ``"p_default"``: list of float,
- ``"delta"``: the bound's probability of failure, or ``null`` for a model without a bound,
- ``"bound_info"``: the bound's record (:class:`~vimpc.dynamics.BoundInfo`), or ``null``
  for a model without a bound: ``{"delta", "level", "horizon", "method",
  "calibrated_on", "extra"}``, ``"extra"`` an object of the family's figures,
- ``"info"``: the provenance mapping (system, integrator, data, fit settings) as plain
  JSON; tuples come back as lists,
- ``"functions"``: for each of ``step``, ``residual``, ``residual_jacobian``, ``bound``,
  ``energy``, ``from_obs``, ``to_obs``, ``constraint``, ``velocity_constraint`` either ``null`` or
  ``{"serialized": <casadi.Function.serialize() text>}``,
- ``"sha256"``: the hex digest of the whole document without this key, written as
  ``json.dumps(doc, sort_keys=True, separators=(",", ":"))``, so an edit anywhere (a
  changed ``dt``, swapped names, a function from another model) is refused on load.

Format ``vimpc.DiscreteModel/2`` (written before the bound had its record) is read too: it
has no ``"bound_info"``, and its ``info["bound"]`` (what
:meth:`vimpc.models.calibration.Bound.describe` gave) becomes the record
(:func:`bound_info_from_v2`) and leaves ``info``.

Any CasADi program (Python, C++, MATLAB) reads the file with its JSON library and calls
``casadi.Function.deserialize(doc["functions"]["step"]["serialized"])`` (C++:
``casadi::Function::deserialize``), which gives a Function that evaluates and
differentiates (the rootfinder of an implicit step included). Serialised functions are tied
to CasADi's serialisation version; ``"casadi_version"`` says which CasADi to read them with
if a newer one refuses. A function whose deserialised copy CasADi cannot differentiate
(CasADi up to at least 3.8 rebuilds an SX function that calls another function, such as the
Newton rootfinder inside a variational step, into one whose derivatives fail with
"Duplicate") is stored expanded and inlined into an MX graph around the same inner calls:
the same operations, so the same numbers, and derivatives work.

C code: :func:`vimpc.export_c.export_c` (``vimpc export MODEL.vimpc --c DIR``) writes a
model's ``step``, ``residual`` and ``bound`` with their Jacobians as self-contained C99
sources with one header, a Makefile and an example ``main.c``. It is CasADi's own code
generation (``casadi.CodeGenerator`` with ``with_header``), which works for steps built on the
``fast_newton`` rootfinder (every vimpc variational model: the Newton loop and its dense LU
are emitted as plain C, and derivatives through it by the implicit function theorem) and for
explicit steps; a loaded model generates code the same way. The library loads in CasADi with
``casadi.external("step", "./libmodel.so")``, and C calls the generated ``step(arg, res, iw,
w, mem)`` and ``step_work`` entry points.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import casadi as ca
import numpy as np

from vimpc._files import write_atomic
from vimpc.dynamics import FUNCTION_FIELDS, BoundInfo, DiscreteModel
from vimpc.errors import InputError, OutputExistsError

#: The marker every DiscreteModel file carries in its ``"format"`` key.
FILE_FORMAT = "vimpc.DiscreteModel/3"
#: The earlier formats :func:`load` still reads (the bound's record then comes from
#: ``info["bound"]``).
READ_FORMATS = (FILE_FORMAT, "vimpc.DiscreteModel/2")
#: The suffix of DiscreteModel files.
FILE_SUFFIX = ".vimpc"
_FORMAT_FAMILY = "vimpc.DiscreteModel/"
_REQUIRED_FUNCTIONS = ("step", "from_obs", "to_obs")


def save(model: DiscreteModel, path: str | os.PathLike[str], *, overwrite: bool = False) -> Path:
    """Write ``model`` to one ``.vimpc`` file (format in the module docstring); returns its path.

    The write is atomic (a temporary file in the same directory, then renamed), and an
    existing file is replaced only with ``overwrite=True``.

    Raises:
        InputError: ``path`` is not a path, does not end in ``.vimpc``, is a directory, or
            its folder does not exist or cannot be written (the message names ``path``).
        OutputExistsError: ``path`` exists and ``overwrite`` is false (a ``FileExistsError``).
        TypeError: ``info`` holds something JSON cannot carry (the key is named).
    """
    if not isinstance(model, DiscreteModel):
        raise TypeError(f"model must be a DiscreteModel, got {type(model).__name__}")
    if not isinstance(overwrite, bool):
        raise InputError(f"overwrite must be True or False, got {overwrite!r}")
    target = _model_path(path, "save the model to")
    if not overwrite and target.exists():
        raise OutputExistsError(
            f"cannot save the model to {str(target)!r}: that file already exists and is kept; "
            "pass overwrite=True to replace it (save_model(model, path, overwrite=True)), or "
            "give another path"
        )
    folder = target.parent
    if not folder.exists():
        missing = folder
        while not missing.parent.exists() and missing.parent != missing:
            missing = missing.parent
        below = f" ({str(missing)!r} is missing)" if missing != folder else ""
        raise InputError(
            f"cannot save the model to {str(target)!r}: the folder {str(folder)!r} does not "
            f"exist{below}; create it first"
        )
    if not folder.is_dir():
        raise InputError(
            f"cannot save the model to {str(target)!r}: {str(folder)!r} is a file, not a folder"
        )
    doc = document(model)
    text = json.dumps(doc, indent=1, allow_nan=False) + "\n"
    try:
        return write_atomic(target, text, overwrite=overwrite)
    except FileExistsError:
        raise
    except OSError as exc:
        raise InputError(
            f"cannot save the model to {str(target)!r}: writing in the folder {str(folder)!r} "
            f"failed: {exc.strerror or type(exc).__name__}"
        ) from None


def load(path: str | os.PathLike[str]) -> DiscreteModel:
    """Read a model written by :func:`save`.

    Raises:
        InputError: ``path`` is not a path, does not end in ``.vimpc``, is a directory, does
            not exist or cannot be read; the file is empty, not a vimpc model file, has an
            unsupported format version, or is corrupt (its checksum does not match).
    """
    source = _model_path(path, "load a model from")
    if not source.exists():
        raise InputError(f"model file {str(source)!r} does not exist")
    try:
        text = source.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{source} is not a vimpc model file: not UTF-8 text") from None
    except OSError as exc:
        raise InputError(
            f"model file {str(source)!r} cannot be read: {exc.strerror or exc}"
        ) from None
    if not text.strip():
        raise InputError(f"{source} is not a vimpc model file: the file is empty")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{source} is not a vimpc model file: not JSON text ({exc})") from None
    if not isinstance(doc, dict) or "format" not in doc:
        raise InputError(
            f"{source} is not a vimpc model file: no 'format' marker (expected {FILE_FORMAT!r})"
        )
    fmt = doc["format"]
    if fmt not in READ_FORMATS:
        if isinstance(fmt, str) and fmt.startswith(_FORMAT_FAMILY):
            raise InputError(
                f"{source}: unsupported DiscreteModel file format {fmt!r}; "
                f"this vimpc reads {' and '.join(map(repr, READ_FORMATS))}"
            )
        raise InputError(
            f"{source} is not a vimpc model file: format is {fmt!r}, expected {FILE_FORMAT!r}"
        )
    stored = doc.pop("sha256", None)
    if not isinstance(stored, str) or stored != _document_digest(doc):
        raise InputError(
            f"{source} is corrupt: the document does not match its sha256 checksum (the file "
            "was edited or truncated after it was written)"
        )
    return _from_document(doc, source)


def document(model: DiscreteModel) -> dict[str, Any]:
    """The JSON document of ``model``, checksum included."""
    info = _json_info(model.info)
    p_default = [float(v) for v in model.p_default]
    if not all(math.isfinite(v) for v in p_default):
        raise InputError(f"DiscreteModel.p_default must be finite to be saved, got {p_default}")
    functions: dict[str, Any] = {}
    for name in FUNCTION_FIELDS:
        fn = getattr(model, name)
        functions[name] = None if fn is None else {"serialized": _serialize(name, fn)}
    doc = {
        "format": FILE_FORMAT,
        "casadi_version": ca.__version__,
        "dt": float(model.dt),
        "nx": int(model.nx),
        "nu": int(model.nu),
        "np": int(model.np),
        "nobs": int(model.nobs),
        "state_names": [str(n) for n in model.state_names],
        "input_names": [str(n) for n in model.input_names],
        "param_names": [str(n) for n in model.param_names],
        "p_default": p_default,
        "delta": model.delta,
        "bound_info": None if model.bound_info is None else _bound_document(model.bound_info),
        "info": info,
        "functions": functions,
    }
    doc["sha256"] = _document_digest(doc)
    return doc


def _bound_document(record: BoundInfo) -> dict[str, Any]:
    doc = record.as_dict()
    names = ("delta", "level", "horizon", "method", "calibrated_on")
    return {**{k: doc[k] for k in names}, "extra": {k: v for k, v in doc.items() if k not in names}}


def bound_info_from_v2(
    described: Mapping[str, Any] | None, delta: float | None, info: Mapping[str, Any]
) -> BoundInfo | None:
    """The bound's record of a format-2 file: from its ``info["bound"]`` (``described``,
    what :meth:`vimpc.models.calibration.Bound.describe` gave), the same record the bound
    gives now (:meth:`~vimpc.models.calibration.Bound.record`): ``level`` (``"step"``
    when absent) and ``horizon``; as method ``"conformal"`` for a conformal bound, else
    the family's ``bound`` setting (``info["settings"]``); ``calibrated_on`` the fit's
    ``info["fit"]["calibration"]`` for a conformal bound (``"heldout"`` when absent),
    ``"training"`` for a theorem's; in ``extra`` the other figures, the description
    (``method``) as ``"description"``. A model with a bound that recorded nothing of it
    (``delta`` without ``described``: a bound given by hand) gets a step-level record,
    method ``"unrecorded"``, calibrated on ``"assumed"``. ``None`` without ``delta``.
    """
    if delta is None:
        return None
    if not isinstance(described, Mapping):
        return BoundInfo(delta, "step", None, "unrecorded", "assumed")
    figures = dict(described)
    description = figures.pop("method", None)
    obtained = figures.get("obtained")
    figures.pop("delta", None)
    level = figures.pop("level", "step")
    horizon = figures.pop("horizon", None)
    settings = info.get("settings")
    fit = info.get("fit")
    if obtained == "theorem":
        named = settings.get("bound") if isinstance(settings, Mapping) else None
        method, on = (named if isinstance(named, str) and named else "theorem"), "training"
    else:
        method = "conformal" if obtained == "conformal" else str(obtained or "unrecorded")
        on = fit.get("calibration") if isinstance(fit, Mapping) else None
        on = on if on in ("heldout", "closed_loop") else "heldout"
    extra = figures if description is None else {"description": description, **figures}
    return BoundInfo(delta, level, horizon, method, on, extra)


_BOUND_KEYS = ("delta", "level", "horizon", "method", "calibrated_on", "extra")


def _bound_from_document(record: Any) -> BoundInfo | None:
    if record is None:
        return None
    if not isinstance(record, dict) or set(record) != set(_BOUND_KEYS):
        keys = sorted(record) if isinstance(record, dict) else type(record).__name__
        raise InputError(f"'bound_info' must be null or an object with the keys {_BOUND_KEYS}, "
                         f"got {keys}")  # fmt: skip
    if not isinstance(record["extra"], dict):
        raise InputError(f"'extra' must be an object, got {record['extra']!r:.80}")
    return BoundInfo(**record)


def _document_digest(doc: dict[str, Any]) -> str:
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _from_document(doc: dict[str, Any], source: Path) -> DiscreteModel:
    def get(key: str, kind: type | tuple[type, ...], what: str) -> Any:
        if key not in doc:
            raise InputError(f"{source} is corrupt: key {key!r} is missing")
        value = doc[key]
        if not isinstance(value, kind) or isinstance(value, bool):
            raise InputError(f"{source} is corrupt: {key!r} must be {what}, got {value!r:.80}")
        return value

    def names(key: str) -> tuple[str, ...]:
        value = get(key, list, "a list of str")
        if not all(isinstance(v, str) for v in value):
            raise InputError(f"{source} is corrupt: {key!r} must be a list of str")
        return tuple(value)

    p_default = get("p_default", list, "a list of numbers")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in p_default):
        raise InputError(f"{source} is corrupt: 'p_default' must be a list of numbers")
    delta = doc.get("delta")
    if delta is not None and (isinstance(delta, bool) or not isinstance(delta, (int, float))):
        raise InputError(f"{source} is corrupt: 'delta' must be a number or null, got {delta!r}")
    info = get("info", dict, "an object")
    try:
        if doc["format"] == FILE_FORMAT:
            bound_info = _bound_from_document(doc.get("bound_info"))
        else:  # format 2: the record is what info["bound"] described
            info = dict(info)
            bound_info = bound_info_from_v2(info.pop("bound", None), delta, info)
    except InputError as exc:
        raise InputError(f"{source} is corrupt: its bound's record: {exc}") from None
    functions = get("functions", dict, "an object")
    fns = {
        name: _deserialize(source, name, functions.get(name), doc.get("casadi_version"))
        for name in FUNCTION_FIELDS
    }
    for name in _REQUIRED_FUNCTIONS:
        if fns[name] is None:
            raise InputError(f"{source} is corrupt: function {name!r} is missing")
    try:
        return DiscreteModel(
            dt=float(get("dt", (int, float), "a number")),
            nx=get("nx", int, "an int"),
            nu=get("nu", int, "an int"),
            np=get("np", int, "an int"),
            nobs=get("nobs", int, "an int"),
            state_names=names("state_names"),
            input_names=names("input_names"),
            param_names=names("param_names"),
            p_default=np.asarray(p_default, dtype=np.float64),
            delta=delta,
            bound_info=bound_info,
            info=info,
            **fns,
        )
    except (TypeError, ValueError) as exc:
        if str(exc).startswith(str(source)):
            raise
        raise InputError(f"{source} is corrupt: {exc}") from exc


def _model_path(path: str | os.PathLike[str], doing: str) -> Path:
    if not isinstance(path, (str, os.PathLike)):
        raise InputError(
            f"cannot {doing} {path!r}: the path must be a str or os.PathLike, got "
            f"{type(path).__name__}"
        )
    target = Path(os.fspath(path))
    if target.is_dir():
        raise InputError(
            f"{target} is a directory, not a DiscreteModel file (a file name ending in "
            f"{FILE_SUFFIX!r})"
        )
    if target.suffix != FILE_SUFFIX:
        raise InputError(
            f"{target}: a DiscreteModel file must have the suffix {FILE_SUFFIX!r}, "
            f"got {target.suffix or 'none'!r}"
        )
    return target


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
    CasADi can differentiate (see the module docstring)."""
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
    if not (isinstance(entry, dict) and isinstance(entry.get("serialized"), str)):
        raise InputError(
            f"{source} is corrupt: function {name!r} must be null or an object with a "
            "'serialized' string"
        )
    try:
        fn = ca.Function.deserialize(entry["serialized"])
    except RuntimeError as exc:
        detail = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        raise InputError(
            f"{source}: CasADi {ca.__version__} cannot deserialise function {name!r} "
            f"(written by CasADi {version}): {detail}"
        ) from None
    if fn.is_null():
        raise InputError(f"{source} is corrupt: function {name!r} is empty")
    return fn
