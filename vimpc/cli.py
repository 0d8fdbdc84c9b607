"""The ``vimpc`` command: parse the arguments and dispatch; ``fit`` a scenario's model,
``list`` scenarios, print the ``schema``. ``run`` and ``sweep`` call the library
(:func:`vimpc.runs.run_scenario`, :func:`vimpc.runs.run_sweep`)."""

from __future__ import annotations

# few and light, and a Ctrl-C among them ends the command as one in main() does (the
# package's own imports do the same in vimpc/__init__.py); the commands import what they use
try:
    import argparse
    import logging
    import os
    import sys
    import warnings
    from pathlib import Path

    from vimpc._interrupt import MESSAGE, check, interrupt_latch, interrupted
    from vimpc.errors import ConfigError, VimpcError
except (KeyboardInterrupt, Exception) as exc:  # a SystemExit goes on as it is
    from vimpc import _interrupt

    if isinstance(exc, KeyboardInterrupt) or _interrupt.interrupted():
        _interrupt.exit_if_command()  # as in vimpc/__init__.py
    raise


def cmd_run(args: argparse.Namespace) -> int:
    from vimpc.runs.run import run_scenario

    result = run_scenario(
        args.scenario,
        overrides=args.set or [],
        out=args.out,
        workers=args.workers,
        backend=args.backend,
        address=args.address,
        refit=args.refit,
        plots=not args.no_plots,
        progress=not args.quiet,
        resume=args.resume,
    )
    return result.exit_status


def cmd_fit(args: argparse.Namespace) -> int:
    from vimpc import pipeline, scenario
    from vimpc.model_file import FILE_SUFFIX, save
    from vimpc.runs.session import obtain_model
    from vimpc.scenario.catalog import find_scenario

    if args.workers < 1:
        raise ConfigError(f"--workers must be a positive integer, got {args.workers}")
    cfg = scenario.load_scenario(find_scenario(args.scenario), args.set or [])
    if cfg.data.fits != 1:
        raise ConfigError(
            f"data.fits = {cfg.data.fits}: vimpc fit writes one model; vimpc run makes "
            "the fits (fit k collects with data.seed and data.heldout_seed + k * 10^7). Set "
            "data.fits = 1, with those seeds for fit k"
        )
    c_folder = getattr(args, "c", None)
    out = None if args.output is None else Path(args.output)
    if out is None:
        pass
    elif out.suffix != FILE_SUFFIX:
        raise ConfigError(f"--output must end in {FILE_SUFFIX}, got {str(out)!r}")
    elif out.is_dir():
        raise ConfigError(f"--output {str(out)!r} is a folder; give a file name ending in .vimpc")
    elif out.exists() and not args.overwrite:
        raise ConfigError(f"{str(out)!r} exists; choose another path or pass --overwrite")
    elif not out.parent.is_dir():
        raise ConfigError(f"--output {str(out)!r}: the folder {str(out.parent)!r} does not exist")
    elif not os.access(out.parent, os.W_OK | os.X_OK):
        raise ConfigError(f"--output {str(out)!r}: the folder {str(out.parent)!r} is not writable")
    env = pipeline.build_env(cfg)
    source = obtain_model(
        cfg, env, refit=args.refit, progress=not args.quiet, workers=args.workers, log=print
    )
    model = source.model
    if c_folder is not None:
        from vimpc.export_c import check_generable

        check_generable(model)  # before anything is written
        if out is None:
            return _write_c(model, Path(c_folder))
    try:
        path = save(model, out, overwrite=args.overwrite)
    except FileExistsError:
        raise ConfigError(
            f"{str(out)!r} appeared while the model was being built; choose another --output "
            "or pass --overwrite (a cached fit is reused)"
        ) from None
    parts = [f"residual: {'yes' if model.implicit else 'no'}"]
    if model.bound is not None:
        parts.append(f"bound with delta = {model.delta}")
    print(
        f"wrote {path}: {model.info.get('system', '?')} model ({model.info.get('model', '?')}), "
        f"dt = {model.dt} s, nx = {model.nx}, nu = {model.nu}, " + ", ".join(parts)
    )
    print(
        "use it with model.path in a scenario, vimpc.load_model(path), or read the JSON and "
        "casadi.Function.deserialize"
    )
    if c_folder is not None:
        return _write_c(model, Path(c_folder))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """``vimpc export``: a scenario's model to ``--output`` (.vimpc) and/or ``--c DIR``; a
    ``.vimpc`` file's model to ``--c DIR``. Everything is checked before any work."""
    from vimpc.model_file import FILE_SUFFIX, load

    from_file = args.scenario is not None and Path(args.scenario).suffix == FILE_SUFFIX
    if from_file:
        refused = [f for f, v in (("--output", args.output), ("--set", args.set)) if v]
        refused += ["--refit"] if args.refit else []
        if refused:
            raise ConfigError(
                f"{' and '.join(refused)} apply to a scenario, not to the model file "
                f"{args.scenario!r}; export a model file with --c DIR only"
            )
        if args.c is None:
            raise ConfigError(
                f"vimpc export {args.scenario} needs --c DIR (the folder of the C sources to "
                "write); the model is already a .vimpc file"
            )
    elif args.output is None and args.c is None:
        raise ConfigError(
            "vimpc export needs -o FILE.vimpc (the model file), --c DIR (C sources), or both"
        )
    if args.c is not None:
        _check_c_folder(Path(args.c))
    if not from_file:
        return cmd_fit(args)
    from vimpc.export_c import check_generable

    model = load(args.scenario)
    check_generable(model)
    return _write_c(model, Path(args.c))


