"""Compiling CasADi functions to C with the system's C compiler (CasADi's JIT).

One place for the compiler flags and the directory the generated sources and libraries go
to: a per-process temporary directory, removed when the process exits (CasADi's own
cleanup is off: it would run after the directory is gone when a function outlives the
exit handlers).

CasADi's JIT runs the compiler through C's ``system()``, which ignores SIGINT in the
calling process while it waits: a Ctrl-C during the compile is lost (or kills only the
compiler, and the caller falls back to the interpreter and carries on). A function that
needs no derivatives is therefore compiled by :func:`compiled_now` instead, and an NLP by
:func:`cached_library`: CasADi writes the C source, Python runs the compiler as a
subprocess (a Ctrl-C stops it and raises ``KeyboardInterrupt`` as anywhere else) and CasADi
loads the library.

A controller's NLP is compiled once per problem, not once per process: :func:`cached_library`
writes the C source of a solver's functions, names it by a hash of that source (which
encodes the model and the problem) with the compiler and CasADi's version, and keeps the
library in ``<cache>/compiled`` (:func:`cache_root`) beside a record of its SHA-256. A second
run, or a worker process, loads it in milliseconds; a library whose bytes no longer match its
record (changed or truncated since it was written) is refused and compiled again. The record
detects damage, not an attacker who can rewrite both files.

Dense products (a network's layers) run on a BLAS: the products a model asks a CasADi BLAS
plugin for call ``dgemm_`` or BLASFEO in the generated C, and CasADi's own dense product
(the loop the products' derivatives come out as) is replaced by a ``dgemm_`` call
(:func:`dense_products_on_blas`); the library links CasADi's own OpenBLAS and BLASFEO
(:func:`blas_links`). Their sums run in another order than the interpreter's loops, so such
results differ from interpreted ones by round-off.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import casadi as ca

# -O3 compiles about twice as long as -O1 (the NLP of the nominal cart-pole: 10.8 against
# 5.2 s, of the GP-VI cart-pole 44.8 against 22.9 s, once: the library is cached) and solves
# faster with the same iterates (median solve, 3-6 episodes interleaved in one process: the
# nominal cart-pole 0.649 against 0.682 ms, the GP-VI cart-pole 2.71 against 2.98 ms, the
# Hamel rolling disk 4.53 against 4.90 ms; -O2 4.59 ms). No FMA contraction keeps the
# compiled arithmetic identical to CasADi's interpreter.
FLAGS = ["-O3", "-ffp-contract=off"]
_DIRECTORY: str | None = None
_LOG = logging.getLogger("vimpc")
#: what has been said once in this process (no compiler, an unwritable cache folder)
_SAID: set[str] = set()
_COMPILER: list[tuple[str, str] | None] = []
#: the threads CasADi's OpenBLAS was set to in this process (none yet: empty)
_BLAS_THREADS: list[int] = []


def cache_root() -> Path:
    """Where vimpc caches fitted models and compiled code: ``$VIMPC_CACHE``, else
    ``$XDG_CACHE_HOME/vimpc``, else ``~/.cache/vimpc``."""
    if os.environ.get("VIMPC_CACHE"):
        return Path(os.environ["VIMPC_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "vimpc"


def _say_once(key: str, message: str) -> None:
    if key not in _SAID:
        _SAID.add(key)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def compiler() -> tuple[str, str] | None:
    """The C compiler (``$CC``, else ``gcc``, else ``cc``) and its version line, or None
    (said once per process) when none runs."""
    if not _COMPILER:
        found = None
        for name in ([os.environ["CC"]] if os.environ.get("CC") else []) + ["gcc", "cc"]:
            path = shutil.which(name)
            if path is None:
                continue
            try:
                done = subprocess.run([path, "--version"], capture_output=True, text=True)
            except OSError:
                continue
            if done.returncode == 0:
                found = (path, (done.stdout.splitlines() or [""])[0])
                break
        _COMPILER.append(found)
    if _COMPILER[0] is None:
        _say_once(
            "compiler",
            "no C compiler runs here ($CC, gcc or cc): controllers solve with CasADi's "
            "interpreter, which is slower (median solves 1.5x longer for the nominal "
            "cart-pole, 1.7x for the GP-VI cart-pole: results/benchmarks/gpvi.md); install "
            "gcc to compile them",
        )
    return _COMPILER[0]


def check_writable(folder: Path) -> None:
    """Make ``folder`` if needed and write a file there (permissions are not the whole
    story: root, read-only mounts), or raise the ``OSError`` that stopped it."""
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile(dir=folder):
        pass


def _cache_folder() -> Path:
    """``<cache>/compiled``, or this process's temporary directory (said once) when that
    cannot be written: the library is then compiled for this process alone."""
    folder = cache_root() / "compiled"
    try:
        check_writable(folder)
    except OSError as exc:
        _say_once(
            "cache",
            f"the compile cache {str(folder)!r} cannot be written ({exc.strerror or exc}): "
            "compiled controllers are kept for this process only and compiled again by the "
            "next; point VIMPC_CACHE at a writable folder",
        )
        return Path(directory())
    return folder


#: the BLAS routines generated code calls for CasADi's BLAS plugins (``ca.mtimes(A, B,
#: plugin)``: a network's dense layers), each with the library of CasADi's own folder that
#: holds it: the OpenBLAS its "classic" plugin runs on, and BLASFEO
_BLAS_LIBRARIES = {
    b"CASADI_BLAS_DGEMM": "casadi-tp-openblas",
    b"blasfeo_blas_dgemm": "blasfeo",
}


def _casadi_folder() -> Path:
    """The folder of CasADi's package, which holds the libraries it ships."""
    return Path(ca.__file__).parent


