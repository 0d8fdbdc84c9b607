"""``vimpc/MujocoPlant-v0``: any MJCF mechanism as a plant, its state as the observation.

The MJCF files of vimpc's four catalog systems ship in ``scenarios/mujoco/``
(:func:`shipped_mjcf`); each file's header says how vimpc's ``(q, v)`` and ``u`` map to
MuJoCo's ``qpos``, ``qvel`` and ``ctrl`` in ``vimpc-`` lines that :func:`read_header` reads
as linear maps (``header.q_map(qpos)``, ``header.u_map(ctrl)``). This module imports ``mujoco`` (the ``mujoco``
extra: ``pip install "vimpc[mujoco]"``); importing ``vimpc_envs`` does not load it.
"""

from __future__ import annotations

import math
import os
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from vimpc import _checks
from vimpc.errors import InputError, SolverError

from ._mjcf_header import LinearMap as LinearMap
from ._mjcf_header import MjcfHeader as MjcfHeader
from ._mjcf_header import read_header as read_header

try:
    import mujoco
    from gymnasium import spaces, utils
    from gymnasium.envs.mujoco import MujocoEnv
except ImportError as exc:  # pragma: no cover - the extra is part of dev
    raise ImportError(
        f'vimpc/MujocoPlant-v0 needs MuJoCo ({exc}); install it with `pip install "vimpc[mujoco]"`'
    ) from exc

SHIPPED = ("pendulum", "cartpole", "fourbar", "rolling_disk")
# The equality constraints hold to this at reset (their residual's norm: m for connect).
ASSEMBLY_TOLERANCE = 1e-10
# The drawn degrees of freedom move to their drawn values in increments no larger than this
# (rad or m), the others following by Newton steps, so a linkage stays on its branch.
ASSEMBLY_INCREMENT = 0.05
_NEWTON_ITERATIONS = 50
_BAD_STATE_WARNINGS = (
    mujoco.mjtWarning.mjWARN_BADQPOS,
    mujoco.mjtWarning.mjWARN_BADQVEL,
    mujoco.mjtWarning.mjWARN_BADQACC,
)


def shipped_mjcf(name: str) -> Path:
    """The installed path of a shipped MJCF file: ``name`` one of ``pendulum``,
    ``cartpole``, ``fourbar``, ``rolling_disk``, optionally with ``_variant`` (the plant
    variant: masses, damping and armature changed as its header says)."""
    base = name.removesuffix("_variant")
    _checks.one_of("MJCF name", base, SHIPPED)
    path = Path(str(resources.files("vimpc_scenarios") / "mujoco" / f"{name}.xml"))
    if not path.is_file():
        raise InputError(f"the shipped MJCF file {path} is missing; reinstall vimpc")
    return path


def load_model(xml_file: Any) -> mujoco.MjModel:
    """Compile an MJCF file; a missing or unparsable file raises :class:`InputError`
    naming ``xml_file``, the path and MuJoCo's own message."""
    if not isinstance(xml_file, (str, os.PathLike)):
        raise InputError(f"xml_file must be a path to an MJCF file, got {xml_file!r}")
    path = os.path.abspath(os.fspath(xml_file))
    try:
        return mujoco.MjModel.from_xml_path(path)
    except ValueError as exc:
        reason = "does not exist" if not os.path.exists(path) else "is no valid MJCF model"
        raise InputError(f"xml_file {path!r} {reason}; MuJoCo says: {str(exc).strip()}") from None


def _half_widths(name: str, value: Any, size: int) -> np.ndarray:
    """A scalar or a length-``size`` vector of half-widths ``>= 0``."""
    if np.ndim(value) == 0:
        value = [_checks.nonnegative(name, value)] * size
    x = _checks.finite_vector(name, value, size)
    if np.any(x < 0):
        raise InputError(f"{name} are half-widths and must be >= 0, got {x.tolist()}")
    return x


def _constraint_jacobian(model: mujoco.MjModel, data: mujoco.MjData) -> np.ndarray:
    """The constraint Jacobian ``efc_J`` as a dense ``(nefc, nv)`` array."""
    if mujoco.mj_isSparse(model):
        J = np.zeros((data.nefc, model.nv))
        for row in range(data.nefc):
            start = data.efc_J_rowadr[row]
            entries = slice(start, start + data.efc_J_rownnz[row])
            J[row, data.efc_J_colind[entries]] = data.efc_J[entries]
        return J
    return np.asarray(data.efc_J[: data.nefc * model.nv]).reshape(data.nefc, model.nv)


