"""A sweep's configuration as a task: its run folder run (or finished) as a resumed run is,
with what it prints going to its log; and its models obtained ahead, in the sweep's
process. An error ends as the task's :class:`Outcome`, not raised (a Ctrl-C is)."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from pathlib import Path

from vimpc.runs import session, store
from vimpc.runs.backends import LocalBackend


@dataclass(frozen=True)
class Outcome:
    """What a task ended with: the run's exit code, or the error that stopped it."""

    id: str
    code: int | None
    error: str | None


@dataclass(frozen=True)
class Task:
    """One configuration's run: its folder (the ``.partial`` one) and how to run it."""

    id: str
    stage: str
    log: str
    refit: bool
    plots: bool

    def run(self) -> Outcome:
        """Run (or finish) the configuration's run folder in this process, its episodes in
        turn, as a resumed run does; its printed output goes to ``log``."""
        # line by line, so a worker ended by a Ctrl-C keeps what its run printed
        with open(self.log, "a", encoding="utf-8", buffering=1) as log:
            try:
                with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
                    code = _finish_run(Path(self.stage), self)
                return Outcome(self.id, code, None)
            except Exception as exc:
                from vimpc._interrupt import interrupted

                if interrupted():  # an error a Ctrl-C caused inside CasADi
                    raise KeyboardInterrupt from None
                print(f"error: {type(exc).__name__}: {exc}", file=log)
                return Outcome(self.id, None, f"{type(exc).__name__}: {exc}")

    def failed(self, error: str) -> Outcome:
        """The outcome of the run stopped by ``error`` elsewhere (written to its log)."""
        with open(self.log, "a", encoding="utf-8") as log:
            print(f"error: {error}", file=log)
        return Outcome(self.id, None, error)


def _finish_run(stage: Path, task: Task) -> int:
    opened = store.open_run(stage)
    if opened is None:
        return 0
    cfg, manifest, lock = opened
    final = stage.with_name(stage.name[: -len(store.PARTIAL)])
    options = session.Options(
        workers=1,
        refit=task.refit and manifest["model"] is None,
        plots=task.plots,
        progress=False,
    )
    return session.run_session(
        cfg, LocalBackend(), options, time.perf_counter(), final, stage, manifest, lock,
        new=False,
    )  # fmt: skip


def obtain_models_first(
    stage: Path, cid: str, refit: bool, refitted: set[str], fresh: set[str] | None = None
) -> Outcome:
    """Obtain (load, build, take from the cache or fit) the models of configuration ``cid``
    whose run has none yet and record them in its manifest, as its run would; ``refit``
    fits each cache entry once per sweep (``refitted``). ``fresh``: the cached files this
    sweep has just fitted elsewhere (Ray tasks), recorded as fitted now by the first
    configuration that uses each. An error is returned, not raised."""
    from vimpc import pipeline, scenario

    run_stage = stage / (cid + store.PARTIAL)
    if not run_stage.is_dir() or (run_stage / store.METRICS).is_file():
        return Outcome(cid, None, None)
    with open(stage / f"{cid}.log", "a", encoding="utf-8", buffering=1) as log:
        lock = None
        try:
            with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
                lock = store.Lock(run_stage, wait=False)
                manifest = store.read_manifest(run_stage)
                if manifest is None or manifest.get("model") is not None:
                    return Outcome(cid, None, None)
                cfg = scenario.load_scenario(run_stage / store.CONFIG)
                key = pipeline.cache_key(pipeline.fit_config(cfg, 0))
                again = refit and key not in refitted
                refitted.add(key)
                options = session.Options(refit=again, progress=False)
                records = session.obtain_models(cfg, pipeline.build_env(cfg), options, print)
                for record in records:
                    if fresh is not None and record["path"] in fresh:
                        fresh.discard(record["path"])
                        print(f"(fitted as a Ray task: {record['path']})")
                        record.update(fitted_now=True, reused_cached_fit=False)
                manifest["model"] = records[0]
                if len(records) > 1:
                    manifest["fits"] = records
                store.write_manifest(run_stage, manifest)
            return Outcome(cid, None, None)
        except Exception as exc:
            from vimpc._interrupt import interrupted

            if interrupted():
                raise KeyboardInterrupt from None
            print(f"error: {type(exc).__name__}: {exc}", file=log)
            return Outcome(cid, None, f"{type(exc).__name__}: {exc}")
        finally:
            if lock is not None:
                lock.release()