def _check_c_folder(folder: Path) -> None:
    if folder.is_dir() and any(folder.iterdir()):
        raise ConfigError(
            f"--c {str(folder)!r} is a folder that is not empty, and nothing in it is "
            "overwritten; give a new or empty folder, or remove this one first"
        )
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"--c {str(folder)!r} is a file; give a new or empty folder")
    if not folder.absolute().parent.is_dir():
        raise ConfigError(
            f"--c {str(folder)!r}: the folder {str(folder.absolute().parent)!r} does not exist"
        )


def _write_c(model, folder: Path) -> int:
    from vimpc.export_c import export_c

    done = export_c(model, folder)
    print(
        f"wrote {done.folder}: {', '.join(done.files)} ({', '.join(done.functions)}); "
        f"build with make -C {done.folder}, run {done.folder}/example with "
        f"{model.nx} state entries"
    )
    return 0


def _description(path: Path) -> str:
    """The ``scenario.description`` of a file for the listing, or why it was skipped."""
    from vimpc.scenario import read_toml

    try:
        table = read_toml(path).get("scenario", {})
        desc = table.get("description", "") if isinstance(table, dict) else ""
        return desc if isinstance(desc, str) else ""
    except ConfigError as exc:
        return f"(skipped: {exc})"


def cmd_list(args: argparse.Namespace) -> int:
    import gymnasium
    import vimpc_envs  # noqa: F401  (registers the environment ids)

    from vimpc.scenario.catalog import shipped_folder, shipped_scenarios

    if args.dir is None:
        # the shipped scenarios, by the name that runs them from any folder
        entries = shipped_scenarios()
        folder = shipped_folder()
    else:
        folder = Path(args.dir)
        if not folder.is_dir():
            raise ConfigError(f"--dir {str(folder)!r} is not a folder")
        entries = {f.name: f for f in sorted(folder.glob("*.toml"))}
    if not entries:
        print(f"no scenarios in {folder}")
    width = max((len(name) for name in entries), default=0)
    for name, path in entries.items():
        print(f"{name:<{width}}  {_description(path)}")
    if args.dir is None and entries:
        example = "pendulum_swingup" if "pendulum_swingup" in entries else next(iter(entries))
        print(
            f"run one by name from any folder: vimpc run {example} (the file "
            f"{entries[example]}; copy it to start your own and run it by its path)"
        )
    else:
        print(f"({folder}; run one by its path)")
    if args.dir is None:
        from vimpc.scenario.catalog import shipped_sweeps

        sweeps = shipped_sweeps()
        for name, path in sweeps.items():
            print(f"sweep {name}: vimpc sweep {name} ({path})")
    print("environments: " + ", ".join(k for k in gymnasium.registry if k.startswith("vimpc/")))
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    from vimpc.scenario import schema_markdown

    print(schema_markdown(), end="")
    return 0


def _cmd_sweep(args: argparse.Namespace) -> int:
    from vimpc.runs.sweep import run_sweep

    result = run_sweep(
        args.sweep,
        overrides=args.set or [],
        out=args.out,
        workers=args.workers,
        backend=args.backend,
        address=args.address,
        refit=args.refit,
        plots=not args.no_plots,
        progress=not args.quiet,
        resume=args.resume,
    )
    return result.exit_status


