"""Tube tightening of the safety rows (and the inputs) from the model's one-step error bound.

Along a plan ``(x_0..x_N, u_0..u_{N-1})`` the bound ``w_k = bound(x_k, u_k, p)`` on the
one-step error is propagated to a set that holds the deviation ``e_k`` of the true state from
``x_k`` (first order, the zero-order robust optimisation of Zanelli et al. 2021 and Feng
et al. 2020). Two propagations (``kind``):

``"open_loop"``: the planned inputs are applied as they are, and the deviation is held in a box

    e_0 = 0,    e_{k+1} = |A_k| e_k + w_k,    A_k = d step / dx (x_k, u_k, p),

or, with a Lipschitz constant ``L`` in the infinity norm, ``e_{k+1} = L max(e_k) + w_k``. A
safety row ``h_j(obs) >= 0`` is tightened at stage ``k`` by its first-order worst case over the
box, ``t_{k,j} = |g_{k,j}| . e_k`` with ``g_{k,j} = dh_j/dobs (obs_k) . d to_obs/dx (x_k)``.

``"feedback"``: the prediction assumes the ancillary feedback ``u_k = v_k + K_k (x_k - xbar_k)``
with ``K_k`` the time-varying LQR of the plan's linearisation ``(A_k, B_k)`` (backward Riccati
recursion with the weights ``Q`` on the observation, pulled back through ``d to_obs/dx``, and
``R`` on the input; ``Q`` also ends the recursion, which starts ``N`` stages past the horizon
on the last stage's linearisation so that the gains do not fade at the horizon's end). The
deviation is held in the ellipsoid
``{e : e^T Sigma_k^-1 e <= 1}``:

    Sigma_0 = 0,    Sigma_{k+1} = (A_k + B_k K_k) Sigma_k (A_k + B_k K_k)^T + W_k,
    W_k = nx diag(w_k^2),

``W_k`` being the smallest scaled diagonal ellipsoid that contains the box ``|d| <= w_k``. Row
``j`` is tightened by ``t_{k,j} = sqrt(g_{k,j}^T Sigma_k g_{k,j})`` and input ``i`` by its
feedback's share ``sqrt(K_k[i]^T Sigma_k K_k[i])`` (zero at stage 0, where ``e_0 = 0``). The sum
of ``Sigma`` adds the ellipsoids' second moments, not their worst cases: it holds the box at
stage 1 (``Sigma_1 = W_0``) and beyond that it is the covariance bound of zero-mean errors that
are independent from step to step (second moments at most ``W_k``, which every distribution in
the box has), the propagation of cautious GP-MPC (Hewing et al. 2020). The worst case of the
linearised system over all error sequences in the boxes is larger: the tube experiment
(tests/experiments/tube_propagation.py) measures it next to this one.

``errors="gaussian"`` (the chance constraints of cautious GP-MPC, Hewing et al. 2020) reads
the bound instead as the quantiles of independent zero-mean Gaussian errors
(:func:`gaussian_factors`): ``W_k = diag((w_k / z_w)^2)`` and the margins ``z_c sqrt(...)``, so
each row and each input bound holds with probability ``1 - delta`` at each stage under that
assumption. A horizon-level bound (all errors of a horizon inside at once) is read as the
quantiles at the correspondingly smaller probability per entry, so the same Gaussian errors
give the same ``W_k`` whichever level the bound was calibrated at. Its ellipsoid does not
hold the box (``z_c / z_w < 1``), so at stage 1, where ``e_1`` is the one-step error itself,
a row's margin is the larger of its own and the box's worst case ``|g_{1,j}| . w_0``.

Everything is one CasADi function of the plan, built once and evaluated once per solve.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import casadi as ca
import numpy as np

from vimpc.dynamics import DiscreteModel
from vimpc.errors import InputError

TUBES = ("feedback", "open_loop")
#: A tube whose bound expands to more than this many scalar operations a stage, or whose
#: step Jacobians do, maps them over the plan as calls (the bound kept MX, its dense products
#: in loops) rather than inlining a copy per stage. The GP-VI cart-pole's bound (posterior
#: spreads of two GPs on 100 support points: 104,108 operations a stage) took 3.3 ms
#: expanded against 0.42 ms as MX over a horizon of 20, both compiled (309 s against 0.5 s
#: to compile); with its Jacobians (19,456 operations a stage) called too, its whole tube
#: compiles in 5.5 s instead of 92 s and runs in 0.61 ms instead of 0.77. The nominal
#: models' bounds and Jacobians have at most a few hundred.
CALL_LIMIT = 2000
ERRORS = ("box", "gaussian")


def gaussian_factors(delta: float, nx: int, steps: int = 1) -> tuple[float, float]:
    """``(1 / z_w^2, z_c)`` of the feedback tube's ``"gaussian"`` errors: the bound ``w`` read
    as the two-sided quantiles of independent zero-mean Gaussian errors at
    ``delta / (nx steps)`` per entry (all ``nx`` entries of ``steps`` consecutive errors inside
    at once with probability ``>= 1 - delta``, as the bound promises: ``steps = 1`` for a
    step-level bound, its horizon for a horizon-level one), ``sigma = w / z_w``,
    ``z_w = Phi^-1(1 - delta / (2 nx steps))``; each row held with probability ``1 - delta``
    at each stage, ``z_c = Phi^-1(1 - delta)``."""
    from statistics import NormalDist

    z_w = NormalDist().inv_cdf(1 - delta / (2 * nx * steps))
    return 1.0 / z_w**2, NormalDist().inv_cdf(1 - delta)


def bound_steps(model: DiscreteModel) -> int:
    """How many consecutive one-step errors the model's bound holds at once with probability
    ``1 - delta``: its horizon for a horizon-level bound (its ``bound_info``), else 1."""
    return 1 if model.bound_info is None else model.bound_info.steps()


def keeps_mx(model: DiscreteModel) -> bool:
    """Whether the model's functions stay MX in the controller: a model written with dense
    matrix products (a network's layers: ``info["dense_products"]``) would have every
    product scalarised by expanding it (the DLNN balance scenario's 2x64 network: 401,519
    SX instructions per stage Jacobian, 4.4x slower than MX)."""
    return "dense_products" in model.info


def residual_function(model: DiscreteModel) -> ca.Function:
    """The model's ``residual`` as the controller differentiates it: with the model's
    ``residual_jacobian`` as its Jacobian where it has one (CasADi's ``custom_jacobian``,
    and ``jac_penalty = 0`` so that every directional derivative a solver asks for is that
    Jacobian times the seeds, not automatic differentiation of the residual)."""
    if model.residual_jacobian is None:
        return model.residual
    nx, nu = model.nx, model.nu
    args = [ca.MX.sym(name, model.residual.sparsity_in(i))
            for i, name in enumerate(("x", "u", "x_next", "p"))]  # fmt: skip
    plain = model.residual.call(args, True, False)[0]
    _, J = model.residual_jacobian.call(args, True, False)
    out = ca.MX.sym("out_r", nx)
    blocks = (J[:, :nx], J[:, nx : nx + nu], J[:, nx + nu :], ca.MX(nx, model.np))
    jac = ca.Function(
        "jac_residual", [*args, out],
        [ca.project(b, ca.jacobian_sparsity(plain, a)) for b, a in zip(blocks, args, strict=True)],
        ["x", "u", "x_next", "p", "out_r"], ["jac_r_x", "jac_r_u", "jac_r_x_next", "jac_r_p"],
    )  # fmt: skip
    return ca.Function(
        "residual", args, [plain], ["x", "u", "x_next", "p"], ["r"],
        {"custom_jacobian": jac, "jac_penalty": 0},
    )  # fmt: skip


def residual_jacobian(model: DiscreteModel) -> ca.Function:
    """``(x, u, x_next, p) -> (r, J)`` with ``J = [dr/dx, dr/du, dr/dx_next]`` for a model with
    a residual: its own ``residual_jacobian`` where it has one, else the derivative of its
    ``residual`` (on SX where the residual expands)."""
    if model.residual_jacobian is not None:
        return model.residual_jacobian
    expanded = None if keeps_mx(model) else expanded_or_none(model.residual)
    sym = ca.MX if expanded is None else ca.SX
    fn = model.residual if expanded is None else expanded
    nx, nu = model.nx, model.nu
    x, u, z, p = sym.sym("x", nx), sym.sym("u", nu), sym.sym("x_next", nx), sym.sym("p", model.np)
    r = fn(x, u, z, p)
    return ca.Function(
        "residual_jacobian", [x, u, z, p], [r, ca.jacobian(r, ca.vertcat(x, u, z))],
        ["x", "u", "x_next", "p"], ["r", "J"],
    )  # fmt: skip


def step_jacobians(model: DiscreteModel) -> ca.Function:
    """``(x, u, x_next, p) -> (A, B)``, the derivatives of ``step`` by ``x`` and ``u``: for a
    model with a residual ``-(dr/dx_next)^{-1} (dr/dx, dr/du)`` at ``(x, u, x_next)`` (exact
    when ``x_next`` is the step's solution; no Newton solve; :func:`residual_jacobian`),
    else the Jacobians of ``step`` (``x_next`` unused)."""
    nx, nu = model.nx, model.nu
    if model.residual is not None:
        jac = residual_jacobian(model)
        sym = ca.SX if jac.class_name() == "SXFunction" else ca.MX
        x, u, z = sym.sym("x", nx), sym.sym("u", nu), sym.sym("x_next", nx)
        p = sym.sym("p", model.np)
        # inlined, so that only J's part of the function is evaluated
        J = jac.call([x, u, z, p], True, False)[1]
        AB = -ca.solve(J[:, nx + nu :], J[:, : nx + nu])
        return ca.Function("step_jacobians", [x, u, z, p], [AB[:, :nx], AB[:, nx:]],
                           ["x", "u", "x_next", "p"], ["A", "B"])  # fmt: skip
    expanded = None if keeps_mx(model) else expanded_or_none(model.step)
    sym = ca.MX if expanded is None else ca.SX
    fn = model.step if expanded is None else expanded
    x, u, z, p = sym.sym("x", nx), sym.sym("u", nu), sym.sym("x_next", nx), sym.sym("p", model.np)
    return ca.Function(
        "step_jacobians", [x, u, z, p],
        [ca.jacobian(fn(x, u, p), x), ca.jacobian(fn(x, u, p), u)],
        ["x", "u", "x_next", "p"], ["A", "B"],
    )  # fmt: skip


def state_jacobian(model: DiscreteModel) -> ca.Function:
    """``(x, u, x_next, p) -> A = d step / dx`` (see :func:`step_jacobians`)."""
    AB = step_jacobians(model)
    sym = ca.SX if AB.is_a("SXFunction") else ca.MX
    args = [sym.sym(AB.name_in(i), AB.sparsity_in(i)) for i in range(4)]
    return ca.Function("state_jacobian", args, [AB(*args)[0]], ["x", "u", "x_next", "p"], ["A"])


def weight_matrix(name: str, value: Any, size: int, *, definite: bool) -> np.ndarray:
    """A weight given as a scalar, ``size`` diagonal entries or a ``size x size`` matrix, as a
    symmetric matrix; ``definite`` asks for positive definite (else semidefinite)."""
    rule = "positive definite" if definite else "positive semidefinite"
    what = f"a scalar, {size} diagonal entries or a {size}x{size} symmetric {rule} matrix"
    try:
        if isinstance(value, (str, bytes, bool)) or value is None:
            raise TypeError
        w = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError(f"{name} must be {what}, got {value!r:.80}") from None
    if w.ndim == 0 or w.shape == (size,):
        w = np.diag(np.broadcast_to(w, (size,)))
    if w.shape != (size, size):
        raise InputError(f"{name} must be {what}, got shape {w.shape}: {w.tolist()!r:.80}")
    if not np.all(np.isfinite(w)) or not np.allclose(w, w.T):
        raise InputError(f"{name} must be {what} (finite, symmetric), got {w.tolist()!r:.80}")
    smallest = float(np.linalg.eigvalsh(w).min())
    if smallest <= 0 if definite else smallest < -1e-12:
        raise InputError(
            f"{name} must be {what}, got {w.tolist()!r:.80} (smallest eigenvalue {smallest:g})"
            + ("; an LQR needs a positive input weight" if definite else "")
        )
    return w


def tube_function(
    model: DiscreteModel,
    horizon: int,
    safety: ca.Function,
    lipschitz: float | None = None,
    *,
    kind: str = "open_loop",
    Q: Any = None,
    R: Any = None,
    errors: str = "box",
) -> ca.Function:
    """``(x (nx, N+1), u (nu, N), p) -> (t (m, N+1), t_u (nu, N), K (nu, nx N))``: the
    tube of :func:`tube_parts` as one function, the bound evaluated along the plan inside."""
    bounds, tube = tube_parts(model, horizon, safety, lipschitz, kind=kind, Q=Q, R=R, errors=errors)
    sym = ca.SX if bounds.is_a("SXFunction") and tube.is_a("SXFunction") else ca.MX
    X, U, P = (sym.sym(name, bounds.sparsity_in(i)) for i, name in enumerate("xup"))
    return ca.Function(
        "tube", [X, U, P], tube.call([X, U, P, bounds.call([X, U, P])[0]]),
        ["x", "u", "p"], ["t", "t_u", "K"],
    )  # fmt: skip


def tube_parts(
    model: DiscreteModel,
    horizon: int,
    safety: ca.Function,
    lipschitz: float | None = None,
    *,
    kind: str = "open_loop",
    Q: Any = None,
    R: Any = None,
    errors: str = "box",
) -> tuple[ca.Function, ca.Function]:
    """The tube in two functions: ``bounds: (x (nx, N+1), u (nu, N), p) -> w (nx, N)``, the
    model's bound at the plan's stages, and ``tube: (x, u, p, w) -> (t (m, N+1), t_u (nu, N),
    K (nu, nx N))``: the
    tightening of the ``m`` rows of ``safety`` (a function of the observation) at every stage
    (column 0 is zero) and of the inputs at every stage (zero open loop and at stage 0), and
    the feedback the tube assumes, ``u_k = u_plan_k + K_k (x_k - x_plan_k)`` (the gains side
    by side; zero open loop).

    ``kind`` is ``"open_loop"`` (the box ``e_{k+1} = |A_k| e_k + w_k``, or the Lipschitz form)
    or ``"feedback"`` (the LQR gains' ellipsoid, with the weights ``Q`` on the observation
    and ``R`` on the input, both required there). ``A_k, B_k`` are :func:`step_jacobians`
    at ``(x_k, u_k, x_{k+1})``.

    The bound is kept apart from the rest because it holds the calibration's numbers, which
    change with every fit; ``tube`` holds only the model's step (with whatever the model
    keeps in its parameters ``p``), the safety rows and the weights, so that its compiled
    code is the same for every fit of a model whose learned numbers are in ``p``.
    """
    N, nx, nu = horizon, model.nx, model.nu
    if kind not in TUBES:
        raise InputError(f"tube must be one of {', '.join(map(repr, TUBES))}, got {kind!r}")
    if model.bound is None:
        raise InputError("tube tightening needs a model with a bound, got model.bound = None")
    feedback = kind == "feedback"
    if feedback:
        if lipschitz is not None:
            raise InputError(
                f"tube_lipschitz = {lipschitz!r} applies only to the open-loop tube, got "
                "tube='feedback'; drop tube_lipschitz or set tube='open_loop'"
            )
        Q = weight_matrix("tube_Q", Q, model.nobs, definite=False)
        R = weight_matrix("tube_R", R, nu, definite=True)
        if errors not in ERRORS:
            raise InputError(
                f"tube_errors must be one of {', '.join(map(repr, ERRORS))}, got {errors!r}"
            )
    # the ellipsoid's shape per unit w^2, and the margin per unit sqrt(g^T Sigma g)
    shape, margin = (
        gaussian_factors(model.delta, nx, bound_steps(model)) if errors == "gaussian" else (nx, 1.0)
    )
    fns = {"to_obs": model.to_obs, "safety": safety}
    if lipschitz is None:
        fns["jacobians"] = step_jacobians(model)
    expanded = {name: None if keeps_mx(model) else expanded_or_none(fn) for name, fn in fns.items()}
    if all(fn is not None for fn in expanded.values()):
        fns, sym = expanded, ca.SX
    else:  # a rootfinder, linear solve, callback or dense products inside: stay with MX
        sym = ca.MX
    x, u, z, p = sym.sym("x", nx), sym.sym("u", nu), sym.sym("x_next", nx), sym.sym("p", model.np)

    obs = fns["to_obs"](x)
    row_gradients = ca.jacobian(fns["safety"](obs), x)
    sensitivity = ca.Function(
        "sensitivity", [x], [row_gradients if feedback else ca.fabs(row_gradients)]
    )
    # per stage of the plan: the bound, and the step's Jacobians (|A| for the box); they enter
    # the propagation as inputs (W (nx, N), A (nx, nx N), B (nx, nu N))
    scalar_bound = None if sym is ca.MX else _scalar_or_none(model.bound)
    stage = None
    if lipschitz is None:
        A, B = fns["jacobians"](x, u, z, p)
        stage = ca.Function("stage", [x, u, z, p], [A if feedback else ca.fabs(A), B])
    inline = sym is ca.SX and (stage is None or stage.n_instructions() <= CALL_LIMIT)
    bound = model.bound if scalar_bound is None else scalar_bound
    maps = (bound, stage, scalar_bound is not None, inline)
    X, U, P = sym.sym("x", nx, N + 1), sym.sym("u", nu, N), sym.sym("p", model.np)
    W = sym.sym("w", nx, N)
    AB = [] if stage is None else [sym.sym("a", nx, nx * N), sym.sym("b", nx, nu * N)]
    C = sensitivity.map(N)(X[:, 1:])  # (m, nx N), stages 1..N
    m = safety.numel_out(0)
    columns = [sym.zeros(m, 1)]
    inputs = [sym.zeros(nu, 1)]
    if not feedback:
        e = sym.zeros(nx, 1)
        for k in range(N):
            if lipschitz is None:
                grown = ca.mtimes(AB[0][:, k * nx : (k + 1) * nx], e)
            else:
                grown = lipschitz * ca.mmax(e) * sym.ones(nx, 1)
            e = grown + W[:, k]
            columns.append(ca.mtimes(C[:, k * nx : (k + 1) * nx], e))
        inputs += [sym.zeros(nu, 1)] * (N - 1)
        outputs = [ca.horzcat(*columns), ca.horzcat(*inputs), sym.zeros(nu, nx * N)]
        return _parts(ca.Function("propagation", [X, U, P, W, *AB], outputs), *maps)

    As = [AB[0][:, k * nx : (k + 1) * nx] for k in range(N)]
    Bs = [AB[1][:, k * nu : (k + 1) * nu] for k in range(N)]
    to_obs_jac = ca.Function("to_obs_jacobian", [x], [ca.jacobian(obs, x)]).map(N + 1)(X)
    Qx = [
        ca.mtimes([to_obs_jac[:, k * nx : (k + 1) * nx].T, Q, to_obs_jac[:, k * nx : (k + 1) * nx]])
        for k in range(N + 1)
    ]
    # backward Riccati recursion on the plan's linearisation, begun N stages past the horizon
    # on the last stage's linearisation so that the gains do not fade towards the horizon's
    # end (the feedback stands in for the controller, which goes on beyond it)
    Pk, gains = Qx[N], [None] * N
    for k in [N - 1] * N + list(reversed(range(N))):
        BtP = ca.mtimes(Bs[k].T, Pk)
        gains[k] = -ca.solve(R + ca.mtimes(BtP, Bs[k]), ca.mtimes(BtP, As[k]))
        closed = As[k] + ca.mtimes(Bs[k], gains[k])
        Pk = Qx[k] + ca.mtimes([As[k].T, Pk, closed])
        Pk = (Pk + Pk.T) / 2
    Sigma = sym.zeros(nx, nx)
    for k in range(N):
        closed = As[k] + ca.mtimes(Bs[k], gains[k])
        Sigma = ca.mtimes([closed, Sigma, closed.T]) + shape * ca.diag(W[:, k] ** 2)
        G = C[:, k * nx : (k + 1) * nx]
        t = margin * _root(ca.sum2(ca.mtimes(G, Sigma) * G))
        if k == 0 and errors == "gaussian":  # stage 1 holds the box too: e_1 = d_0, |d_0| <= w_0
            t = ca.fmax(t, ca.mtimes(ca.fabs(G), W[:, 0]))
        columns.append(t)
        if k + 1 < N:
            Kn = gains[k + 1]
            inputs.append(margin * _root(ca.sum2(ca.mtimes(Kn, Sigma) * Kn)))
    outputs = [ca.horzcat(*columns), ca.horzcat(*inputs), ca.horzcat(*gains)]
    return _parts(ca.Function("propagation", [X, U, P, W, *AB], outputs), *maps)


def _parts(
    propagation: ca.Function,
    bound: ca.Function,
    stage: ca.Function | None,
    bound_inline: bool,
    inline: bool,
) -> tuple[ca.Function, ca.Function]:
    """``(bounds, tube)`` of :func:`tube_parts` from the ``propagation`` ``(x, u, p, w[, a,
    b]) -> (t, t_u, K)`` of the bound ``w`` and the step's Jacobians ``a, b`` along the plan:
    ``bounds`` maps ``bound`` over the stages (one SX function with ``bound_inline``, else
    an MX loop over its calls), ``tube`` maps ``stage``
    (None with a Lipschitz constant) and calls the propagation. ``inline``: ``tube`` is one SX
    function (every part SX, the stage no heavier than :data:`CALL_LIMIT`); else an MX
    function whose map is a loop over calls of the stage function, compiled once rather than
    once per stage."""
    N = propagation.size2_in(1)
    sym = ca.SX if bound_inline else ca.MX
    X, U, P = (sym.sym(name, propagation.sparsity_in(i)) for i, name in enumerate("xup"))
    bounds = ca.Function(
        "bounds", [X, U, P], [bound.map(N)(X[:, :-1], U, ca.repmat(P, 1, N))],
        ["x", "u", "p"], ["w"],
    )  # fmt: skip
    sym = ca.SX if inline else ca.MX
    X, U, P, W = (sym.sym(name, propagation.sparsity_in(i)) for i, name in enumerate("xupw"))
    P_N = ca.repmat(P, 1, N)
    AB = [] if stage is None else stage.map(N).call([X[:, :-1], U, X[:, 1:], P_N])
    tube = ca.Function(
        "tube", [X, U, P, W], propagation.call([X, U, P, W, *AB]),
        ["x", "u", "p", "w"], ["t", "t_u", "K"],
    )  # fmt: skip
    return bounds, tube


def tube_failure_cause(
    W: Sequence[np.ndarray],
    A: Sequence[np.ndarray],
    B: Sequence[np.ndarray],
    *,
    Qx: Sequence[np.ndarray] | None = None,
    R: np.ndarray | None = None,
    lipschitz: float | None = None,
) -> str | None:
    """Why a tube along a plan is not finite: the first cause, naming its stage, found by
    redoing :func:`tube_function`'s recursions in numpy (a diagnosis run only when a tube
    failed: keep the two in step) on the plan's bounds
    ``W[k]`` and linearisations ``(A[k], B[k])``, ``k = 0..N-1``. ``Qx`` (``N + 1`` state
    weights, the observation weight pulled back through ``d to_obs/dx``) and ``R`` make it
    the feedback tube's LQR and ellipsoid, else the open-loop box (or, with ``lipschitz``,
    the Lipschitz box). None where every recursion is finite."""
    N = len(W)
    for k in range(N):
        if not np.all(np.isfinite(W[k])):
            return f"stage {k}: the model's bound is not finite there (w_{k} = {W[k].tolist()})"
    if lipschitz is not None:
        e = 0.0
        for k in range(N):
            e = lipschitz * e + float(np.max(W[k]))
            if not math.isfinite(e):
                return (
                    f"stage {k + 1}: the Lipschitz box L max(e_k) + w_k overflows (L = {lipschitz})"
                )
        return None
    for k in range(N):
        if not (np.all(np.isfinite(A[k])) and np.all(np.isfinite(B[k]))):
            return (
                f"stage {k}: the step's linearisation (A_{k}, B_{k}) is not finite there (the "
                "derivative of the step failed: a singular d residual / d x_next or a failed "
                "Newton solve)"
            )
    nx = A[0].shape[0]
    with np.errstate(over="ignore", invalid="ignore"):
        if Qx is None:
            e = np.zeros(nx)
            for k in range(N):
                e = np.abs(A[k]) @ e + W[k]
                if not np.all(np.isfinite(e)):
                    return (
                        f"stage {k + 1}: the open-loop box |A_k| e_k + w_k overflows (largest "
                        f"|A_{k}| entry {np.abs(A[k]).max():.3g})"
                    )
            return None
        # the backward Riccati recursion, begun N stages past the horizon as the tube's
        P, gains = Qx[N], [None] * N
        for k in [N - 1] * N + list(reversed(range(N))):
            S = R + B[k].T @ P @ B[k]
            finite = np.all(np.isfinite(S))
            smallest = float(np.linalg.eigvalsh((S + S.T) / 2).min()) if finite else math.nan
            if not finite or smallest <= 1e-12 * max(1.0, float(np.abs(S).max())):
                return f"stage {k}: R + B_k^T P B_k of the LQR is " + (
                    "not finite: " + _growth(A[k], B[k], k)
                    if not finite
                    else f"singular (smallest eigenvalue {smallest:.3g}): the input weight "
                    "tube_R is too small against B_k^T P B_k (a singular input weight)"
                )
            gains[k] = -np.linalg.solve(S, B[k].T @ P @ A[k])
            P = Qx[k] + A[k].T @ P @ (A[k] + B[k] @ gains[k])
            P = (P + P.T) / 2
            if not np.all(np.isfinite(P)):
                return f"stage {k}: the LQR's cost-to-go P is not finite: " + _growth(A[k], B[k], k)
        Sigma = np.zeros((nx, nx))
        for k in range(N):
            closed = A[k] + B[k] @ gains[k]
            Sigma = closed @ Sigma @ closed.T + nx * np.diag(W[k] ** 2)
            if not np.all(np.isfinite(Sigma)):
                radius = float(np.abs(np.linalg.eigvals(closed)).max())
                return (
                    f"stage {k + 1}: the ellipsoid overflows (A_{k} + B_{k} K_{k} has spectral "
                    f"radius {radius:.3g})"
                )
    return None


def _growth(A: np.ndarray, B: np.ndarray, k: int) -> str:
    """Why a Riccati recursion through ``(A, B)`` overflows: a growing mode the input cannot
    reach (its left eigenvector orthogonal to ``B``: the PBH test, scale-free), else the size
    of ``A``."""
    values, vectors = np.linalg.eig(A.T)  # left eigenvectors of A
    reach = np.linalg.norm(B)
    for lam, v in zip(values, vectors.T, strict=True):
        if abs(lam) > 1 + 1e-6 and np.linalg.norm(v @ B) <= 1e-9 * reach * np.linalg.norm(v):
            return (
                f"the linearisation is uncontrollable there (the mode of eigenvalue "
                f"{lam:.6g} of A_{k} grows and the input cannot reach it)"
            )
    return f"the recursion overflowed (largest |A_{k}| entry {np.abs(A).max():.3g})"


def _root(q):
    """``sqrt(q)`` of a quadratic form, 0 where round-off makes it negative; NaN and inf pass
    through (``fmax(q, 0)`` would turn a NaN, an ellipsoid that is not finite, into 0)."""
    return ca.if_else(q < 0, 0, ca.sqrt(q))


def _scalar_or_none(bound: ca.Function) -> ca.Function | None:
    """``bound`` expanded to SX where that gives at most :data:`CALL_LIMIT` operations; None
    where it stays MX (no SX form, or heavier)."""
    expanded = expanded_or_none(bound)
    if expanded is None or expanded.n_instructions() > CALL_LIMIT:
        return None
    return expanded


def expanded_or_none(fn: ca.Function) -> ca.Function | None:
    """``fn`` as an SX function, or None when a node of it has no SX form."""
    try:
        return fn.expand()
    except RuntimeError:
        return None
