"""How often the SymDLNN's symmetry verdict is wrong, on systems whose answer is known.

Six systems, forced snapshots (the midpoint integrator, 5 substeps per step, random step
inputs) from Halton starts in a box, one SymDLNN fit (one generator) per system and seed,
the seed drawing both the data and the network:

- with one affine symmetry: the rotor (a pendulum without gravity: the angle's
  translation), the cart-pendulum (the cart's translation), Kepler (the rotation about
  the origin);
- with none: the pendulum, Hénon–Heiles, the double pendulum.

A fit's learned generator is *right* where its unit vector ``(w, vec M)`` in the data's
coordinates lies within cosine ``RIGHT_COSINE`` of the answer (either sign); on a system
with none no generator is right. The family's verdict (``vimpc.models.families.dlnn``:
``found``, ``ambiguous`` or ``absent``, judged on the warm-up network's dynamics), and
beside it L_d's invariance verdict (``status_invariance``), is then

- a false "found": ``found`` for a generator that is not right (the issue's bar: at most
  5 % of the fits whose generator is not right);
- a false "absent": not ``found`` for a right generator (bar: at most 10 % of the fits
  whose generator is right).

Both rates are given with their Clopper-Pearson 95 % intervals, and how often the fit
found the right generator at all.

    python tests/experiments/dlnn_verdicts.py [--seeds 0 1 2 3 4]

writes results/dlnn_verdicts/verdicts.{csv,md} (one row per fit) and rates.{csv,md}.
``--data paper --systems cart kepler --out DIR``: the same fits on the paper's one unforced
training trajectory of each (``_dlnn_systems``) instead of the forced box data.
``--data paper100 --systems cart kepler --out DIR``: the paper's multi-trajectory case, 100
unforced trajectories of the paper's length and step (:func:`paper_many`), from Halton starts
in a box around the paper's training start (the paper does not say how it drew them).
``--data ring --systems kepler --out DIR``: Kepler's starts spread over the whole circle
(:func:`ring_starts`) instead of its box (a slice of the plane at ``x`` 0.8-1.2).
``--start dynamics --out DIR``: the generators start at the warm-up network's dynamics
spectrum (``symmetry_start = "dynamics"``) instead of random unit vectors.
``--quick --out DIR``: one seed, two systems, 30 epochs.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _quick import add_options, parse  # noqa: E402
from _tables import clopper_pearson, write_table  # noqa: E402

from vimpc.data import make_excitation  # noqa: E402
from vimpc.data.dataset import Dataset  # noqa: E402
from vimpc.data.rollout import rollout_model  # noqa: E402
from vimpc.data.sampling import halton  # noqa: E402
from vimpc.errors import FitWarning, InputError  # noqa: E402
from vimpc.integrators import VariationalIntegrator  # noqa: E402
from vimpc.mechanics import CartPendulum, DoublePendulum, HenonHeiles, Kepler, Pendulum  # noqa: E402
from vimpc.models._integrated import integrator_model  # noqa: E402
from vimpc.models.families.dlnn import FIT_DEGRADATION, SYMMETRY_RATIO, DLNNModel  # noqa: E402

ROOT = Path(__file__).parents[2]
OUT = ROOT / "results" / "dlnn_verdicts"
DT = 0.05
RIGHT_COSINE = 0.99
TRAJECTORIES, STEPS = 20, 20
R = 1.0 / np.sqrt(2.0)
# name: (system, start box low, high, input amplitude, the answer (w, vec M) or None)
SYSTEMS = {
    "rotor": (Pendulum(g=0.0), [-2.0, -2.0], [2.0, 2.0], 1.0, [1.0, 0.0]),
    "cart": (CartPendulum(), [-1.0, np.pi - 0.8, -1.0, -1.0], [1.0, np.pi + 0.8, 1.0, 1.0],
             3.0, [1.0, 0.0, 0.0, 0.0, 0.0, 0.0]),
    "kepler": (Kepler(), [0.8, -0.6, -0.4, 0.6], [1.2, 0.6, 0.4, 1.2], 0.3,
               [0.0, 0.0, 0.0, R, -R, 0.0]),
    "pendulum": (Pendulum(), [-2.0, -2.0], [2.0, 2.0], 1.0, None),
    "henon_heiles": (HenonHeiles(), [-0.4, -0.4, -0.4, -0.4], [0.4, 0.4, 0.4, 0.4], 0.3, None),
    "double_pendulum": (DoublePendulum(), [-1.0, -1.0, -1.0, -1.0], [1.0, 1.0, 1.0, 1.0],
                        1.0, None),
}  # fmt: skip
SETTINGS = dict(hidden=[32, 32], epochs=2000, warmup=500, lr=1e-2, symmetries=1,
                degeneracy_weight=1e-3)  # fmt: skip
QUICK = dict(hidden=[8], epochs=30, warmup=10)


def ring_starts(low, high, seed: int) -> np.ndarray:
    """Kepler's starts of the box ``(x, y, x', y')`` turned about the origin by angles
    spread over the whole circle: radius in ``[low[0], high[0]]``, radial and tangential
    speeds in the box's ``x'`` and ``y'`` ranges, the angle uniform in ``[0, 2 pi)`` (one
    Halton set scrambled by ``seed``)."""
    r, a, vr, vt = halton([low[0], 0.0, low[2], low[3]], [high[0], 2 * np.pi, high[2], high[3]],
                          TRAJECTORIES, seed=seed).T  # fmt: skip
    c, s = np.cos(a), np.sin(a)
    return np.column_stack([r * c, r * s, vr * c - vt * s, vr * s + vt * c])


def snapshots(system, low, high, amplitude, seed: int, ring: bool = False) -> Dataset:
    """``TRAJECTORIES`` forced snapshot trajectories of ``STEPS`` steps from Halton starts
    (scrambled by ``seed``) in the box (``ring``: :func:`ring_starts`), random steps up to
    ``amplitude`` (``seed``)."""
    model = integrator_model(VariationalIntegrator(system, "midpoint"), DT, substeps=5)
    rng = np.random.default_rng(seed)
    x0s = ring_starts(low, high, seed) if ring else halton(low, high, TRAJECTORIES, seed=seed)
    nu = system.nu
    U = np.stack([make_excitation("random_steps", STEPS, nu, DT, rng, low=[-amplitude] * nu,
                                  high=[amplitude] * nu) for _ in range(TRAJECTORIES)])  # fmt: skip
    X = rollout_model(model, x0s, U)
    t = np.tile(DT * np.arange(STEPS + 1), (TRAJECTORIES, 1))
    return Dataset(t, X, X, U, DT, {"system": system.name})


def paper_data(name: str) -> tuple:
    """The DLNN paper's one unforced training trajectory of the cart-pendulum or Kepler
    (``_dlnn_systems``) and its system."""
    from _dlnn_systems import CART, KEPLER, cart_system, dataset, kepler_system, truth

    system, spec = (cart_system(), CART) if name == "cart" else (kepler_system(), KEPLER)
    return system, dataset(system, spec["h"], truth(system, spec["h"], spec["x0"], spec["steps"]))


#: the boxes of :func:`paper_many`'s starts, about the paper's training starts, in the
#: paper's coordinates: the cart-pendulum's (s, phi, s', phi') with phi = 0 upright around
#: (0.1, 0.1, 0, 0), Kepler's (x, y, x', y') around (1, 0, 0, 0.6)
PAPER_BOXES = {
    "cart": ([-0.4, -0.2, -0.3, -0.3], [0.6, 0.4, 0.3, 0.3]),
    "kepler": ([0.8, -0.2, -0.2, 0.5], [1.2, 0.2, 0.2, 0.7]),
}
PAPER_TRAJECTORIES = 100


def paper_many(name: str, seed: int) -> tuple:
    """The paper's multi-trajectory case: ``PAPER_TRAJECTORIES`` unforced trajectories of the
    paper's length and step of the cart-pendulum or Kepler (``_dlnn_systems``), from Halton
    starts (scrambled by ``seed``) in :data:`PAPER_BOXES`, as one Dataset, and its system."""
    from _dlnn_systems import CART, KEPLER, cart_system, kepler_system, truth

    system, spec = (cart_system(), CART) if name == "cart" else (kepler_system(), KEPLER)
    low, high = PAPER_BOXES[name]
    X = np.stack([truth(system, spec["h"], x0, spec["steps"])
                  for x0 in halton(low, high, PAPER_TRAJECTORIES, seed=seed)])  # fmt: skip
    K, T = X.shape[0], X.shape[1] - 1
    t = np.tile(spec["h"] * np.arange(T + 1), (K, 1))
    U = np.zeros((K, T, system.nu))
    return system, Dataset(t, X, X, U, spec["h"], {"system": system.name})


def fit_one(name: str, seed: int, settings: dict, data_kind: str = "box") -> dict:
    system, low, high, amplitude, answer = SYSTEMS[name]
    if data_kind == "paper":
        system, data = paper_data(name)
    elif data_kind == "paper100":
        system, data = paper_many(name, seed)
    else:
        data = snapshots(system, low, high, amplitude, seed, ring=data_kind == "ring")
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FitWarning)
        model = DLNNModel(system, data.dt, seed=seed, progress=False, **settings).fit(data)
    (g,) = model.symmetries_
    xi = np.concatenate([np.ravel(g["w"]), np.ravel(g["M"])])
    xi = xi / np.linalg.norm(xi)
    cosine = float(abs(xi @ np.asarray(answer)) / np.linalg.norm(answer)) if answer else None
    right = answer is not None and cosine >= RIGHT_COSINE
    found = g["status"] == "found"
    invariant = g["status_invariance"] == "found"
    # what the warm-up network's dynamics say the symmetry is: their best motion, and the
    # two smallest changes (the second's distance from the threshold: how well it is singled
    # out)
    dynamics = model.near_symmetries_["dynamics"]
    best = np.concatenate([np.ravel(dynamics["generators"][0]["w"]),
                           np.ravel(dynamics["generators"][0]["M"])])  # fmt: skip
    best_cosine = (float(abs(best @ np.asarray(answer)) / np.linalg.norm(answer))
                   if answer else "")  # fmt: skip

    def error(said_found):
        if said_found and not right:
            return "false found"
        return "false absent" if right and not said_found else ""

    return {
        "system": name,
        "data": data_kind,
        "symmetric": answer is not None,
        "seed": seed,
        "xi": np.round(xi, 4).tolist(),
        "cosine to the answer": "" if cosine is None else cosine,
        "right generator": right,
        "verdict": g["status"],
        "dynamics ratio": g["dynamics_ratio"],
        "smallest two dynamics ratios": np.round(dynamics["ratios"][:2], 3).tolist(),
        "best dynamics motion, cosine to the answer": best_cosine,
        "error": error(found),
        "verdict (L_d invariance)": g["status_invariance"],
        "ratio": g["ratio"],
        "degradation": g["degradation"],
        "error (L_d invariance)": error(invariant),
        "fit_s": round(time.perf_counter() - start, 1),
    }


#: the two verdicts each fit is judged by: the change of the warm-up network's DEL equations
#: (the family's ``status``) and L_d's invariance (``status_invariance``), with their columns
VERDICTS = (("dynamics verdict", "error"), ("L_d invariance verdict", "error (L_d invariance)"))


def rates(rows: list[dict]) -> list[dict]:
    out = []
    wrong_kinds = (
        ("false found (of the fits whose generator is not right)", False, "false found"),
        ("false absent (of the fits whose generator is right)", True, "false absent"),
    )
    for verdict, key in VERDICTS:
        for label, right, wrong in wrong_kinds:
            pool = [r for r in rows if r["right generator"] == right]
            k, n = sum(r[key] == wrong for r in pool), len(pool)
            lo, hi = clopper_pearson(k, n) if n else (float("nan"), float("nan"))
            out.append({"rate": f"{label}, {verdict}", "errors": k, "fits": n,
                        "share": k / n if n else float("nan"), "cp95 low": lo,
                        "cp95 high": hi})  # fmt: skip
    symmetric = [r for r in rows if r["symmetric"]]
    k = sum(r["right generator"] for r in symmetric)
    lo, hi = clopper_pearson(k, len(symmetric)) if symmetric else (float("nan"),) * 2
    out.append({"rate": "right generator found (of the fits on symmetric systems)",
                "errors": "", "fits": len(symmetric),
                "share": k / len(symmetric) if symmetric else float("nan"),
                "cp95 low": lo, "cp95 high": hi})  # fmt: skip
    return out


def _shown(path: Path) -> str:
    path = path.resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS))
    parser.add_argument(
        "--data", choices=("box", "paper", "paper100", "ring"), default="box",
        help="box: forced trajectories from a box of starts; paper: the DLNN paper's one "
             "unforced trajectory (cart and kepler only); paper100: 100 unforced "
             "trajectories of its length and step from a box around its start (cart and "
             "kepler only); ring: kepler's box turned over the whole circle (kepler only)",
    )  # fmt: skip
    parser.add_argument(
        "--start", choices=("random", "dynamics"), default="random",
        help="where the generators start (the family's symmetry_start)",
    )  # fmt: skip
    add_options(parser, OUT)
    args = parse(parser, argv, OUT, quick={"seeds": [0], "systems": ["rotor", "pendulum"]})
    if args.data in ("paper", "paper100") and set(args.systems) - {"cart", "kepler"}:
        raise InputError(
            f"--data {args.data} has the paper's trajectories of cart and kepler only, got "
            f"--systems {' '.join(args.systems)}"
        )
    if args.data == "ring" and set(args.systems) != {"kepler"}:
        raise InputError(f"--data ring is Kepler's, got --systems {' '.join(args.systems)}")
    settings = {**SETTINGS, **(QUICK if args.quick else {}), "symmetry_start": args.start}
    from tqdm.auto import tqdm

    jobs = [(name, seed) for seed in args.seeds for name in args.systems]
    rows = []
    for name, seed in tqdm(jobs, desc="SymDLNN fits"):
        rows.append(fit_one(name, seed, settings, args.data))
    table = rates(rows)
    for r in table:
        print(f"{r['rate']}: {r['errors']} of {r['fits']} ({r['share']:.2f})")
    command = "python tests/experiments/dlnn_verdicts.py " + " ".join(
        ["--seeds", *map(str, args.seeds), "--systems", *args.systems, "--data", args.data,
         *(["--start", args.start] if args.start != "random" else []),
         *(["--out", _shown(args.out)] if args.out.resolve() != OUT.resolve() else [])]
    )  # fmt: skip
    described = ", ".join(f"{k} = {v}" for k, v in settings.items())
    data = (
        f"{TRAJECTORIES} forced trajectories of {STEPS} steps at dt = {DT} from Halton starts "
        "in a box, the seed drawing the data and the network"
        if args.data == "box"
        else f"{TRAJECTORIES} forced trajectories of {STEPS} steps at dt = {DT} from Halton "
        "starts of the box turned about the origin over the whole circle (radius, radial and "
        "tangential speeds in the box's ranges), the seed drawing the data and the network"
        if args.data == "ring"
        else f"the DLNN paper's multi-trajectory case: {PAPER_TRAJECTORIES} unforced "
        "trajectories of its length and step from Halton starts in a box around its training "
        f"start ({'; '.join(f'{k}: {v[0]} to {v[1]}' for k, v in PAPER_BOXES.items())}), "
        "the seed drawing the starts and the network"
        if args.data == "paper100"
        else "the DLNN paper's one unforced training trajectory, the seed drawing the network"
    )
    intro = (
        f"One SymDLNN fit per system and seed ({described}; {data}). A generator is right "
        f"within cosine {RIGHT_COSINE} of the answer (either sign); on the systems without a symmetry none is. False found: verdict `found` "
        "for a generator that is not right; false absent: `ambiguous` or `absent` for a "
        "right one. Each fit is judged by two verdicts: `verdict`, the family's: the change of "
        "the warm-up network's DEL equations when the generator moves the data by their "
        "spread, within SYMMETRY_RATIO times the warm-up's own DEL residual (`dynamics "
        "ratio`: that change over the residual), `ambiguous` where more directions than "
        "generators pass (`smallest two dynamics ratios`: the spectrum's, whose best motion, "
        "the one the warm-up network's dynamics change least under, lies at `best dynamics "
        "motion, cosine to the answer`); and `verdict (L_d invariance)`: L_d's own invariance on fresh and "
        "data pairs, within SYMMETRY_RATIO times the warm-up's relative DEL residual "
        "(`ratio`), the symmetry phase leaving that residual within FIT_DEGRADATION times "
        "the warm-up's (`degradation`), which decides whether a found generator has a "
        "conserved quantity of the learned L_d; "
        f"SYMMETRY_RATIO = {SYMMETRY_RATIO}, FIT_DEGRADATION = {FIT_DEGRADATION}."
    )
    write_table(args.out, "verdicts", "SymDLNN verdicts on systems with a known answer",
                command, intro, rows)  # fmt: skip
    write_table(args.out, "rates", "SymDLNN verdict error rates", command,
                intro + " Intervals: Clopper-Pearson 95 %.", table)  # fmt: skip


if __name__ == "__main__":
    main()
