"""Rollouts of a :class:`DiscreteModel` or a gymnasium environment, and observation noise."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from vimpc._checks import positive_int
from vimpc.data.dataset import Dataset
from vimpc.data.sampling import _generator
from vimpc.dynamics import DiscreteModel
from vimpc.errors import InputError

if TYPE_CHECKING:  # an annotation only: importing vimpc loads no gymnasium
    import gymnasium

__all__ = ["add_noise", "rollout_env", "rollout_model"]


def _shaped(name: str, value: Any, shape: tuple[int | None, ...], what: str) -> np.ndarray:
    a = np.asarray(value, dtype=np.float64)
    if a.ndim != len(shape) or any(
        s is not None and s != g for s, g in zip(shape, a.shape, strict=True)
    ):
        want = tuple("*" if s is None else s for s in shape)
        raise InputError(f"{name} must have shape {want} ({what}), got shape {a.shape}")
    return a


def rollout_model(model: DiscreteModel, x0s: Any, inputs: Any, p: Any = None) -> np.ndarray:
    """Roll ``model.step`` forward from several initial states at once.

    Parameters
    ----------
    model : DiscreteModel
    x0s : array_like, shape (N, nx)
        Initial model states.
    inputs : array_like, shape (N, T, nu)
        Input of trajectory ``i`` over step ``k``.
    p : array_like, shape (np,) or (N, np), optional
        Parameters, shared or per trajectory; ``model.p_default`` if None.

    Returns
    -------
    ndarray, shape (N, T + 1, nx)
        Model states; ``[:, 0]`` equals ``x0s``.
    """
    if not isinstance(model, DiscreteModel):
        raise InputError(f"model must be a vimpc.DiscreteModel, got {type(model).__name__}")
    x0s = _shaped("x0s", x0s, (None, model.nx), "N initial states of size nx")
    n = x0s.shape[0]
    inputs = _shaped("inputs", inputs, (n, None, model.nu), "N trajectories, T steps, nu")
    p = model.p_default if p is None else np.asarray(p, dtype=np.float64)
    if p.shape == (model.np,):
        p = np.tile(p[:, None], (1, n))
    elif p.shape == (n, model.np):
        p = p.T
    else:
        raise InputError(
            f"p must have shape ({model.np},) or ({n}, {model.np}), got shape {p.shape}"
        )
    step = model.step.map(n)
    states = np.empty((n, inputs.shape[1] + 1, model.nx))
    states[:, 0] = x0s
    x = x0s.T
    for k in range(inputs.shape[1]):
        x = np.asarray(step(x, inputs[:, k].T, p), dtype=np.float64).reshape(model.nx, n)
        states[:, k + 1] = x.T
    return states


def rollout_env(
    env: gymnasium.Env,
    n_trajectories: int,
    n_steps: int,
    policy_inputs: Any,
    seed: int,
    reset_options: Mapping[str, Any] | None = None,
    metadata: Mapping[str, Any] | None = None,
    progress: bool = False,
    initial_states: Any = None,
    feedback: Callable[[np.ndarray, float], Any] | None = None,
) -> Dataset:
    """Collect trajectories from a gymnasium environment: open loop, or around a feedback.

    Trajectory ``i`` starts from ``env.reset(seed=seed + i, options=reset_options)``
    (with ``initial_states``: ``options={"state": initial_states[i]}``)
    and applies ``policy_inputs[i, k]`` at step ``k``. Termination or truncation
    before the last step raises :class:`InputError`; at the last step it is fine. An env
    that goes on past its own end of an episode and says so (``info["env_terminated"]``, a
    foreign env with ``terminal = "continue"``) is recorded: ``metadata["env_terminated_at"]``
    gives, per trajectory, the step after which it first did (-1: never).

    The environment must provide ``info["state"]`` (noise-free observation) from
    ``reset`` and ``step``, and the control step ``dt`` (s) as an attribute. If
    ``info["applied_action"]`` is present (e.g. after clipping) it is recorded
    instead of the requested input.

    Parameters
    ----------
    env : gymnasium.Env
    n_trajectories, n_steps : int
        ``N`` trajectories of ``T`` steps.
    policy_inputs : array_like, shape (N, T, nu)
        Open-loop inputs, e.g. from :func:`vimpc.data.make_excitation`.
    seed : int
        Base seed; trajectory ``i`` uses ``seed + i``.
    reset_options : dict, optional
        Passed to ``env.reset``; must be JSON-serialisable (it is recorded).
    metadata : dict, optional
        Extra provenance merged into the dataset metadata (e.g. the excitation).
    progress : bool
        Show a tqdm progress bar over trajectories.
    initial_states : array_like, shape (N, nobs), optional
        Exact start states (the env's ``reset(options={"state": ...})``); not together
        with ``reset_options``.
    feedback : callable, optional
        ``feedback(obs, t) -> u``: the input at step ``k`` is ``feedback(obs_k, t_k) +
        policy_inputs[i, k]`` (the excitation then a dither on the feedback's input, as data
        are gathered on a rig around a controller); its ``reset()``, if it has one, is
        called before each trajectory.

    Returns
    -------
    Dataset
        ``metadata`` holds env id and class, seed, sizes, dt, reset options,
        what ``env.unwrapped.metadata_for_dataset()`` returns, and ``metadata``.
    """
    n = positive_int("n_trajectories", n_trajectories)
    T = positive_int("n_steps", n_steps)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise InputError(f"seed must be an int, got {seed!r}")
    u_all = _shaped("policy_inputs", policy_inputs, (n, T, None), "n_trajectories, n_steps, nu")
    nu = u_all.shape[2]
    if initial_states is not None:
        if reset_options is not None:
            raise InputError("give reset_options or initial_states, not both")
        initial_states = _shaped("initial_states", initial_states, (n, None), "N start states")
    space = env.action_space
    action_shape = getattr(space, "shape", None)
    if action_shape is not None and int(np.prod(action_shape)) != nu:
        raise InputError(
            f"policy_inputs has {nu} inputs per step but env.action_space has shape "
            f"{action_shape}; give policy_inputs the shape ({n}, {T}, {int(np.prod(action_shape))})"
        )
    try:
        dt = float(env.get_wrapper_attr("dt"))
    except AttributeError:
        raise InputError(
            f"env {env.unwrapped.__class__.__name__} has no attribute 'dt'; rollout_env needs the "
            "control step in seconds as env.dt"
        ) from None

    def state_of(info: Mapping[str, Any], where: str) -> np.ndarray:
        if "state" not in info:
            raise InputError(
                f"env.{where} must put the noise-free state in info['state'], got info keys "
                f"{sorted(info)}"
            )
        return np.asarray(info["state"], dtype=np.float64).reshape(-1)

    obs = states = None
    inputs = np.empty((n, T, nu))
    ended = [-1] * n  # the step after which an env that goes on had called the episode over
    trajectories: Any = range(n)
    if progress:
        from tqdm.auto import tqdm

        trajectories = tqdm(trajectories, desc="rollout", unit="traj")
    for i in trajectories:
        options = reset_options if initial_states is None else {"state": initial_states[i]}
        o, info = env.reset(seed=int(seed) + i, options=options)
        o = np.asarray(o, dtype=np.float64).reshape(-1)
        if obs is None:
            obs = np.empty((n, T + 1, o.size))
            states = np.empty((n, T + 1, o.size))
        obs[i, 0], states[i, 0] = o, state_of(info, "reset")
        if feedback is not None and callable(getattr(feedback, "reset", None)):
            feedback.reset()
        for k in range(T):
            u = u_all[i, k]
            if feedback is not None:
                u = np.asarray(feedback(o, k * dt), dtype=np.float64).reshape(nu) + u
            u = u.reshape(action_shape) if action_shape else u
            o, _, terminated, truncated, info = env.step(u)
            if (terminated or truncated) and k < T - 1:
                why = "terminated" if terminated else "was truncated"
                raise InputError(
                    f"episode {i} (seed {int(seed) + i}) {why} at step {k + 1} of {T}; rollout_env "
                    "needs episodes of n_steps steps: lower n_steps, raise the env's time limit "
                    "or keep the initial states away from termination"
                )
            if (terminated or info.get("env_terminated", False)) and ended[i] < 0:
                ended[i] = k + 1
            obs[i, k + 1] = np.asarray(o, dtype=np.float64).reshape(-1)
            states[i, k + 1] = state_of(info, "step")
            inputs[i, k] = np.asarray(info.get("applied_action", u), dtype=np.float64).reshape(nu)
            for name, value in (
                ("input", inputs[i, k]),
                ("observation", obs[i, k + 1]),
                ("state", states[i, k + 1]),
            ):
                if not np.all(np.isfinite(value)):
                    raise InputError(
                        f"trajectory {i} (seed {int(seed) + i}) has a non-finite {name} at step "
                        f"{k + 1} of {T}: {value.tolist()}; a failed step is no sample: check "
                        "policy_inputs (finite) and the env's step"
                    )
    spec = env.spec
    meta = {
        "env_id": None if spec is None else spec.id,
        "env_class": env.unwrapped.__class__.__name__,
        "seed": int(seed),
        "n_trajectories": n,
        "n_steps": T,
        "dt": dt,
        "reset_options": None if reset_options is None else dict(reset_options),
        "initial_states": "given" if initial_states is not None else "env",
        **getattr(env.unwrapped, "metadata_for_dataset", lambda: {})(),
        **(metadata or {}),
    }
    if any(k >= 0 for k in ended):
        meta["env_terminated_at"] = ended
    t = np.tile(np.arange(T + 1) * dt, (n, 1))
    return Dataset(t=t, obs=obs, states=states, inputs=inputs, dt=dt, metadata=meta)


def add_noise(
    data: Dataset | Any, std: Any, rng: np.random.Generator | int
) -> Dataset | np.ndarray:
    """Add zero-mean Gaussian observation noise.

    Parameters
    ----------
    data : Dataset or array_like, shape (..., nobs)
        For a Dataset the noise is added to ``obs`` (``states`` is kept) and
        ``metadata["added_noise_std"]`` records ``std``.
    std : float or array_like, shape (nobs,)
        Standard deviation per observation entry, in its units; >= 0.
    rng : numpy.random.Generator or int
        Random generator, or a seed.

    Returns
    -------
    Dataset or ndarray
        Same type and shape as ``data``.
    """
    arr = data.obs if isinstance(data, Dataset) else np.asarray(data, dtype=np.float64)
    std_a = np.asarray(std, dtype=np.float64)
    if std_a.ndim > 1 or (std_a.ndim == 1 and std_a.shape[0] != arr.shape[-1]):
        raise InputError(
            f"std must be a scalar or have shape ({arr.shape[-1]},), got shape {std_a.shape}"
        )
    if not np.all(np.isfinite(std_a)) or np.any(std_a < 0):
        raise InputError(f"std must be finite and >= 0, got {std_a.tolist()}")
    noisy = arr + std_a * _generator(rng).standard_normal(arr.shape)
    if not isinstance(data, Dataset):
        return noisy
    meta = {**data.metadata, "added_noise_std": std_a.tolist()}
    return data.replace(obs=noisy, metadata=meta)
