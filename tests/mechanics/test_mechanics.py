"""The analytic mechanics: numpy and CasADi agree, and the formulas are the physics.

Reference values are derived in comments from first principles (rigid-body kinetic
energy ``T = 1/2 m |c'|^2 + 1/2 J phi'^2`` summed over bodies, gravity ``V = m g y_c``)
or taken from /work/shared/reference/implementations.md (section 6).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from vimpc.errors import InputError
from vimpc.mechanics import (
    SYSTEMS,
    CartPendulum,
    CartPole,
    DoublePendulum,
    FourBar,
    HenonHeiles,
    Kepler,
    MaximalCoordinates,
    NPendulum,
    ParallelogramFourBar,
    Pendulum,
    RollingDisk,
    make_system,
)

TOL = 1e-12


def _catalog():
    """Every catalog system once (NPendulum with three links)."""
    return {
        "Pendulum": Pendulum(),
        "CartPole": CartPole(),
        "DoublePendulum": DoublePendulum(m1=1.3, l1=0.9, m2=0.7, l2=1.1),
        "FourBar": FourBar(),
        "ParallelogramFourBar": ParallelogramFourBar(),
        "NPendulum": NPendulum(3),
        "RollingDisk": RollingDisk(),
        "CartPendulum": CartPendulum(),
        "Kepler": Kepler(k=0.4004),
        "HenonHeiles": HenonHeiles(),
    }


MAXIMAL_SOURCES = ("Pendulum", "CartPole", "DoublePendulum", "FourBar", "ParallelogramFourBar")


def _with_friction(system, rng):
    """A copy with strictly positive viscous friction on every rate."""
    return system.with_params(friction=rng.uniform(0.1, 1.0, system.n_rates))


def _all_systems():
    cases = []
    for name, system in _catalog().items():
        cases.append(pytest.param(system, id=name))
        if name in MAXIMAL_SOURCES:
            cases.append(pytest.param(system.maximal(), id=f"{name}Maximal"))
    return cases


def _random_q(system, rng):
    q = rng.uniform(-2.0, 2.0, system.nq)
    if isinstance(system, Kepler):  # keep away from the singularity at the origin
        r, a = rng.uniform(0.5, 2.0), rng.uniform(-math.pi, math.pi)
        q = np.array([r * math.cos(a), r * math.sin(a)])
    return q


def test_catalog_is_covered():
    assert set(_catalog()) == set(SYSTEMS)


# -- numpy and CasADi evaluate the same mechanics ------------------------------------


@pytest.mark.parametrize("system", _all_systems())
def test_numpy_and_casadi_agree(system):
    rng = np.random.default_rng(1)
    system = _with_friction(system, rng)
    assert np.all(system.friction > 0)
    checks = {
        "L": lambda q, v, u: system.lagrangian(q, v),
        "E": lambda q, v, u: system.energy(q, v),
        "p": lambda q, v, u: system.momentum(q, v),
        "M": lambda q, v, u: system.mass_matrix(q),
        "B": lambda q, v, u: system.input_map(q),
        "F": lambda q, v, u: system.generalized_force(q, v, u),
        "g": lambda q, v, u: system.holonomic(q),
        "A": lambda q, v, u: system.nonholonomic(q),
        "W": lambda q, v, u: system.rate_map(q),
    }
    args = {
        "L": "qv",
        "E": "qv",
        "p": "qv",
        "M": "q",
        "B": "q",
        "F": "qvu",
        "g": "q",
        "A": "q",
        "W": "q",
    }
    for _ in range(5):
        q = _random_q(system, rng)
        v = rng.normal(size=system.nv)
        u = rng.normal(size=system.nu)
        vals = {"q": q, "v": v, "u": u}
        for name, numpy_eval in checks.items():
            expected = np.asarray(numpy_eval(q, v, u), dtype=np.float64)
            fn = system.function(name)
            got = np.asarray(fn(*[vals[a] for a in args[name]]))
            assert got.size == expected.size, name
            scale = max(1.0, float(np.max(np.abs(expected), initial=0.0)))
            np.testing.assert_allclose(
                got.reshape(expected.shape), expected, rtol=0, atol=TOL * scale, err_msg=name
            )
        # friction is on: the force at u = 0 is pure damping and dissipates power
        F0 = system.generalized_force(q, v, np.zeros(system.nu))
        assert float(np.dot(F0, v)) < 0.0


@pytest.mark.parametrize("system", _all_systems())
def test_legendre_structure(system):
    """``p = dL/dv`` (by CasADi AD of L), ``E = p.v - L``, and ``G`` is the Jacobian of ``g``."""
    import casadi as ca

    rng = np.random.default_rng(2)
    q_sym, v_sym = ca.SX.sym("q", system.nq), ca.SX.sym("v", system.nv)
    dLdv = ca.Function(
        "dLdv", [q_sym, v_sym], [ca.gradient(system.lagrangian(q_sym, v_sym), v_sym)]
    )
    for _ in range(5):
        q, v = _random_q(system, rng), rng.normal(size=system.nv)
        p = system.momentum(q, v)
        np.testing.assert_allclose(np.asarray(dLdv(q, v)).ravel(), p, atol=1e-12)
        E = system.energy(q, v)
        assert abs(E - (np.dot(p, v) - system.lagrangian(q, v))) < 1e-12 * max(1.0, abs(E))
        if system.n_holonomic:
            G = system.holonomic_jacobian(q)
            eps = 1e-6
            fd = np.column_stack(
                [
                    (system.holonomic(q + eps * e) - system.holonomic(q - eps * e)) / (2 * eps)
                    for e in np.eye(system.nq)
                ]
            )
            # central differences: error O(eps^2) ~ 1e-12 plus round-off 1e-16/eps ~ 1e-10
            np.testing.assert_allclose(G, fd, atol=1e-8)


@pytest.mark.parametrize("system", _all_systems())
def test_mass_matrix_symmetric_positive_definite(system):
    rng = np.random.default_rng(3)
    for _ in range(10):
        M = np.asarray(system.mass_matrix(_random_q(system, rng)))
        np.testing.assert_allclose(M, M.T, atol=1e-14)
        assert np.min(np.linalg.eigvalsh(M)) > 1e-6


# -- reference values ----------------------------------------------------------------


def test_pendulum_reference():
    # Rod of mass m, length l pivoted at an end: centre at (l/2)(sin t, -cos t), so
    # T = 1/2 m (l/2)^2 t'^2 + 1/2 (m l^2/12) t'^2 = 1/2 (m l^2/3) t'^2 (parallel axis),
    # V = m g y_c = -m g (l/2) cos t.
    m, l, g = 2.0, 0.7, 9.81
    s = Pendulum(m=m, l=l, g=g)
    assert s.params["J"] == pytest.approx(m * l * l / 12.0, rel=1e-15)
    for t, w in [(0.0, 0.0), (0.3, -1.2), (2.5, 0.7)]:
        q, v = np.array([t]), np.array([w])
        np.testing.assert_allclose(s.mass_matrix(q), [[m * l * l / 3.0]], rtol=1e-14)
        E_ref = 0.5 * m * l * l / 3.0 * w * w - m * g * l / 2.0 * math.cos(t)
        assert s.energy(q, v) == pytest.approx(E_ref, rel=1e-14, abs=1e-14)
    # B = 1: the torque acts on theta directly
    np.testing.assert_allclose(s.input_map(np.array([0.4])), [[1.0]])


def test_parallelogram_reference():
    # implementations.md section 6: M = m l^2 [[5/3, c], [c, 5/3]], c = cos(t1 - t2),
    # V = -2 m g l (cos t1 + cos t2).
    m, l, g = 1.3, 0.8, 9.81
    s = ParallelogramFourBar(m=m, l=l, g=g)
    rng = np.random.default_rng(4)
    for _ in range(10):
        q = rng.uniform(-math.pi, math.pi, 2)
        c = math.cos(q[0] - q[1])
        np.testing.assert_allclose(
            s.mass_matrix(q), m * l * l * np.array([[5 / 3, c], [c, 5 / 3]]), atol=1e-13
        )
        V_ref = -2 * m * g * l * (math.cos(q[0]) + math.cos(q[1]))
        assert s.potential(q) == pytest.approx(V_ref, abs=1e-13)


def test_cartpole_reference():
    # Cart at (s, 0), pole centre at (s + l/2 sin t, -l/2 cos t), so
    # T = 1/2 mc s'^2 + 1/2 m |(s' + l/2 cos t t', l/2 sin t t')|^2 + 1/2 J t'^2
    # => M = [[mc + m, m l/2 cos t], [m l/2 cos t, J + m l^2/4]], V = -m g l/2 cos t.
    mc, m, l, J, g = 1.7, 0.4, 0.6, 0.02, 9.81
    s = CartPole(mc=mc, m=m, l=l, J=J, g=g)
    for t in (0.0, 0.9, math.pi, -2.2):
        q = np.array([0.3, t])
        M_ref = [[mc + m, m * l / 2 * math.cos(t)], [m * l / 2 * math.cos(t), J + m * l * l / 4]]
        np.testing.assert_allclose(s.mass_matrix(q), M_ref, atol=1e-14)
        assert s.potential(q) == pytest.approx(-m * g * l / 2 * math.cos(t), abs=1e-14)
    # the force acts on the cart only
    np.testing.assert_allclose(s.input_map(np.array([0.0, 1.0])), [[1.0], [0.0]], atol=1e-15)


def test_double_pendulum_reference():
    # Rods with relative angle t2: c1 = l1/2 e(t1), c2 = l1 e(t1) + l2/2 e(t1 + t2),
    # angles t1 and t1 + t2. Expanding |c2'|^2 gives the textbook matrix
    # M11 = J1 + m1 l1^2/4 + J2 + m2 (l1^2 + l2^2/4 + l1 l2 cos t2)
    # M12 = J2 + m2 (l2^2/4 + l1 l2/2 cos t2),   M22 = J2 + m2 l2^2/4.
    m1, l1, m2, l2 = 1.3, 0.9, 0.7, 1.1
    s = DoublePendulum(m1=m1, l1=l1, m2=m2, l2=l2)
    J1, J2 = m1 * l1**2 / 12, m2 * l2**2 / 12
    for t2 in (0.0, 1.1, -2.7):
        c = math.cos(t2)
        M11 = J1 + m1 * l1**2 / 4 + J2 + m2 * (l1**2 + l2**2 / 4 + l1 * l2 * c)
        M12 = J2 + m2 * (l2**2 / 4 + l1 * l2 / 2 * c)
        M22 = J2 + m2 * l2**2 / 4
        np.testing.assert_allclose(
            s.mass_matrix(np.array([0.4, t2])), [[M11, M12], [M12, M22]], atol=1e-14
        )


def test_cart_pendulum_lagrangian_from_docstring():
    # L = 1/2 (m l^2 phi'^2 + 2 m l cos(phi) s' phi' + (M + m) s'^2) - m g l cos(phi)
    M, m, l, g = 2.0, 0.5, 0.8, 9.81
    s = CartPendulum(M=M, m=m, l=l, g=g)
    rng = np.random.default_rng(5)
    for _ in range(10):
        q, v = rng.normal(size=2), rng.normal(size=2)
        phi, sd, phid = q[1], v[0], v[1]
        L_ref = 0.5 * (
            m * l * l * phid**2 + 2 * m * l * math.cos(phi) * sd * phid + (M + m) * sd**2
        ) - m * g * l * math.cos(phi)
        assert s.lagrangian(q, v) == pytest.approx(L_ref, abs=1e-13)
        # cart momentum dL/ds' = (M + m) s' + m l cos(phi) phi' (the docstring's invariant)
        p_ref = (M + m) * sd + m * l * math.cos(phi) * phid
        assert s.momentum(q, v)[0] == pytest.approx(p_ref, abs=1e-13)


def test_small_systems_reference():
    # Kepler: E = 1/2 m |v|^2 - k m / |q|, angular momentum m (x y' - y x').
    s = Kepler(m=2.0, k=0.4004)
    q, v = np.array([0.6, -0.8]), np.array([0.3, 0.5])
    assert s.energy(q, v) == pytest.approx(0.5 * 2 * 0.34 - 0.4004 * 2 / 1.0, abs=1e-14)
    assert s.angular_momentum(q, v) == pytest.approx(2 * (0.6 * 0.5 + 0.8 * 0.3), abs=1e-14)
    # Henon-Heiles: V = 1/2 (x^2 + y^2) + alpha (x^2 y - y^3/3)
    h = HenonHeiles(alpha=0.8)
    x, y = 0.3, -0.4
    V_ref = 0.5 * (x * x + y * y) + 0.8 * (x * x * y - y**3 / 3)
    assert h.potential(np.array([x, y])) == pytest.approx(V_ref, abs=1e-15)
    # Rolling disk: A = [[-R cos phi, 0, 1, 0], [-R sin phi, 0, 0, 1]] and the
    # consistent velocity lies in its null space.
    d = RollingDisk(R=0.3)
    q = np.array([0.2, 0.7, 1.0, -1.0])
    A_ref = [[-0.3 * math.cos(0.7), 0, 1, 0], [-0.3 * math.sin(0.7), 0, 0, 1]]
    np.testing.assert_allclose(d.nonholonomic(q), A_ref, atol=1e-15)
    np.testing.assert_allclose(
        d.nonholonomic(q) @ d.consistent_velocity(q, 1.5, -0.4), 0, atol=1e-15
    )
    # NPendulum: from_angles places mass i at distance l_i from mass i-1, so g = 0 and G v = 0
    n = NPendulum(3)
    qn, vn = n.from_angles([0.3, -1.0, 2.0], [0.5, 1.0, -2.0])
    np.testing.assert_allclose(n.holonomic(qn), 0, atol=1e-14)
    np.testing.assert_allclose(n.holonomic_jacobian(qn) @ vn, 0, atol=1e-14)


# -- maximal coordinates ----------------------------------------------------------------


def _consistent_joint_state(system, rng):
    if isinstance(system, FourBar):
        return system.assemble(rng.uniform(-math.pi, math.pi), rng.normal())
    return rng.uniform(-2.0, 2.0, system.nq), rng.normal(size=system.nv)


@pytest.mark.parametrize("name", MAXIMAL_SOURCES)
def test_to_maximal_is_consistent(name):
    rng = np.random.default_rng(6)
    source = _with_friction(_catalog()[name], rng)
    maximal = source.maximal()
    assert isinstance(maximal, MaximalCoordinates)
    assert maximal.nq == 3 * len(source.bodies())
    assert maximal.n_holonomic == 2 * len(source.joints())
    np.testing.assert_array_equal(maximal.friction, source.friction)
    for _ in range(5):
        q, v = _consistent_joint_state(source, rng)
        z, w = source.to_maximal(q, v)
        np.testing.assert_allclose(maximal.holonomic(z), 0.0, atol=TOL)
        np.testing.assert_allclose(maximal.holonomic_jacobian(z) @ w, 0.0, atol=TOL)
        for quantity in ("energy", "lagrangian"):
            a, b = getattr(source, quantity)(q, v), getattr(maximal, quantity)(z, w)
            assert abs(a - b) <= TOL * max(1.0, abs(a)), quantity
        # inputs and friction act on the same joint rates: W_max w = W v, B_max^T w = B^T v
        np.testing.assert_allclose(maximal.rate_map(z) @ w, source.rate_map(q) @ v, atol=TOL)
        np.testing.assert_allclose(maximal.input_map(z).T @ w, source.input_map(q).T @ v, atol=TOL)
        assert maximal.dissipation(z, w) == pytest.approx(source.dissipation(q, v), abs=TOL)
    # the constraint can fail: a perturbed maximal state violates it
    z_bad = z + 1e-3 * rng.normal(size=z.size)
    assert np.max(np.abs(maximal.holonomic(z_bad))) > 1e-5


def test_states_to_maximal_maps_a_batch_state_by_state():
    source = DoublePendulum()
    x = np.random.default_rng(7).normal(size=(3, 2, 4))  # any leading shape
    out = source.states_to_maximal(x)
    assert out.shape == (3, 2, 2 * source.maximal().nq)
    for index in np.ndindex(3, 2):
        np.testing.assert_array_equal(
            out[index], np.concatenate(source.to_maximal(x[index][:2], x[index][2:]))
        )
    with pytest.raises(InputError, match=r"2 nq = 4 entries.*\(3, 5\)"):
        source.states_to_maximal(np.zeros((3, 5)))


def test_make_system_maximal_and_rejects_unknown():
    assert isinstance(make_system("Pendulum", coordinates="maximal"), MaximalCoordinates)
    with pytest.raises(InputError, match="did you mean 'Pendulum'"):
        make_system("Pendulm")
    with pytest.raises(InputError, match="coordinates"):
        make_system("Kepler", coordinates="maximal")


# -- four-bar ---------------------------------------------------------------------------


@pytest.mark.parametrize("branch", [1, -1])
def test_fourbar_assemble_satisfies_closure(branch):
    s = FourBar()
    rng = np.random.default_rng(7)
    for angle in rng.uniform(-math.pi, math.pi, 10):
        rate = rng.normal()
        q, v = s.assemble(angle, rate, branch=branch)
        assert q[0] == angle and v[0] == rate
        np.testing.assert_allclose(s.holonomic(q), 0.0, atol=1e-14)
        np.testing.assert_allclose(s.holonomic_jacobian(q) @ v, 0.0, atol=1e-13)
        # branch +1 puts C above the line B D: sign of the cross product (D - B) x (C - B)
        a, b = s.params["a"], s.params["b"]
        B = a * np.array([math.cos(q[0]), math.sin(q[0])])
        C = B + b * np.array([math.cos(q[1]), math.sin(q[1])])
        D = np.array([s.params["d"], 0.0])
        cross = (D - B)[0] * (C - B)[1] - (D - B)[1] * (C - B)[0]
        assert np.sign(cross) == branch
    with pytest.raises(InputError, match="branch"):
        s.assemble(0.0, branch=0)


def test_fourbar_closure_jacobian_full_rank_over_a_revolution():
    # Crank-driven Grashof crank-rocker: coupler and rocker are never collinear, so
    # G[:, 1:] = [[-b sin t2, c sin t3], [b cos t2, -c cos t3]] has determinant
    # b c sin(t3 - t2) != 0 throughout. Its smallest singular value stays bounded away
    # from 0; the transmission angle range of 41..110 degrees gives sin >= 0.65.
    s = FourBar()
    b, c = s.params["b"], s.params["c"]
    smallest = []
    for angle in np.linspace(-math.pi, math.pi, 721):
        q, _ = s.assemble(angle)
        G = s.holonomic_jacobian(q)
        assert np.linalg.matrix_rank(G) == 2
        sv = np.linalg.svd(G[:, 1:], compute_uv=False)
        smallest.append(sv[-1])
        assert abs(np.linalg.det(G[:, 1:])) == pytest.approx(
            b * c * abs(math.sin(q[2] - q[1])), rel=1e-12
        )
        assert abs(math.sin(q[2] - q[1])) > 0.6
    assert min(smallest) > 0.1


@pytest.mark.parametrize(
    "lengths",
    [
        dict(a=1.0, b=1.2, c=1.0, d=1.3),  # crank not the shortest link
        dict(a=0.5, b=0.6, c=0.7, d=1.5),  # non-Grashof: 0.5 + 1.5 > 0.6 + 0.7
        dict(a=0.5, b=1.0, c=1.0, d=1.5),  # change point: b + c = a + d, coupler and rocker fold
    ],
)
def test_fourbar_rejects_bad_lengths(lengths):
    with pytest.raises(InputError, match=r"FourBar lengths \(a, b, c, d\)") as info:
        FourBar(**lengths)
    assert str(tuple(lengths.values())) in str(info.value)


# -- bad input ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cls", "kwargs", "names"),
    [
        (Pendulum, {"m": 0.0}, ("Pendulum.m", "0.0")),
        (Pendulum, {"l": -0.5}, ("Pendulum.l", "-0.5")),
        (CartPole, {"mc": -1.0}, ("CartPole.mc", "-1.0")),
        (DoublePendulum, {"J2": 0.0}, ("DoublePendulum.J2", "0.0")),
        (RollingDisk, {"R": 0.0}, ("RollingDisk.R", "0.0")),
        (Pendulum, {"m": float("nan")}, ("Pendulum.m", "nan")),
        (Pendulum, {"g": float("nan")}, ("Pendulum.g", "nan")),
        (Kepler, {"k": float("inf")}, ("Kepler.k", "inf")),
        (Pendulum, {"m": "heavy"}, ("Pendulum.m", "'heavy'")),
        (NPendulum, {"n": 0}, ("n", "0")),
    ],
)
def test_bad_parameters(cls, kwargs, names):
    with pytest.raises(InputError) as info:
        cls(**kwargs)
    for text in names:
        assert text in str(info.value)


def test_unknown_parameter_suggests():
    with pytest.raises(InputError, match="unknown key 'll'.*did you mean 'l'"):
        Pendulum(ll=1.0)
    with pytest.raises(InputError, match="unknown key 'mcc'.*did you mean 'mc'"):
        CartPole(mcc=1.0)
    with pytest.raises(InputError, match="unknown key 'l5'"):
        NPendulum(3, l5=1.0)
    with pytest.raises(InputError, match="unknown key 'mass'"):
        Pendulum().with_params(mass=2.0)


def test_bad_friction():
    with pytest.raises(
        InputError, match=r"CartPole.friction must have shape \(2,\), got shape \(3,\)"
    ):
        CartPole(friction=[0.1, 0.2, 0.3])
    with pytest.raises(InputError, match=r"Pendulum.friction must be >= 0.*got \[-0.1\]"):
        Pendulum(friction=[-0.1])
    with pytest.raises(InputError, match=r"FourBar.friction must be finite.*nan"):
        FourBar(friction=[0.1, float("nan"), 0.0, 0.0])
    # FourBar has one coefficient per joint (4), not per coordinate (3)
    with pytest.raises(InputError, match=r"shape \(4,\)"):
        FourBar(friction=[0.1, 0.1, 0.1])


def test_npendulum_without_defaults_needs_values():
    with pytest.raises(InputError, match="NPendulum\\(n=4\\).*m1"):
        NPendulum(4)
    s = NPendulum(4, **{f"m{i}": 1.0 for i in range(1, 5)}, **{f"l{i}": 0.5 for i in range(1, 5)})
    assert s.nq == 8 and s.n_holonomic == 4


def test_perturbed_scales_only_inertial_parameters():
    rng = np.random.default_rng(8)
    s = CartPole(friction=[0.3, 0.1])
    p = s.perturbed(0.1, rng)
    for k in s.params:
        ratio = p.params[k] / s.params[k]
        if k in s.inertial:
            assert 0.9 <= ratio <= 1.1
        else:
            assert ratio == 1.0
    np.testing.assert_array_equal(p.friction, s.friction)
    with pytest.raises(InputError, match="spread must be < 1"):
        s.perturbed(1.0, rng)
