"""The ground truth's step function: the true system's flow over one control step.

Built from :class:`vimpc.integrators.VariationalIntegrator` (midpoint rule,
position-momentum form, ``dt / substep`` Newton-solved substeps) and, by default,
compiled to C (:func:`vimpc._jit.compiled_now`: CasADi's generated C, the compiler run as
a subprocess a Ctrl-C stops). The compiled function runs the same operations in
the same order (no fused multiply-adds), so it gives bit-identical states, 3-6x
faster (the four-bar's 100 substeps: ~1.8 ms interpreted, ~0.3 ms compiled).

Compiled code does not honour the rootfinder's ``error_on_fail``, so the function
also returns the largest integrator residual over the substeps: a step whose
Newton solve did not converge is caught from that number in either mode. The
residual is weighed against its round-off level at each substep, which grows with
``|q| / substep``, so the check holds anywhere in the observation space (a cart
2 km down its rail passes; an absolute test there sees round-off and fails).
"""

from __future__ import annotations

import sys
from collections import OrderedDict

import casadi as ca

from vimpc import _jit
from vimpc.integrators import VariationalIntegrator
from vimpc.mechanics import MechanicalSystem

# Compiled functions are kept per true system and step, so envs made again with the same
# arguments (tests, vectorised envs, episodes in a scenario) compile once per process.
_CACHE: OrderedDict[tuple, ca.Function] = OrderedDict()
_CACHE_SIZE = 32
# A step's integrator residual is accepted row by row when |r_i| <= RESIDUAL_ABSTOL +
# RESIDUAL_RTOL level_i, level_i the row's round-off level at the substep's start
# (VariationalIntegrator.residual_level, ||M|| (|q| / h + |v|) [kg m/s]). Converged Newton
# solves end below 1e-12 or within a few eps level_i; a solve that did not converge
# leaves residuals orders of magnitude above both terms.
RESIDUAL_ABSTOL = 1e-8
RESIDUAL_RTOL = 1e3 * sys.float_info.epsilon


def _cache_key(system: MechanicalSystem, dt: float, substep: float) -> tuple:
    return (
        type(system).__qualname__,
        tuple(system.params.items()),
        tuple(float(c) for c in system.friction),
        dt,
        substep,
    )


def _residual_norm(system: MechanicalSystem, x):
    """Norm of the holonomic residual ``g(q)`` and the nonholonomic ``A(q) v``."""
    q, v = x[: system.nq], x[system.nq :]
    parts = []
    if system.n_holonomic:
        parts.append(system.function("g")(q))
    if system.n_nonholonomic:
        parts.append(ca.mtimes(system.function("A")(q), v))
    return ca.norm_2(ca.vertcat(*parts)) if parts else ca.MX(0.0)


def constraint_residual_function(system: MechanicalSystem) -> ca.Function:
    """``x -> ||(g(q), A(q) v)||``, 0 for an unconstrained system."""
    x = ca.MX.sym("x", system.nq + system.nv)
    return ca.Function("constraint_residual", [x], [_residual_norm(system, x)])


def step_function(
    system: MechanicalSystem, dt: float, substep: float, n_substeps: int, *, jit: bool
) -> tuple[ca.Function, bool]:
    """``(x, u) -> (x_next, constraint_residual, integrator_residual)`` and whether it is
    compiled. ``jit`` asks for compilation; without a working C compiler the interpreted
    function is returned (same numbers, slower).

    ``integrator_residual`` is the largest ``|r_i| / (1 + level_i RESIDUAL_RTOL /
    RESIDUAL_ABSTOL)`` over the rows and substeps, ``<= RESIDUAL_ABSTOL`` exactly when every
    row meets its tolerance ``RESIDUAL_ABSTOL + RESIDUAL_RTOL level_i``. Near the origin it
    is close to the residual itself (the cart-pole at ``|q| = 1``, default substep: 1/1.5
    of it)."""
    key = _cache_key(system, dt, substep)
    if jit and key in _CACHE:
        _CACHE.move_to_end(key)
        return _CACHE[key], True
    integrator = VariationalIntegrator(system, "midpoint")
    # the rootfinder's answer as is: the residual check below names a solve that did not
    # converge (a step that returned NaN could only say "non-finite")
    step = integrator.step_function(substep, error_on_fail=True, accept=False)
    residual = integrator.residual_function(substep)
    level = integrator.residual_level(substep)
    nx = integrator.nx
    x = ca.MX.sym("x", nx)
    u = ca.MX.sym("u", system.nu)
    us = ca.repmat(u, 1, n_substeps)
    no_theta = ca.DM.zeros(0, n_substeps)  # the true system's own Lagrangian: no parameters
    xs = step.mapaccum("substeps", n_substeps)(x, us, no_theta)
    previous = ca.horzcat(x, xs[:, : n_substeps - 1])
    errors = residual.map(n_substeps)(previous, us, xs, no_theta)
    weights = 1.0 + (RESIDUAL_RTOL / RESIDUAL_ABSTOL) * level.map(n_substeps)(previous, no_theta)
    outputs = [xs[:, -1], _residual_norm(system, xs[:, -1]), ca.mmax(ca.fabs(errors) / weights)]
    names = (["x", "u"], ["x_next", "constraint_residual", "integrator_residual"])
    function = ca.Function(f"{system.name}_env_step", [x, u], outputs, *names)
    if not jit:
        return function, False
    # compiled by a subprocess a Ctrl-C can stop (CasADi's own JIT ignores it while the
    # compiler runs); no C compiler, or a failed compile: fall back to the interpreter
    compiled = _jit.compiled_now(
        ca.Function(f"{system.name}_env_step_c", [x, u], function(x, u), *names),
        f"{system.name} environment's true step",
    )
    if compiled is None:
        return function, False
    _CACHE[key] = compiled
    if len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return compiled, True