def _backend_args(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument(
        "--backend",
        choices=("local", "ray"),
        default="local",
        help=f"where the {what} run: local worker processes, or Ray tasks (the same results; "
        'needs pip install "vimpc[ray]")',
    )
    p.add_argument(
        "--address",
        default=None,
        help="with --backend ray: auto, HOST:PORT or ray://HOST:PORT of an existing cluster "
        "(default: a local cluster on 127.0.0.1 with --workers CPUs, started and stopped here)",
    )


def build_parser() -> argparse.ArgumentParser:
    from vimpc import __version__
    from vimpc.runs.session import EXIT_ALL_SOLVES_FAILED
    from vimpc.runs.store import DEFAULT_OUT

    parser = argparse.ArgumentParser(
        prog="vimpc",
        description="Learning-based model-predictive control of mechanical systems: run a "
        "scenario, fit and export its model, list scenarios, print the scenario schema.",
    )
    parser.add_argument("--version", action="version", version=f"vimpc {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    def scenario_args(p: argparse.ArgumentParser, optional: bool = False) -> None:
        p.add_argument(
            "scenario",
            nargs="?" if optional else None,
            help="a scenario .toml file, or the name of a shipped one (vimpc list); an existing "
            "file wins over a shipped name",
        )
        p.add_argument(
            "--set", action="append", metavar="KEY.SUB=VALUE", help="override one key (repeatable)"
        )
        p.add_argument(
            "--refit", action="store_true", help="fit again instead of reusing a cached fit"
        )
        p.add_argument("--quiet", action="store_true", help="no progress bars")

    run = sub.add_parser(
        "run",
        help="run a scenario file",
        description="Run a scenario's episodes in closed loop. Results go to "
        "OUT/<scenario>/<UTC timestamp>/; while the run goes on the folder is named "
        "<timestamp>.partial, holds every episode finished so far and a run.json that lists "
        "the missing ones, and metrics.json is written last, when the run is complete.",
        epilog="exit codes: 0 complete; 2 an error vimpc explains (bad input is refused before "
        "any work; a run that fails later keeps its finished episodes for --resume); "
        f"{EXIT_ALL_SOLVES_FAILED} complete, but every solve failed (results written, "
        'metrics.json says "outcome": "all solves failed"); 130 interrupted (the finished '
        "episodes are kept and the command that resumes them is printed); 1 an unexpected "
        "error (finished episodes kept as on an interrupt). A killed run leaves its .partial "
        "folder: --resume finishes it, and the next run of the scenario names it.",
    )
    scenario_args(run, optional=True)
    run.add_argument(
        "--out", default=None, help=f"results root (default: {DEFAULT_OUT}; not with --resume)"
    )
    run.add_argument("--no-plots", action="store_true", help="skip the figures")
    run.add_argument(
        "--workers",
        type=int,
        default=1,
        help="episodes in parallel processes (same results); at most one per episode and one "
        "per usable core",
    )
    run.add_argument(
        "--resume",
        metavar="FOLDER",
        default=None,
        help="finish an unfinished run (its .partial folder): run only its missing episodes, "
        "with the configuration and model of its finished ones (a scenario and --set given "
        "too must match them)",
    )
    _backend_args(run, "episodes")
    run.set_defaults(func=cmd_run)
    sweep = sub.add_parser(
        "sweep",
        help="run a scenario under a grid or list of overrides and compare them",
        description="Run every configuration of a sweep file (scenario = a file or shipped "
        "name; [sweep] name and out; [set] overrides of all; [grid] key = [values], their "
        "product; [[runs]] explicit override sets, each crossed with the grid), each as a "
        "vimpc run in OUT/<name>/<configuration id>/, then summary.csv, summary.md (95 % "
        "intervals) and summary.png. Every configuration is checked before any work; the "
        "folder is <name>.partial until every configuration is complete.",
        epilog="exit codes: 0 complete; 2 an error vimpc explains, or configurations that "
        "failed (the others are kept; --resume runs what is missing); 130 interrupted (the "
        "finished episodes are kept and the command that resumes them is printed).",
    )
    sweep.add_argument(
        "sweep",
        nargs="?",
        help="a sweep .toml file, or the name of a shipped one (vimpc list); an existing file wins",
    )
    sweep.add_argument(
        "--set",
        action="append",
        metavar="KEY.SUB=VALUE",
        help="override one key of every configuration (repeatable; wins over [set])",
    )
    sweep.add_argument("--out", default=None, help="results root (default: sweep.out)")
    sweep.add_argument(
        "--workers",
        type=int,
        default=1,
        help="configurations in parallel processes (at most one per configuration and per "
        "core; each runs its episodes serially); with --backend ray: episodes (Ray tasks) "
        "at once",
    )
    sweep.add_argument(
        "--resume", metavar="FOLDER", default=None, help="finish an unfinished sweep folder"
    )
    sweep.add_argument("--refit", action="store_true", help="fit again instead of the cache")
    sweep.add_argument("--no-plots", action="store_true", help="skip the figures")
    sweep.add_argument("--quiet", action="store_true", help="no progress bar")
    _backend_args(sweep, "episodes (and fits)")
    sweep.set_defaults(func=_cmd_sweep)
    for name, text in (
        ("fit", "collect data, fit the scenario's model and write it to a .vimpc file"),
        (
            "export",
            "write a scenario's model (fitted, or built) to a .vimpc file and/or C99 sources; "
            "or a .vimpc file's model to C99 sources (--c DIR)",
        ),
    ):
        fit = sub.add_parser(name, help=text, description=text)
        scenario_args(fit)
        if name == "export":
            fit.add_argument(
                "-o", "--output", default=None, help="the .vimpc file to write (scenarios only)"
            )
            fit.add_argument(
                "--c",
                metavar="DIR",
                default=None,
                help="write the model's step, residual and bound with their Jacobians as "
                "self-contained C99 sources (one header, a Makefile, a main.c example) into "
                "DIR, a new or empty folder",
            )
        else:
            fit.add_argument("-o", "--output", required=True, help="the .vimpc file to write")
        fit.add_argument("--overwrite", action="store_true", help="replace an existing file")
        fit.add_argument(
            "--workers",
            type=int,
            default=1,
            help='closed-loop calibration episodes (data.calibration = "closed_loop") in '
            "parallel processes (the same model); at most one per episode and per usable core",
        )
        fit.set_defaults(func=cmd_export if name == "export" else cmd_fit)
    lst = sub.add_parser("list", help="list scenario files and environments")
    lst.add_argument(
        "--dir", default=None, help="folder of scenario files (default: the shipped scenarios)"
    )
    lst.set_defaults(func=cmd_list)
    schema = sub.add_parser("schema", help="print the scenario schema (markdown tables)")
    schema.set_defaults(func=cmd_schema)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:  # before the command's own handling was in place
        return _interrupted()
    except MemoryError:
        if interrupted():
            return _interrupted()
        # a count or size too large for the memory (or the limit, ulimit -v) there is
        print(
            "vimpc: error: out of memory: the command asked for more memory than this "
            "process may use (the machine's, or a limit such as ulimit -v); lower the counts "
            "and sizes in the scenario (episodes.count, episodes.steps, data.trajectories, "
            "data.steps, ...) or --workers. Finished episodes are kept as on any error",
            file=sys.stderr,
        )
        return 2


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    if hasattr(sys.stdout, "reconfigure"):  # lines appear as they are printed, also in a pipe
        sys.stdout.reconfigure(line_buffering=True)
    # the library's warnings (no compiler, a refused compiled library, ...) read as vimpc's
    warnings.formatwarning = _format_warning
    _show_progress_notes(not getattr(args, "quiet", False))
    with interrupt_latch():
        try:
            check()  # a Ctrl-C during the imports that CasADi swallowed
            return args.func(args)
        except KeyboardInterrupt:
            return _interrupted()
        except VimpcError as exc:
            if interrupted():  # an error a Ctrl-C caused inside CasADi
                return _interrupted()
            print(f"vimpc: error: {exc}", file=sys.stderr)
            return 2
        except OSError as exc:
            if interrupted():
                return _interrupted()
            # the file system said no (a name too long, a read-only or full disk, ...):
            # finished episodes are kept as on any error
            where = f": {str(exc.filename)[:200]!r}" if exc.filename else ""
            print(f"vimpc: error: {exc.strerror or exc}{where}", file=sys.stderr)
            return 2
        except Exception:
            if interrupted():
                return _interrupted()
            raise


def _format_warning(message, category, filename, lineno, line=None) -> str:
    return f"vimpc: warning: {message}\n"


class _StderrHandler(logging.StreamHandler):
    """A handler that writes to whatever ``sys.stderr`` is when a record comes."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


def _show_progress_notes(shown: bool) -> None:
    """The library's notes on one-off work (compiling a controller once per problem, or
    loading it from the compile cache) printed to stderr as they happen, or not (``--quiet``):
    a command decides for itself, whatever an earlier command in the same process chose."""
    logger = logging.getLogger("vimpc")
    ours = [h for h in logger.handlers if isinstance(h, _StderrHandler)]
    if not shown:
        for handler in ours:
            logger.removeHandler(handler)
    elif not ours:
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("vimpc: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)


def _interrupted() -> int:
    print(MESSAGE, file=sys.stderr)
    return 130


if __name__ == "__main__":
    sys.exit(main())
