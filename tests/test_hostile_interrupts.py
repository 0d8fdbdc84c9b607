"""Ctrl-C while the ground truth's step is compiled to C.

CasADi's JIT runs the compiler through ``system()``, which ignores SIGINT in the caller
while it waits: a Ctrl-C then was lost, or killed only the compiler and the run went on
interpreted. :func:`vimpc._jit.compiled_now` runs the compiler as a Python subprocess (and
keeps the library in the compile cache).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import casadi as ca
import numpy as np
import pytest

from vimpc import _jit

needs_cc = pytest.mark.skipif(
    shutil.which("gcc") is None and shutil.which("cc") is None, reason="no C compiler"
)


@needs_cc
def test_compiled_now_keeps_name_ports_and_bits():
    x = ca.SX.sym("x", 3)
    u = ca.SX.sym("u")
    fn = ca.Function(
        "f", [x, u], [ca.sin(x) * u + ca.exp(-x), ca.sumsqr(x)], ["x", "u"], ["a", "b"]
    )
    compiled = _jit.compiled_now(fn)
    assert compiled is not None
    assert compiled.name() == "f"
    assert compiled.name_in() == ["x", "u"] and compiled.name_out() == ["a", "b"]
    rng = np.random.default_rng(0)
    for _ in range(5):
        xv, uv = rng.normal(size=3), rng.normal()
        for got, want in zip(compiled(xv, uv), fn(xv, uv), strict=True):
            assert np.array_equal(np.asarray(got), np.asarray(want))


def test_a_compiler_stopped_by_ctrl_c_raises_keyboard_interrupt(monkeypatch, tmp_path):
    # a Ctrl-C to the process group kills the compiler too: that is an interrupt, not a
    # failed compile to fall back from
    monkeypatch.setattr(_jit, "_COMPILER", [("/bin/true", "a compiler")])
    monkeypatch.setenv("VIMPC_CACHE", str(tmp_path))
    monkeypatch.setattr(
        subprocess,
        "run",
        lambda *a, **k: subprocess.CompletedProcess(a, -signal.SIGINT, b"", b""),
    )
    x = ca.SX.sym("x")
    with pytest.raises(KeyboardInterrupt):
        _jit.compiled_now(ca.Function("g", [x], [2 * x]))


def test_a_failed_compile_falls_back(monkeypatch, tmp_path):
    monkeypatch.setattr(_jit, "_COMPILER", [("/bin/false", "a compiler that fails")])
    monkeypatch.setenv("VIMPC_CACHE", str(tmp_path))
    x = ca.SX.sym("x")
    with pytest.warns(RuntimeWarning, match="function 'g' did not compile .*exit 1"):
        assert _jit.compiled_now(ca.Function("g", [x], [2 * x])) is None
    assert not list((tmp_path / "compiled").glob("*.so"))


@needs_cc
@pytest.mark.parametrize("group", [False, True], ids=["to the process", "to its group"])
def test_ctrl_c_during_the_compile_stops_the_program(group, tmp_path):
    # a function whose C takes the compiler a second or more; SIGINT 0.3 s after the
    # compile starts
    child = textwrap.dedent(
        """
        import time
        import casadi as ca
        from vimpc import _jit
        x = ca.SX.sym("x", 30)
        e = x
        for i in range(150):
            e = ca.sin(e) * ca.cos(e + i)
        fn = ca.Function("big", [x], [e])
        print("compiling", flush=True)
        try:
            _jit.compiled_now(fn)
            print("compiled", flush=True)
            time.sleep(30)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", child],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "VIMPC_CACHE": str(tmp_path)},  # nothing compiled before
    )
    try:
        assert proc.stdout.readline().strip() == "compiling"
        time.sleep(0.3)
        start = time.monotonic()
        if group:
            os.killpg(proc.pid, signal.SIGINT)
        else:
            os.kill(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    if out.startswith("compiled"):
        pytest.skip("the compile finished within 0.3 s: nothing to interrupt")
    assert out.strip() == "interrupted"
    assert time.monotonic() - start < 10


# the console script, as pip writes it: argv[0] is its path when vimpc is first imported
CONSOLE = "import sys; sys.argv[0] = '/usr/bin/vimpc'; from vimpc.cli import main; sys.exit(main())"


@pytest.mark.parametrize(
    "entry", [["-c", CONSOLE], ["-m", "vimpc.cli"]], ids=["console script", "python -m"]
)
@pytest.mark.parametrize("command", ["list", "run"])
def test_ctrl_c_however_early_ends_the_command_in_one_line(entry, command, tmp_path):
    # a SIGINT 0.15-0.4 s in landed in the imports and printed their traceback; delays
    # from the start of the interpreter to the command's own work, wherever each lands
    # on a busy machine
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    args = ["list"] if command == "list" else [
        "run", os.path.join(root, "scenarios", "pendulum_swingup.toml"), "--out",
        str(tmp_path), "--set", "episodes.steps=400", "--set", "episodes.count=20", "--no-plots",
        "--quiet",
    ]  # fmt: skip
    delays = [0.05, 0.15, 0.25, 0.4, 0.7, 1.2]
    if command == "list":  # finishes in about half a second: delays across its own length
        start = time.monotonic()
        subprocess.run([sys.executable, *entry, *args], cwd=root, capture_output=True)
        length = time.monotonic() - start
        delays = [f * length for f in (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)]
    interrupted = 0
    for delay in delays:
        child = subprocess.Popen(
            [sys.executable, *entry, *args],
            cwd=root,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        time.sleep(delay)
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=300)
        text = err.decode()
        if "init_import_site" in text or child.returncode == -signal.SIGINT:
            continue  # in the interpreter's own start, before any of vimpc ran
        assert "Traceback" not in text, (delay, text)
        if child.returncode == 0:  # finished before the signal (list on an idle machine)
            assert command == "list" and b"environments:" in out, (delay, text)
            continue
        assert child.returncode == 130, (delay, child.returncode, text)
        assert text.strip().splitlines()[-1].startswith("vimpc: interrupted"), (delay, text)
        # one line, with a run's note of what it kept before it
        assert len([ln for ln in text.splitlines() if "interrupted" in ln]) == 1, text
        interrupted += 1
    assert interrupted >= 3  # most delays land in the imports or the command


def test_a_ctrl_c_in_a_callback_of_the_imports_is_latched_without_a_traceback():
    # a SIGINT that lands in a weakref callback (as importlib's module locks have) cannot
    # raise there: Python printed "Exception ignored in ..." with its traceback
    code = textwrap.dedent(
        """
        import signal, sys, weakref
        sys.argv[0] = "/usr/bin/vimpc"
        from vimpc import _interrupt
        _interrupt.latch_early()
        class Lock: pass
        lock = Lock()
        ref = weakref.ref(lock, lambda _: signal.raise_signal(signal.SIGINT))
        del lock
        print("latched" if _interrupt.interrupted() else "lost")
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "latched", done.stderr
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr


def test_an_interrupt_an_extension_turned_into_an_import_error_ends_in_one_line():
    # a SIGINT inside numpy's C import came out as "ImportError: PyCapsule_Import could
    # not import module 'datetime'" with its traceback; here an import that does the same
    code = textwrap.dedent(
        """
        import signal, sys
        class Extension:
            def find_spec(self, name, path, target=None):
                if name == "vimpc.model_file":
                    try:
                        signal.raise_signal(signal.SIGINT)
                    except KeyboardInterrupt as exc:
                        raise ImportError("PyCapsule_Import could not import module") from exc
        sys.meta_path.insert(0, Extension())
        sys.argv[0] = "/usr/bin/vimpc"
        import vimpc
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 130, done.stderr
    assert done.stderr.strip().splitlines() == [
        "vimpc: interrupted; no result was written as complete"
    ], done.stderr
    # a program that imports vimpc (not the command) gets the import's own error
    program = code.replace('sys.argv[0] = "/usr/bin/vimpc"', 'sys.argv[0] = "mine.py"')
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1 and "KeyboardInterrupt" in done.stderr, done.stderr


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS as on Linux")
def test_a_count_too_large_for_the_memory_limit_is_a_message_not_a_traceback(tmp_path):
    import resource

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

    def limit() -> None:  # as ulimit -v 3000000 would
        resource.setrlimit(resource.RLIMIT_AS, (3 * 2**30, 3 * 2**30))

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "vimpc.cli",
            "run",
            os.path.join(root, "scenarios", "pendulum_swingup.toml"),
            "--out",
            str(tmp_path),
            "--set",
            "episodes.count=1000000000",
            "--set",
            "episodes.steps=3",
            "--no-plots",
            "--quiet",
        ],  # fmt: skip
        cwd=root,
        capture_output=True,
        text=True,
        preexec_fn=limit,
        timeout=600,
    )
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 2, done.stderr
    # refused before any work where the records cannot fit the machine's memory, else the
    # limit's MemoryError as a message: either names the setting to lower
    assert done.stderr.startswith("vimpc: error:") and "episodes.count" in done.stderr


def test_a_memory_error_in_a_command_is_a_message_not_a_traceback(monkeypatch, capsys):
    from vimpc import cli

    def exhausted(argv):
        raise MemoryError

    monkeypatch.setattr(cli, "_main", exhausted)
    assert cli.main(["list"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("vimpc: error: out of memory") and "Traceback" not in err