@functools.cache
def _casadi_library(stem: str) -> str | None:
    """The file name of CasADi's own ``lib<stem>.so`` (the shortest of its versioned
    names), or None where this CasADi does not ship it."""
    found = sorted(_casadi_folder().glob(f"lib{stem}.so*"), key=lambda f: len(f.name))
    return found[0].name if found else None


def blas_links(source: bytes) -> list[str]:
    """The linker flags for the BLAS libraries ``source`` (generated C) calls: CasADi's own
    copies, found at run time in CasADi's folder; none when it calls none."""
    names = [
        f"-l:{_casadi_library(stem) or f'lib{stem}.so'}"
        for symbol, stem in _BLAS_LIBRARIES.items()
        if symbol in source
    ]
    folder = _casadi_folder()
    return [f"-L{folder}", f"-Wl,-rpath,{folder}", *names] if names else []


#: the definition of CasADi's dense product in generated C, its own triple loop (the products
#: automatic differentiation derives from a network's carry no BLAS plugin) ...
_DENSE_PRODUCT = re.compile(
    rb"void casadi_mtimes_dense\(const casadi_real\* x, casadi_int nrow_x, casadi_int ncol_x,"
    rb"\s*const casadi_real\* y, casadi_int ncol_y, casadi_real\* z, casadi_int tr\) \{\n"
    rb"(?:.*\n)*?\}\n"
)
#: ... and the same product on CasADi's OpenBLAS from this many multiply-adds on (below, and
#: for the transposed product, which CasADi's generated code does not ask for, the same loop:
#: a BLAS call costs about what a few hundred multiply-adds do)
BLAS_FROM = 512
_DENSE_PRODUCT_ON_BLAS = (
    b"""#ifndef CASADI_BLAS_DGEMM
#define CASADI_BLAS_DGEMM dgemm_
#endif
extern void CASADI_BLAS_DGEMM(const char* transa, const char* transb, const int* m,
  const int* n, const int* k, const double* alpha, const double* A, const int* lda,
  const double* B, const int* ldb, const double* beta, double* C, const int* ldc);
void casadi_mtimes_dense(const casadi_real* x, casadi_int nrow_x, casadi_int ncol_x,
    const casadi_real* y, casadi_int ncol_y, casadi_real* z, casadi_int tr) {
  casadi_int i, j, k;
  if (!tr && nrow_x * ncol_x * ncol_y >= %d) {
    const char n = 'N';
    const double one = 1.0;
    const int rx = (int)nrow_x, cx = (int)ncol_x, cy = (int)ncol_y;
    CASADI_BLAS_DGEMM(&n, &n, &rx, &cy, &cx, &one, x, &rx, y, &cx, &one, z, &rx);
    return;
  }
  if (tr) {
    for (i=0; i<ncol_y; ++i) for (j=0; j<ncol_x; ++j) for (k=0; k<nrow_x; ++k)
      z[j + i*ncol_x] += x[k + j*nrow_x] * y[k + i*nrow_x];
  } else {
    for (i=0; i<ncol_y; ++i) for (j=0; j<nrow_x; ++j) for (k=0; k<ncol_x; ++k)
      z[j + i*nrow_x] += x[j + k*nrow_x] * y[k + i*ncol_x];
  }
}
"""
    % BLAS_FROM
)


