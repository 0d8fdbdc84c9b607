"""The header of a shipped MJCF file, read as data (no MuJoCo needed).

The first comment of each file in ``scenarios/mujoco/`` holds ``vimpc-KEY: VALUE`` lines:

- ``vimpc-system: NAME``: the catalog system of :mod:`vimpc.mechanics`;
- ``vimpc-params: k=v k=v ...``: its nominal parameters (SI units);
- ``vimpc-q: NAME = TERMS`` (one line per coordinate, in the catalog's order) and
  ``vimpc-v: NAME = TERMS``: each coordinate as a sum of signed, optionally scaled
  ``qpos[i]`` (``qvel[i]``) terms and an optional constant offset, the binary ``+`` and
  ``-`` between spaces (``theta2 = qpos[0] + qpos[1]``, ``theta = -1 qpos[2] + 3.14``);
- ``vimpc-u: NAME = GEAR ctrl[j]`` (one line per input): the input ``u = GEAR ctrl[j]``,
  i.e. ``ctrl[j] = u / GEAR``;
- ``vimpc-variant-of: FILE`` and ``vimpc-variant: mass xF, damping xF, armature xF``
  (plant variants only): the factors by which the variant's body masses and inertias,
  joint damping and armature differ from the file it varies;
- ``vimpc-limits``, ``vimpc-step``, ``vimpc-unmodelled``: text for a person.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from vimpc.errors import InputError

_LINE = re.compile(r"^\s*vimpc-([a-z-]+):\s*(.*?)\s*$")
_TERM = re.compile(r"^(?:(\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)\s*)?(?:(qpos|qvel|ctrl)\[(\d+)\])?$")


@dataclass(frozen=True)
class LinearMap:
    """``y = matrix @ x + offset`` with named rows ``names``."""

    names: tuple[str, ...]
    matrix: np.ndarray
    offset: np.ndarray

    def __call__(self, x: Any) -> np.ndarray:
        return self.matrix @ np.asarray(x, dtype=np.float64) + self.offset


@dataclass(frozen=True)
class MjcfHeader:
    """A shipped MJCF file's declarations: ``q = q_map(qpos)``, ``v = v_map(qvel)``,
    ``u = u_map(ctrl)`` (so ``ctrl = u / gear``), the catalog ``system`` and its nominal
    ``params``; ``variant_of`` and ``variant`` (factors by kind) for plant variants; every
    ``vimpc-`` line's text in ``lines``."""

    path: Path
    system: str
    params: MappingProxyType
    q_map: LinearMap
    v_map: LinearMap
    u_map: LinearMap
    variant_of: str | None
    variant: MappingProxyType
    lines: MappingProxyType


def _terms(path: Path, line: str, rhs: str, symbol: str, size: int) -> tuple[np.ndarray, float]:
    row, offset = np.zeros(size), 0.0
    parts = re.split(r"\s+([+-])\s+", rhs.strip())
    signs = ["+", *parts[1::2]]
    for sign, text in zip(signs, parts[0::2], strict=True):
        coefficient = -1.0 if sign == "-" else 1.0
        text = text.strip()
        if text[:1] in ("+", "-"):
            coefficient *= -1.0 if text[0] == "-" else 1.0
            text = text[1:].strip()
        found = _TERM.match(text)
        if not text or found is None or (found.group(1) is None and found.group(2) is None):
            raise InputError(f"{path}: cannot read the term {text!r} of {line!r}")
        if found.group(1) is not None:
            coefficient *= float(found.group(1))
        if found.group(2) is None:
            offset += coefficient
            continue
        if found.group(2) != symbol:
            raise InputError(f"{path}: {line!r} may use only {symbol}[i], found {text!r}")
        index = int(found.group(3))
        if index >= size:
            raise InputError(f"{path}: {line!r} names {symbol}[{index}], beyond {size} entries")
        row[index] += coefficient
    return row, offset


def _map(path: Path, lines: list[str], symbol: str, size: int) -> LinearMap:
    names, rows, offsets = [], [], []
    for line in lines:
        name, _, rhs = line.partition("=")
        if not rhs:
            raise InputError(f"{path}: {line!r} must read 'NAME = TERMS'")
        row, offset = _terms(path, line, rhs, symbol, size)
        names.append(name.strip())
        rows.append(row)
        offsets.append(offset)
    return LinearMap(tuple(names), np.array(rows).reshape(len(rows), size), np.array(offsets))


def read_header(path: Any, nq: int, nv: int, nu: int) -> MjcfHeader:
    """Read the ``vimpc-`` lines of the MJCF file ``path`` for a model of sizes
    ``nq, nv, nu`` (MuJoCo's); raises :class:`InputError` naming the file and the line."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    head = text[text.find("<!--") + 4 : text.find("-->")] if "<!--" in text else ""
    found: dict[str, list[str]] = {}
    for raw in head.splitlines():
        match = _LINE.match(raw)
        if match:
            found.setdefault(match.group(1), []).append(match.group(2))
    for key in ("system", "params", "q", "v", "u"):
        if key not in found:
            raise InputError(f"{path}: the header comment has no 'vimpc-{key}:' line")
    params = {}
    for item in found["params"][0].split():
        key, _, value = item.partition("=")
        try:
            params[key] = float(value)
        except ValueError:
            raise InputError(f"{path}: vimpc-params entry {item!r} is not 'name=number'") from None
    variant = {}
    for item in found.get("variant", [""])[0].split(","):
        if item.strip():
            kind, _, factor = item.strip().partition(" x")
            variant[kind.strip()] = float(factor)
    return MjcfHeader(
        path=path,
        system=found["system"][0],
        params=MappingProxyType(params),
        q_map=_map(path, found["q"], "qpos", nq),
        v_map=_map(path, found["v"], "qvel", nv),
        u_map=_map(path, found["u"], "ctrl", nu),
        variant_of=found.get("variant-of", [None])[0],
        variant=MappingProxyType(variant),
        lines=MappingProxyType({k: tuple(v) for k, v in found.items()}),
    )
