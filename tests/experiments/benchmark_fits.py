"""One fit of a benchmark sweep's configuration, timed: does a family's fit go through on the
sweep's data, and how long does it take, before the sweep is run.

    python tests/experiments/benchmark_fits.py scenarios/sweeps/benchmark_pendulum.toml:clnn:40 ...

Each argument is ``SWEEP:FAMILY:BUDGET``: the sweep's first configuration of that family and
data budget (``data.trajectories``; the first plant of its grid), fitted once (``data.fits =
1``) as ``vimpc run`` fits it (data collected, fitted, its bound calibrated and validated),
in a cache of its own so that nothing is reused. The table gives the fit's wall time
(collection and fit, not the controller), the one-step RMSE on the validation data (the
root mean square over the observation's entries, in mixed units) and the bound's coverage
there, or the error that stopped the fit.

Writes ``results/structure_benchmark/fits.{md,csv}``. ``--quick --out DIR``: the nominal
family on the pendulum sweep's smallest budget.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
from _quick import RESULTS, ROOT, add_options, command, parse
from _tables import write_table

OUT = RESULTS / "structure_benchmark"


def fit_once(sweep: Path, family: str, budget: int) -> dict:
    from vimpc import pipeline
    from vimpc.errors import VimpcError
    from vimpc.runs.sweep import read_sweep
    from vimpc.scenario.records import as_scenario

    plan = read_sweep(sweep)
    chosen = None
    for cfg in plan.configs:
        cfg = as_scenario(cfg)
        if cfg.model.family == family and cfg.data.trajectories == budget:
            chosen = cfg
            break
    if chosen is None:
        raise SystemExit(f"{sweep}: no configuration of family {family!r} at budget {budget}")
    cfg = chosen.replace(data=chosen.data.replace(fits=1))
    row = {"sweep": sweep.stem, "family": family, "budget": budget}
    with tempfile.TemporaryDirectory() as cache:
        old = os.environ.get("VIMPC_CACHE")
        os.environ["VIMPC_CACHE"] = cache
        try:
            env = pipeline.build_env(cfg)
            start = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                report = pipeline.obtain_model(cfg, env).report
            row["fit_s"] = round(time.perf_counter() - start, 1)
            rmse = [v for v in report["one_step_rmse"] if v is not None]
            row["one_step_rmse"] = float(np.sqrt(np.mean(np.square(rmse))))
            row["validation_coverage"] = report.get("validation_coverage", float("nan"))
            row["error"] = ""
        except VimpcError as exc:
            row.update(fit_s=float("nan"), one_step_rmse=float("nan"))
            row.update(validation_coverage=float("nan"), error=str(exc)[:300])
        finally:
            if old is None:
                os.environ.pop("VIMPC_CACHE", None)
            else:
                os.environ["VIMPC_CACHE"] = old
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("cases", nargs="*", help="SWEEP:FAMILY:BUDGET")
    add_options(parser, OUT)
    quick = {"cases": [f"{ROOT / 'scenarios' / 'sweeps' / 'benchmark_pendulum.toml'}:nominal:10"]}
    args = parse(parser, argv, OUT, quick=quick)
    if not args.cases:
        parser.error("give at least one SWEEP:FAMILY:BUDGET")
    rows = []
    for case in args.cases:
        sweep, family, budget = case.rsplit(":", 2)
        row = fit_once(Path(sweep), family, int(budget))
        print(row, flush=True)
        rows.append(row)
    write_table(
        args.out,
        "fits",
        "Benchmark sweeps: one fit of a configuration, timed",
        command(__file__, args.argv),
        "Per sweep, family and data budget (its first plant), one fit as `vimpc run` makes "
        "it, in an empty cache: the wall time of collection and fit [s] (not the "
        "controller's compilation), the validation data's one-step RMSE (root mean square "
        "over the entries, mixed units) and the bound's coverage there; `error`: what "
        "stopped a fit.",
        rows,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