def _single_threaded_blas() -> None:
    """CasADi's OpenBLAS (which compiled code links) on one thread, once per process: the
    products it gets are small (a network's layer times a few dozen columns), and its second
    thread only contends with the solver (four-bar CLNN, compiled linearisation: 0.74 ms a
    call on two threads, 0.60 on one, in a closed loop on 2 cores)."""
    if _BLAS_THREADS:
        return
    _BLAS_THREADS.append(1)
    name = _casadi_library("casadi-tp-openblas")
    if name is None:
        return
    import ctypes

    try:
        ctypes.CDLL(str(_casadi_folder() / name)).openblas_set_num_threads(1)
    except (OSError, AttributeError):
        pass


def dense_products_compile() -> bool:
    """Whether generated C runs dense products on a BLAS here (CasADi ships its OpenBLAS):
    :func:`dense_products_on_blas` and :func:`blas_links` apply."""
    return _casadi_library("casadi-tp-openblas") is not None


def dense_products_on_blas(source: bytes) -> bytes:
    """Generated C with CasADi's dense product (``casadi_mtimes_dense``) on CasADi's
    OpenBLAS from :data:`BLAS_FROM` multiply-adds on; unchanged where it has none or this
    CasADi ships no OpenBLAS. The derivatives of a network's products come out as that loop:
    it took 80 % of the compiled CLNN cart-pole NLP's time (``perf``, 15 steps)."""
    if not dense_products_compile():
        return source
    return _DENSE_PRODUCT.sub(lambda _: _DENSE_PRODUCT_ON_BLAS, source, count=1)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _verified(library: Path, record: Path, key: str) -> bool | None:
    """None: no artifact; True: the library matches its record; False: it does not."""
    if not library.exists() and not record.exists():
        return None
    try:
        meta = json.loads(record.read_text())
        return (
            meta.get("key") == key
            and meta.get("casadi") == ca.__version__
            and meta.get("sha256") == _digest(library)
        )
    except (OSError, ValueError):
        return False


def cached_library(write_source: Callable[[], str], what: str) -> Path | None:
    """The shared library compiled from the C source ``write_source()`` writes to the
    working directory (returning its file name), from the compile cache when it holds it,
    else compiled now (logged, with its time) and cached; None (with a warning where the
    compiler failed) when no C compiler runs or it fails. ``what`` names the code in
    messages."""
    found = compiler()
    if found is None:
        return None
    cc, version = found
    with contextlib.chdir(directory()):  # CasADi writes generated code to the working directory
        source = Path(directory()) / write_source()
    text = dense_products_on_blas(source.read_bytes())
    source.write_bytes(text)
    links = blas_links(text)
    if links:
        _single_threaded_blas()
    identity = json.dumps([cc, version, FLAGS, links, ca.__version__]).encode()
    key = hashlib.sha256(identity + b"\0" + text).hexdigest()[:32]
    folder = _cache_folder()
    library, record = folder / f"{key}.so", folder / f"{key}.json"
    with _locked(folder / f"{key}.lock"):
        state = _verified(library, record, key)
        if state:
            source.unlink(missing_ok=True)
            _LOG.info("the %s runs compiled, from the compile cache (%s)", what, library.name)
            return library
        if state is False:
            warnings.warn(
                f"refusing the compiled {what} {str(library)!r}: its bytes do not match its "
                f"record {record.name} (changed or truncated since it was written, or made by "
                "another CasADi); compiling it again",
                RuntimeWarning,
                stacklevel=2,
            )
            for stale in (record, library):
                stale.unlink(missing_ok=True)
        _LOG.info(
            "compiling the %s to C (%d kB of source; once: cached in %s)",
            what, len(text) // 1024, folder,
        )  # fmt: skip
        start = time.perf_counter()
        partial = folder / f"{key}.{os.getpid()}.partial.so"
        try:
            done = subprocess.run(
                [cc, "-fPIC", "-shared", *FLAGS, str(source), "-o", str(partial), *links],
                capture_output=True,
                text=True,
                check=False,
            )
        except OSError as exc:
            done = subprocess.CompletedProcess([cc], 1, "", f"could not run it: {exc}")
        finally:
            source.unlink(missing_ok=True)
        if done.returncode == -signal.SIGINT:
            partial.unlink(missing_ok=True)
            raise KeyboardInterrupt
        if done.returncode != 0:
            partial.unlink(missing_ok=True)
            warnings.warn(
                f"the {what} did not compile ({cc} exit {done.returncode}: "
                f"{done.stderr.strip()[-300:]}); it runs interpreted",
                RuntimeWarning,
                stacklevel=2,
            )
            return None
        meta = {"key": key, "casadi": ca.__version__, "compiler": version, "flags": FLAGS,
                "links": links, "sha256": _digest(partial), "what": what}  # fmt: skip
        os.replace(partial, library)
        partial_record = folder / f"{key}.{os.getpid()}.partial.json"
        partial_record.write_text(json.dumps(meta, indent=1))
        os.replace(partial_record, record)  # the record last: it marks the library complete
        _LOG.info("compiled the %s in %.1f s", what, time.perf_counter() - start)
        return library


