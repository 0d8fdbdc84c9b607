"""Features of a configuration: every angle as its sine and cosine, the other coordinates as
they are. Written once for numpy rows and CasADi columns, with the chain rule back to the
coordinates, for the families and kernels that take periodic inputs (the GP inputs of the
GP-VI and GP-residual models, the residual network's inputs, a kernel Lagrangian's
embedding).
"""

from __future__ import annotations

from collections.abc import Sequence

import casadi as ca
import numpy as np

from vimpc.mechanics.system import MechanicalSystem

#: the values of a family's ``coordinates`` setting: as they are, or angles as sine and cosine
COORDINATES = ("minimal", "sincos")


def angles(system: MechanicalSystem, coordinates: str) -> tuple[int, ...]:
    """The indices of ``system``'s coordinates that enter as sine and cosine: its angles
    (coordinates in rad) with ``coordinates = "sincos"``, none with ``"minimal"``."""
    if coordinates == "minimal":
        return ()
    return tuple(i for i, unit in enumerate(system.coordinate_units) if unit == "rad")


def sincos(q, angles: Sequence[int] = ()):
    """The coordinates ``q`` with every index in ``angles`` replaced by its sine and cosine
    (in place, so the entries keep their order): rows ``(N, nq)`` of numpy give ``(N, nq +
    len(angles))``, a CasADi column ``(nq, 1)`` gives a column."""
    if isinstance(q, (ca.SX, ca.MX, ca.DM)):
        parts = []
        for i in range(q.shape[0]):
            parts += [ca.sin(q[i]), ca.cos(q[i])] if i in angles else [q[i]]
        return ca.vertcat(*parts)
    q = np.atleast_2d(np.asarray(q, dtype=np.float64))
    if not angles:
        return q
    parts = []
    for i in range(q.shape[1]):
        parts += [np.sin(q[:, i]), np.cos(q[:, i])] if i in angles else [q[:, i]]
    return np.column_stack(parts)


def embed(system: MechanicalSystem, coordinates: str, q, v, u):
    """``(q or its sines and cosines, v, u)``, the inputs of a model that learns from a
    state and an input: rows ``(N, .)`` of numpy side by side, or one CasADi column."""
    chosen = angles(system, coordinates)
    if isinstance(q, np.ndarray):
        return np.column_stack([sincos(q, chosen), v, u])
    return ca.vertcat(sincos(q, chosen), v, u)


def sincos_gradient(G: np.ndarray, q: np.ndarray, angles: Sequence[int] = ()) -> np.ndarray:
    """The chain rule through :func:`sincos`: derivatives ``G (N, d, ...)`` with respect to
    the embedded coordinates (the first ``d = nq + len(angles)`` entries of axis 1) become
    derivatives with respect to ``q (N, nq)``, ``(N, nq, ...)``; entries of axis 1 after
    the embedded ones (velocities, inputs) are kept as they are."""
    if not angles:
        return G
    q = np.atleast_2d(np.asarray(q, dtype=np.float64))
    extra = (None,) * (G.ndim - 2)
    out, col = [], 0
    for i in range(q.shape[1]):
        if i in angles:
            qi = q[:, i][(slice(None), *extra)]
            out.append(G[:, col] * np.cos(qi) - G[:, col + 1] * np.sin(qi))
            col += 2
        else:
            out.append(G[:, col])
            col += 1
    return np.concatenate([np.stack(out, axis=1), G[:, col:]], axis=1)
