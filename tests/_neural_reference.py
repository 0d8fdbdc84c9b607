"""Reference fits of the neural families (dlnn, lnn, clnn, chnn, hamel) on tiny data, and
what each exports: the step on fixed random states and inputs, the residual there, the
model's info and the fit's warnings. ``tests/models/test_neural_reference.py`` fits them again
and compares with ``tests/fixtures/neural_reference.npz``, so a change to the families'
shared fitting code that moves one random draw, one weight or one exported number fails.

The fixture was written by ``python tests/_neural_reference.py`` on the code before the
neural families' fit scaffolding was shared (vimpc/models/_neural.py), one torch thread;
run it again only where a change means to alter what a fit exports, and say so.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np

DT = 0.05
FIXTURE = Path(__file__).parent / "fixtures" / "neural_reference.npz"
#: states and inputs the exported steps are evaluated at, per case
POINTS = 8


def _pendulum_data(trajectories: int, steps: int, seed: int, forced: bool = True):
    import gymnasium
    import vimpc_envs  # noqa: F401  (registers the environment ids)

    from vimpc.data import make_excitation, rollout_env
    from vimpc.data.sampling import halton

    env = gymnasium.make("vimpc/Pendulum-v0", dt=DT, friction=[0.0]).unwrapped
    rng = np.random.default_rng(seed)
    inputs = np.stack([
        make_excitation("random_steps", steps, 1, DT, rng, low=[-2.0], high=[2.0])
        for _ in range(trajectories)
    ])  # fmt: skip
    if not forced:
        inputs = np.zeros_like(inputs)
    initial = halton((-2.0, -3.0), (2.0, 3.0), trajectories, seed=seed)
    data = rollout_env(env, trajectories, steps, inputs, seed, initial_states=initial)
    return env.nominal_system, data


def _disk_data(forced: bool = True):
    import gymnasium
    import vimpc_envs  # noqa: F401

    from vimpc.data import make_excitation, rollout_env
    from vimpc.mechanics import RollingDisk

    kwargs = {"substep": 1e-3, "perturbation": 0.0, "obs_noise": 0.0}
    env = gymnasium.make("vimpc/RollingDisk-v0", dt=DT, **kwargs).unwrapped
    rng = np.random.default_rng(0)
    disk = RollingDisk()
    starts, inputs = [], []
    for _ in range(12):
        q = np.array([rng.uniform(-1, 1), rng.uniform(-np.pi, np.pi), *rng.uniform(-1, 1, 2)])
        v = disk.consistent_velocity(q, rng.uniform(-2, 2), rng.uniform(-1.5, 1.5))
        starts.append(np.concatenate([q, v]))
        inputs.append(make_excitation("random_steps", 4, 2, DT, rng, low=[-2, -1], high=[2, 1]))
    U = np.stack(inputs) if forced else np.zeros((12, 4, 2))
    data = rollout_env(env, 12, 4, U, 0, initial_states=np.array(starts))
    return env.nominal_system, data


NET = {"hidden": [8, 8], "epochs": 15, "lr": 1e-2}
#: name -> (family, data, settings)
CASES = {
    "dlnn": ("dlnn", "pendulum", {**NET, "order": 0}),
    "dlnn_unforced": ("dlnn", "pendulum_unforced", {**NET, "order": 0}),
    "dlnn_symmetry": (
        "dlnn", "pendulum", {**NET, "order": 0, "symmetries": 1, "warmup": 8,
                             "symmetry_points": 16},
    ),
    "dlnn_validation": (
        "dlnn", "pendulum", {**NET, "order": 0, "validation": 0.2, "patience": 5, "batch": 16},
    ),
    "lnn": ("lnn", "pendulum", dict(NET)),
    "lnn_unforced": ("lnn", "pendulum_unforced", dict(NET)),
    "clnn": ("clnn", "pendulum", {**NET, "epochs": 8, "batch": 16}),
    "clnn_unforced": ("clnn", "pendulum_unforced", {**NET, "epochs": 8}),
    "clnn_damped": ("clnn", "pendulum", {**NET, "epochs": 8, "damping": "learned"}),
    "chnn": ("chnn", "pendulum", {**NET, "epochs": 8}),
    "hamel": ("hamel", "disk", {"hidden": [6, 6], "epochs": 6, "window": 1, "lr": 1e-2,
                                "batch": 16}),
    "hamel_unforced": ("hamel", "disk_unforced", {"hidden": [6, 6], "epochs": 6,
                                                  "window": 1, "lr": 1e-2}),
}  # fmt: skip


def _data(which: str):
    if which.startswith("pendulum"):
        return _pendulum_data(5, 12, 0, forced=which == "pendulum")
    return _disk_data(forced=which == "disk")


def _info_text(info) -> str:
    kept = {k: v for k, v in info.items() if k != "fit_time_s"}
    return json.dumps(kept, sort_keys=False, default=repr)


def fit_case(name: str) -> dict[str, np.ndarray]:
    """The case's exported numbers: step and residual at fixed points, info, warnings."""
    import torch

    from vimpc.models import family

    fam_name, which, settings = CASES[name]
    system, data = _data(which)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fam = family(fam_name)(system, DT, **settings).fit(data)
    finally:
        torch.set_num_threads(threads)
    model = fam.discrete_model()
    rng = np.random.default_rng(1)
    obs = np.asarray(data.obs).reshape(-1, model.nobs)
    pick = rng.choice(len(obs), POINTS, replace=False)
    O = obs[pick] + 0.01 * rng.standard_normal((POINTS, model.nobs))
    U = rng.uniform(-1.0, 1.0, (POINTS, model.nu))
    p = model.p_default
    X = np.stack([np.asarray(model.from_obs(o)).ravel() for o in O])
    steps = np.stack([np.asarray(model.step(x, u, p)).ravel() for x, u in zip(X, U, strict=True)])
    out = {"x": X, "u": U, "step": steps}
    if model.residual is not None:
        out["residual"] = np.stack([
            np.asarray(model.residual(x, u, y, p)).ravel() for x, u, y in zip(X, U, X, strict=True)
        ])  # fmt: skip
    out["info"] = np.array(_info_text(model.info))
    out["warnings"] = np.array(json.dumps([
        [type(w.message).__name__, str(w.message), Path(w.filename).name] for w in caught
    ]))  # fmt: skip
    return {f"{name}/{k}": v for k, v in out.items()}


def main() -> None:
    numbers: dict[str, np.ndarray] = {}
    for name in CASES:
        numbers.update(fit_case(name))
        print(name, "done", flush=True)
    FIXTURE.parent.mkdir(exist_ok=True)
    np.savez(FIXTURE, **numbers)
    print("wrote", FIXTURE)


if __name__ == "__main__":
    main()