@contextlib.contextmanager
def _locked(path: Path):
    """Hold an exclusive lock on ``path`` (processes compiling the same library wait for
    the first one instead of compiling it again); no lock where the file cannot be made."""
    import fcntl

    try:
        handle = open(path, "a")
    except OSError:
        yield
        return
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def directory() -> str:
    """The per-process directory compiled code goes to (made on first use)."""
    global _DIRECTORY
    if _DIRECTORY is None:
        _DIRECTORY = tempfile.mkdtemp(prefix="vimpc_jit_")
        atexit.register(shutil.rmtree, _DIRECTORY, ignore_errors=True)
    return _DIRECTORY + os.sep


def options(derivatives: int = 0) -> dict[str, Any]:
    """CasADi function options that compile it, and its derivative functions up to order
    ``derivatives`` when a solver asks for them."""
    opts: dict[str, Any] = {
        "jit": True,
        "compiler": "shell",
        "jit_cleanup": False,
        "jit_options": {
            "flags": FLAGS,
            "directory": directory(),
            "cleanup": False,
            "verbose": False,
        },
    }
    if derivatives > 0:
        opts["der_options"] = options(derivatives - 1)
    return opts


def compiled(fn: ca.Function, derivatives: int = 0) -> ca.Function | None:
    """``fn`` as compiled C with the same inputs and outputs, or None when it has no SX form
    (a rootfinder inside) or no C compiler works. Its first ``derivatives`` orders of
    derivative functions are compiled when first asked for."""
    try:
        sx = fn.expand()
    except RuntimeError:
        return None
    args = sx.sx_in()
    try:
        return ca.Function(
            fn.name(), args, sx.call(args), fn.name_in(), fn.name_out(), options(derivatives)
        )
    except RuntimeError:
        return None


def compiled_now(fn: ca.Function, what: str | None = None) -> ca.Function | None:
    """``fn`` (no derivatives needed) as compiled C with the same name, inputs and
    outputs, from the compile cache or compiled now (:func:`cached_library`), or None when no
    C compiler works. The compiler runs as a Python subprocess, so a Ctrl-C (to the process
    or its group) raises ``KeyboardInterrupt`` here rather than being ignored by
    ``system()`` or turned into a fallback to the interpreter. ``what`` names it in
    messages (default: its name)."""

    def write_source() -> str:
        generator = ca.CodeGenerator("vimpc_function.c", {"with_header": False})
        generator.add(fn)
        generator.generate()
        return "vimpc_function.c"

    what = what or f"function {fn.name()!r}"
    try:
        library = cached_library(write_source, what)
    except RuntimeError as exc:  # CasADi cannot generate C for it
        warnings.warn(
            f"the {what} has no C code generation ({str(exc).splitlines()[-1][:200]}); it "
            "runs interpreted",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
    if library is None:
        return None
    try:
        return ca.external(fn.name(), str(library))
    except RuntimeError:
        return None
