"""vimpc: learning-based model-predictive control of mechanical systems.

Importing vimpc loads neither torch nor gymnasium. vimpc's gymnasium environments
(``vimpc/Pendulum-v0``, ``vimpc/CartPole-v0``, ``vimpc/FourBar-v0``,
``vimpc/RollingDisk-v0``) are registered by importing their package, ``vimpc_envs``
(or by naming it in the id: ``gymnasium.make("vimpc_envs:vimpc/Pendulum-v0")``).

A scenario runs from Python with :func:`vimpc.run_scenario`, a sweep with
:func:`vimpc.run_sweep` (both loaded on first use).
"""

from vimpc import _interrupt

# a Ctrl-C in the command's first second lands here, in the imports, before main() can
# catch it: the command says so in one line (a program that imports vimpc gets it raised)
_interrupt.latch_early()
try:
    from vimpc.dynamics import DiscreteModel as DiscreteModel
    from vimpc.errors import ConfigError as ConfigError
    from vimpc.errors import InputError as InputError
    from vimpc.errors import NotFittedError as NotFittedError
    from vimpc.errors import SolverError as SolverError
    from vimpc.errors import VimpcError as VimpcError
    from vimpc.model_file import load as load_model
    from vimpc.model_file import save as save_model
    from vimpc.models.base import ModelFamily as ModelFamily
    from vimpc.models.families.nominal import NominalModel as NominalModel
except (KeyboardInterrupt, Exception) as exc:  # a SystemExit goes on as it is
    # the interrupt itself, or what an extension made of it (numpy's C import turns one
    # into "ImportError: PyCapsule_Import could not import module 'datetime'")
    if isinstance(exc, KeyboardInterrupt) or _interrupt.interrupted():
        _interrupt.exit_if_command()
    raise

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "DiscreteModel",
    "InputError",
    "ModelFamily",
    "NominalModel",
    "NotFittedError",
    "SolverError",
    "VimpcError",
    "__version__",
    "load_model",
    "run_scenario",
    "run_sweep",
    "save_model",
]


def __getattr__(name: str):
    """``run_scenario`` and ``run_sweep`` (:mod:`vimpc.runs`), loaded on first use so that
    ``import vimpc`` stays light."""
    if name in ("run_scenario", "run_sweep"):
        # by name, not an import statement: the package's root is imported by every layer
        # (for __version__), and the run layer sits above them all
        import importlib

        return getattr(importlib.import_module("vimpc.runs"), name)
    raise AttributeError(f"module 'vimpc' has no attribute {name!r}")