def _equality(model: mujoco.MjModel, data: mujoco.MjData) -> tuple[np.ndarray, np.ndarray]:
    """The equality constraints' residual and Jacobian at ``data.qpos``."""
    mujoco.mj_fwdPosition(model, data)
    rows = data.efc_type[: data.nefc] == mujoco.mjtConstraint.mjCNSTR_EQUALITY
    return np.array(data.efc_pos[: data.nefc][rows]), _constraint_jacobian(model, data)[rows]


class MujocoPlantEnv(MujocoEnv, utils.EzPickle):
    """A MuJoCo mechanism from an MJCF file, observed through its full state.

    ## Description
    The physics are MuJoCo's (``mj_step`` with the file's integrator, time step, joint
    damping, armature, contacts and soft equality constraints). The env adds no task:
    it is a plant for a controller whose model comes from elsewhere. The shipped files
    (:func:`shipped_mjcf`) say in their headers how vimpc's ``(q, v, u)`` map to
    ``qpos``, ``qvel``, ``ctrl``.

    ## Action Space
    ``Box(low, high, (nu,), float64)`` from the actuators' ``ctrlrange`` (every actuator
    must be ``ctrllimited``); ``ctrl = action``, clipped to the box. Units: the
    actuator's input, ``u / gear`` [N m or N divided by the gear].

    ## Observation Space
    ``Box(-inf, inf, (nq + nv,), float64)``: ``concat(qpos, qvel)``, in the joints' units
    (hinge [rad], [rad/s]; slide [m], [m/s]; a free or ball joint's quaternion entries
    are dimensionless, its rates [rad/s]). No noise, never clipped.

    ## Rewards
    Always ``0.0``: the controller's cost is its own.

    ## Starting State
    A base state, then uniform noise. The base is the ``<keyframe>`` named or indexed by
    ``keyframe`` (its ``qpos``, ``qvel``), or the model's ``qpos0`` at rest. Noise:
    ``U(-qpos_noise, qpos_noise)`` per degree of freedom added in the tangent space
    (``mj_integratePos``; for hinge and slide joints that is ``qpos`` itself [rad, m]) and
    ``U(-qvel_noise, qvel_noise)`` on ``qvel`` [rad/s, m/s]. With equality constraints
    (a closed loop), the degrees of freedom with a zero ``qpos_noise`` follow: the drawn
    ones move from the base to their drawn values in increments of at most
    ``ASSEMBLY_INCREMENT = 0.05`` (rad or m), the others solved by Newton steps after
    each, so a linkage stays on the branch of its base and starts assembled (residual
    norm ``<= ASSEMBLY_TOLERANCE = 1e-10``, m for ``connect``); the rates with a zero
    ``qvel_noise`` follow the drawn ones so that ``J qvel = 0`` (least squares).
    Example: the shipped four-bar with ``qpos_noise=(pi, 0, 0)`` starts at a crank angle
    drawn over the full turn, the coupler and rocker assembled; the pendulum with
    ``qpos_noise=pi`` anywhere on its circle. ``reset(options={"state": x})`` starts at
    ``x = concat(qpos, qvel)`` exactly (no projection).

    ## Episode End
    ``terminated = True`` only when the state is no longer finite: a non-finite
    ``qpos``/``qvel``, or MuJoCo's warning that it met a bad position, velocity or
    acceleration in the step (``mj_step`` then resets the data to ``qpos0`` by itself,
    so the observation would look healthy; MuJoCo also appends its warning to
    ``MUJOCO_LOG.TXT`` in the current folder). Never truncated: the caller picks the
    length (e.g. ``gymnasium.make(..., max_episode_steps=200)``). ``info``:
    ``equality_residual``, the norm of the equality constraints' residual after the
    step (0 without constraints; m for ``connect``), and ``time`` [s].

    ## Arguments
    - ``xml_file`` (required): path to the MJCF file (relative to the current folder).
    - ``frame_skip=1``: MuJoCo steps per env step; ``dt = timestep * frame_skip`` [s].
    - ``keyframe=None``: name or index of the base ``<keyframe>``.
    - ``qpos_noise=0.0``, ``qvel_noise=0.0``: half-widths (scalar or one per degree of
      freedom, ``nv`` entries) [rad or m; rad/s or m/s].
    - ``render_mode=None``, ``width=480``, ``height=480``: as gymnasium's ``MujocoEnv``.

    ## Version History
    - v0: first version.
    """

    metadata = {"render_modes": ["human", "rgb_array", "depth_array"]}

    def __init__(
        self,
        xml_file: Any,
        frame_skip: int = 1,
        keyframe: str | int | None = None,
        qpos_noise: Any = 0.0,
        qvel_noise: Any = 0.0,
        render_mode: str | None = None,
        width: int = 480,
        height: int = 480,
    ) -> None:
        utils.EzPickle.__init__(
            self, xml_file, frame_skip, keyframe, qpos_noise, qvel_noise, render_mode, width, height
        )
        model = load_model(xml_file)  # a clear error before MujocoEnv meets the file
        path = os.path.abspath(os.fspath(xml_file))
        frame_skip = _checks.positive_int("frame_skip", frame_skip)
        if render_mode is not None:
            _checks.one_of("render_mode", render_mode, self.metadata["render_modes"])
        limited = model.actuator_ctrllimited.astype(bool)
        if not np.all(limited):
            names = [model.actuator(i).name or f"#{i}" for i in np.flatnonzero(~limited)]
            raise InputError(
                f"xml_file {path!r}: every actuator needs a ctrlrange (the action space), "
                f'but {names} have none; give them ctrlrange="low high"'
            )
        self._key = self._keyframe_index(model, keyframe, path)
        self._qpos_noise = _half_widths("qpos_noise", qpos_noise, model.nv)
        self._qvel_noise = _half_widths("qvel_noise", qvel_noise, model.nv)
        if model.neq and np.all(self._qpos_noise > 0):
            raise InputError(
                f"qpos_noise draws all {model.nv} degrees of freedom of {path!r}, but its "
                "equality constraints need some to follow the drawn ones: give those a zero "
                f"half-width, got {self._qpos_noise.tolist()}"
            )
        self._start: np.ndarray | None = None
        self.xml_file = path
        observation_space = spaces.Box(
            -np.inf, np.inf, shape=(model.nq + model.nv,), dtype=np.float64
        )
        MujocoEnv.__init__(
            self,
            path,
            frame_skip,
            observation_space=observation_space,
            render_mode=render_mode,
            width=width,
            height=height,
        )
        self.metadata = {**self.metadata, "render_fps": int(np.round(1.0 / self.dt))}
        # where the equality constraints are evaluated, so the simulation's data stay as
        # mj_step left them
        self._scratch = mujoco.MjData(self.model)

    @staticmethod
    def _keyframe_index(model: mujoco.MjModel, keyframe: Any, path: str) -> int | None:
        if keyframe is None:
            return None
        names = [model.key(i).name for i in range(model.nkey)]
        if isinstance(keyframe, str):
            if keyframe not in names:
                _checks.one_of(f"keyframe of {path!r}", keyframe, names)
            return names.index(keyframe)
        if isinstance(keyframe, bool) or not isinstance(keyframe, (int, np.integer)):
            raise InputError(f"keyframe must be a name, an index or None, got {keyframe!r}")
        if not 0 <= keyframe < model.nkey:
            raise InputError(
                f"keyframe index must be in [0, {model.nkey}) for {path!r} (keyframes "
                f"{names}), got {keyframe!r}"
            )
        return int(keyframe)

    # -- spaces --------------------------------------------------------------------
    def _set_action_space(self) -> spaces.Box:
        low, high = self.model.actuator_ctrlrange.copy().T
        self.action_space = spaces.Box(low=low, high=high, dtype=np.float64)
        return self.action_space

    # -- the runtime verbs -------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        options = {} if options is None else options
        if not isinstance(options, dict):
            raise InputError(f"options must be a dict or None, got {options!r}")
        _checks.known_keys("options", options, ("state",))
        self._start = None
        if "state" in options:
            n = self.model.nq + self.model.nv
            self._start = _checks.finite_vector("options['state']", options["state"], n)
        return super().reset(seed=seed)

    def reset_model(self) -> np.ndarray:
        if self._start is not None:
            qpos, qvel = self._start[: self.model.nq], self._start[self.model.nq :]
        else:
            qpos, qvel = self._draw()
        self.set_state(qpos, qvel)
        return self._get_obs()

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        ctrl = _checks.finite_vector("action", action, self.model.nu)
        ctrl = np.clip(ctrl, self.action_space.low, self.action_space.high)
        before = self._bad_state_count()
        self.do_simulation(ctrl, self.frame_skip)
        obs = self._get_obs()
        terminated = bool(not np.all(np.isfinite(obs)) or self._bad_state_count() > before)
        info = {"equality_residual": self._equality_residual(), "time": float(self.data.time)}
        if self.render_mode == "human":
            self.render()
        return obs, 0.0, terminated, False, info

    def _get_obs(self) -> np.ndarray:
        return np.concatenate([self.data.qpos, self.data.qvel]).astype(np.float64)

    def _get_reset_info(self) -> dict[str, Any]:
        return {"equality_residual": self._equality_residual(), "time": float(self.data.time)}

    # -- the starting state --------------------------------------------------------------
    def _bad_state_count(self) -> int:
        return sum(int(self.data.warning[int(w)].number) for w in _BAD_STATE_WARNINGS)

    def _equality_residual(self) -> float:
        if not self.model.neq:
            return 0.0
        self._scratch.qpos[:] = self.data.qpos
        return float(np.linalg.norm(_equality(self.model, self._scratch)[0]))

    def _base(self) -> tuple[np.ndarray, np.ndarray]:
        if self._key is None:
            return self.model.qpos0.copy(), np.zeros(self.model.nv)
        return self.model.key_qpos[self._key].copy(), self.model.key_qvel[self._key].copy()

    def _draw(self) -> tuple[np.ndarray, np.ndarray]:
        qpos, qvel = self._base()
        dq = self.np_random.uniform(-self._qpos_noise, self._qpos_noise)
        dv = self.np_random.uniform(-self._qvel_noise, self._qvel_noise)
        qvel = qvel + dv
        if not self.model.neq:
            mujoco.mj_integratePos(self.model, qpos, dq, 1.0)
            return qpos, qvel
        scratch = self._scratch
        free = self._qpos_noise == 0
        n = max(1, math.ceil(float(np.max(np.abs(dq))) / ASSEMBLY_INCREMENT))
        qpos = self._assembled(scratch, qpos, free)
        for _ in range(n):
            mujoco.mj_integratePos(self.model, qpos, dq / n, 1.0)
            qpos = self._assembled(scratch, qpos, free)
        scratch.qpos[:] = qpos
        _, J = _equality(self.model, scratch)
        follow = self._qvel_noise == 0
        if np.any(follow) and J.size:
            fix = np.linalg.lstsq(J[:, follow], -(J @ qvel), rcond=None)[0]
            qvel[follow] += fix
        return qpos, qvel

    def _assembled(self, scratch: mujoco.MjData, qpos: np.ndarray, free: np.ndarray) -> np.ndarray:
        """``qpos`` with the ``free`` degrees of freedom moved so that the equality
        constraints hold (Gauss-Newton, least-squares steps)."""
        qpos = qpos.copy()
        for _ in range(_NEWTON_ITERATIONS):
            scratch.qpos[:] = qpos
            r, J = _equality(self.model, scratch)
            if np.linalg.norm(r) <= ASSEMBLY_TOLERANCE:
                return qpos
            step = np.zeros(self.model.nv)
            step[free] = np.linalg.lstsq(J[:, free], -r, rcond=None)[0]
            mujoco.mj_integratePos(self.model, qpos, step, 1.0)
        raise SolverError(
            f"the equality constraints of {self.xml_file!r} could not be met at reset from "
            f"qpos {qpos.tolist()} (residual {float(np.linalg.norm(r)):.3g} after "
            f"{_NEWTON_ITERATIONS} Newton steps); draw a smaller qpos_noise or choose another "
            "keyframe"
        )
