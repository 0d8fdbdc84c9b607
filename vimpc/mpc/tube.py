"""Tube tightening of the safety rows from the model's one-step error bound.

Along a plan ``(x_0..x_N, u_0..u_{N-1})`` the bound ``w_k = bound(x_k, u_k, p)`` on the
one-step error is propagated to a bound ``e_k`` on the deviation of the true state from
``x_k`` (first order, the zero-order robust optimisation of Zanelli et al. 2021 and Feng
et al. 2020):

    e_0 = 0,    e_{k+1} = |A_k| e_k + w_k,    A_k = d step / dx (x_k, u_k, p),

or, with a Lipschitz constant ``L`` in the infinity norm, ``e_{k+1} = L max(e_k) + w_k``.
A safety row ``h_j(obs) >= 0`` is tightened at stage ``k`` by

    t_{k,j} = |dh_j/dobs (obs_k) . d to_obs/dx (x_k)| . e_k,

its first-order worst case over the box ``|dx| <= e_k``. Everything is one CasADi function
of the plan, built once and evaluated once per solve.
"""

from __future__ import annotations

import casadi as ca

from vimpc.dynamics import DiscreteModel
from vimpc.errors import InputError


def state_jacobian(model: DiscreteModel) -> ca.Function:
    """``(x, u, x_next, p) -> A = d step / dx``: for a model with a residual
    ``-(dr/dx_next)^{-1} dr/dx`` at ``(x, u, x_next)`` (exact when ``x_next`` is the step's
    solution; no Newton solve), else the Jacobian of ``step`` (``x_next`` unused)."""
    fn = model.residual if model.residual is not None else model.step
    expanded = _expanded(fn)
    sym = ca.MX if expanded is None else ca.SX
    fn = fn if expanded is None else expanded
    nx, nu = model.nx, model.nu
    x, u, z, p = sym.sym("x", nx), sym.sym("u", nu), sym.sym("x_next", nx), sym.sym("p", model.np)
    if model.residual is not None:
        r = fn(x, u, z, p)
        A = -ca.solve(ca.jacobian(r, z), ca.jacobian(r, x))
    else:
        A = ca.jacobian(fn(x, u, p), x)
    return ca.Function("state_jacobian", [x, u, z, p], [A], ["x", "u", "x_next", "p"], ["A"])


def tube_function(
    model: DiscreteModel, horizon: int, safety: ca.Function, lipschitz: float | None = None
) -> ca.Function:
    """``(x (nx, N+1), u (nu, N), p) -> t (m, N+1)``, the tightening of the ``m`` rows of
    ``safety`` (a function of the observation) at every stage; column 0 is zero.

    ``A_k`` is :func:`state_jacobian` at ``(x_k, u_k, x_{k+1})``.
    """
    N, nx, nu = horizon, model.nx, model.nu
    if model.bound is None:
        raise InputError("tube tightening needs a model with a bound, got model.bound = None")
    fns = {"bound": model.bound, "to_obs": model.to_obs, "safety": safety}
    if lipschitz is None:
        fns["jacobian"] = state_jacobian(model)
    expanded = {name: _expanded(fn) for name, fn in fns.items()}
    if all(fn is not None for fn in expanded.values()):
        fns, sym = expanded, ca.SX
    else:  # a rootfinder, linear solve or callback inside: stay with MX
        sym = ca.MX
    x, u, z, p = sym.sym("x", nx), sym.sym("u", nu), sym.sym("x_next", nx), sym.sym("p", model.np)

    obs = fns["to_obs"](x)
    sensitivity = ca.Function("sensitivity", [x], [ca.fabs(ca.jacobian(fns["safety"](obs), x))])
    stage_out = [fns["bound"](x, u, p)]
    if lipschitz is None:
        stage_out.append(ca.fabs(fns["jacobian"](x, u, z, p)))
    stage = ca.Function("stage", [x, u, z, p], stage_out)

    X, U, P = sym.sym("x", nx, N + 1), sym.sym("u", nu, N), sym.sym("p", model.np)
    out = stage.map(N).call([X[:, :-1], U, X[:, 1:], ca.repmat(P, 1, N)])
    W = out[0]
    C = sensitivity.map(N)(X[:, 1:])  # (m, nx N), stages 1..N
    m = safety.numel_out(0)
    e = sym.zeros(nx, 1)
    columns = [sym.zeros(m, 1)]
    for k in range(N):
        if lipschitz is None:
            grown = ca.mtimes(out[1][:, k * nx : (k + 1) * nx], e)
        else:
            grown = lipschitz * ca.mmax(e) * sym.ones(nx, 1)
        e = grown + W[:, k]
        columns.append(ca.mtimes(C[:, k * nx : (k + 1) * nx], e))
    return ca.Function("tube", [X, U, P], [ca.horzcat(*columns)], ["x", "u", "p"], ["t"])


def _expanded(fn: ca.Function) -> ca.Function | None:
    """``fn`` as an SX function, or None when a node of it has no SX form."""
    try:
        return fn.expand()
    except RuntimeError:
        return None
