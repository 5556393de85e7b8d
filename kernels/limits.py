"""The start-up cell every kernel runs: the standard imports, resource limits, the output cap.

The limits are set from inside the kernel process, so they bind the kernel
and whatever it spawns but not the app. They are a guard against runaway
cells, not a sandbox: a cell running as root can raise them again.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING

from kernels.outputs import DROPPED_MIME

if TYPE_CHECKING:
    # The functions below run inside the kernel: their source is shipped there, without this
    # module's imports, so annotations naming these are quoted, and IPython makes ``get_ipython``
    # a builtin there.
    from typing import IO, Any

    def get_ipython() -> Any: ...


def bind_sympy_on_first_use() -> None:
    """Bind ``sympy`` and ``sp`` to a stand-in that imports sympy when first used, then puts the
    module itself in their place; its source is shipped into the kernel, so it stays self-contained.

    Importing sympy is a third of a kernel's start-up (0.25 s of CPU here) and most runs never use
    it. The stand-in imports it the ordinary way each time it is touched until that succeeds; what
    an interrupted import leaves behind is cleared by ``forget_half_imports``. numpy stays imported
    at start-up: OpenBLAS starts its threads and reserves their memory then, and the process and
    memory limits are measured after that (``apply_limits``).
    """
    import importlib
    import sys
    import types

    shell = get_ipython()  # noqa: F821 (the kernel's shell)

    def load() -> types.ModuleType:
        module = importlib.import_module("sympy")
        for alias in ("sympy", "sp"):
            if shell.user_ns.get(alias) is stand_in:
                shell.user_ns[alias] = module
        return module

    class Sympy(types.ModuleType):
        def __getattr__(self, name: str) -> object:
            return getattr(load(), name)

        def __dir__(self) -> "list[str]":
            return dir(load())

        def __repr__(self) -> str:
            return repr(load())

    stand_in = sys.modules.get("sympy") or Sympy("sympy")
    shell.user_ns.update(sympy=stand_in, sp=stand_in)


def forget_half_imports() -> None:
    """After a cell that raised, drop the submodules whose package is no longer imported; its source
    is shipped into the kernel, so it stays self-contained.

    A cell interrupted in the middle of ``import sympy`` (a time limit) leaves ``sympy`` out of
    ``sys.modules`` but the submodules it finished in: importing it again then finds them and never
    binds them to the new package ("module 'sympy' has no attribute 'assumptions'"). Dropping them
    makes the next import start clean. Only after an error: the scan costs a fraction of a
    millisecond, a cell's whole round trip a few.
    """
    import sys

    def forget(result: object) -> None:
        if getattr(result, "error_in_exec", None) is None:
            return
        modules = sys.modules
        while orphans := [name for name in list(modules) if "." in name and name.rpartition(".")[0] not in modules]:
            for name in orphans:
                modules.pop(name, None)

    get_ipython().events.register("post_run_cell", forget)  # noqa: F821 (the kernel's shell)


PRE_IMPORTS = (
    "import math, itertools, fractions, numpy\nimport numpy as np\nfrom fractions import Fraction\n"
    + inspect.getsource(bind_sympy_on_first_use)
    + "bind_sympy_on_first_use()\ndel bind_sympy_on_first_use\n"
    + inspect.getsource(forget_half_imports)
    + "forget_half_imports()\ndel forget_half_imports\n"
)


def apply_limits(
    extra_data_bytes: int | None,
    cpu_seconds: int | None,
    extra_tasks: int | None,
    open_files: int | None = None,
    file_bytes: int | None = None,
) -> None:
    """Lower this process's rlimits; its source is shipped into the kernel, so it must stay self-contained.

    RLIMIT_DATA rather than RLIMIT_AS: a kernel with numpy and sympy loaded
    already maps about 1 GB of address space (thread stacks, malloc arenas,
    shared libraries) but a quarter of that as data, so RLIMIT_DATA tracks
    what cells allocate (Linux >= 4.7 counts private mmaps too). Even that
    baseline grows with the core count (OpenBLAS reserves ~40 MB per
    thread), so the limit is set to the data in use now plus
    ``extra_data_bytes``. RLIMIT_CPU counts the whole life of the process;
    its soft limit sends SIGXCPU, which kills the kernel. RLIMIT_NPROC counts
    every process and thread of the user, so it is set to those already
    running plus ``extra_tasks``; Linux does not apply it to root (the strict sandbox refuses new
    processes instead). RLIMIT_NOFILE caps open descriptors at ``open_files``, RLIMIT_FSIZE each
    file written at ``file_bytes`` (past it a write fails with EFBIG: Python ignores SIGXFSZ).
    Inside the strict sandbox no capability is left to raise a hard limit again.
    """
    import os
    import resource

    def lower(which: int, soft: int, hard: int) -> None:
        _, old_hard = resource.getrlimit(which)
        if old_hard != resource.RLIM_INFINITY:
            soft, hard = min(soft, old_hard), min(hard, old_hard)
        resource.setrlimit(which, (soft, hard))

    if extra_data_bytes is not None:
        try:
            with open("/proc/self/status") as status:
                in_use = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmData:"))
        except (OSError, StopIteration):
            in_use = 0
        lower(resource.RLIMIT_DATA, in_use + extra_data_bytes, in_use + extra_data_bytes)
    if cpu_seconds is not None:
        # A hard limit one second later: SIGKILL only if SIGXCPU was ignored.
        lower(resource.RLIMIT_CPU, cpu_seconds, cpu_seconds + 1)
    if open_files is not None:
        lower(resource.RLIMIT_NOFILE, open_files, open_files)
    if file_bytes is not None:
        lower(resource.RLIMIT_FSIZE, file_bytes, file_bytes)
    if extra_tasks is not None and os.path.isdir("/proc"):
        uid, tasks = os.getuid(), 0
        for pid in os.listdir("/proc"):
            try:
                if pid.isdigit() and os.stat(f"/proc/{pid}").st_uid == uid:
                    tasks += len(os.listdir(f"/proc/{pid}/task"))
            except OSError:  # the process ended while we looked
                pass
        lower(resource.RLIMIT_NPROC, tasks + extra_tasks, tasks + extra_tasks)


def install_output_cap(limit_chars: int, dropped_mime: str) -> None:
    """Cut each cell's printed text, and its result's plain text, at ``limit_chars`` inside the kernel,
    then tell the client how much was cut (display data of type ``dropped_mime``), so its note
    counts what the user printed, not what reached it.

    ipykernel builds every message in memory, several copies deep: one 300 MB print runs a kernel
    with a memory limit out of memory before anything is sent. Output that reaches the client by
    other routes (file-descriptor writes, rich displays) is capped again there.
    """
    import sys

    shell = get_ipython()  # noqa: F821 (the kernel's shell)
    budget = {"left": limit_chars, "dropped": 0}

    def take(text: str) -> str:
        kept = text[: max(budget["left"], 0)]
        budget["left"] -= len(kept)
        budget["dropped"] += len(text) - len(kept)
        return kept

    class Capped:
        def __init__(self, stream: "IO[str]") -> None:
            self._stream = stream

        def write(self, text: str) -> int:
            if isinstance(text, str) and (kept := take(text)):
                self._stream.write(kept)
            return len(text)

        def __getattr__(self, name: str) -> object:
            return getattr(self._stream, name)

    def new_cell(*_: object) -> None:
        budget.update(left=limit_chars, dropped=0)

    def end_cell(*_: object) -> None:
        if budget["dropped"]:
            shell.display_pub.publish({dropped_mime: budget["dropped"]})

    hook = shell.displayhook
    write_format_data = hook.write_format_data

    def capped_format_data(format_dict: "dict[str, Any]", md_dict: object = None) -> None:
        if isinstance(format_dict.get("text/plain"), str):
            format_dict = dict(format_dict, **{"text/plain": take(format_dict["text/plain"])})
        write_format_data(format_dict, md_dict)

    hook.write_format_data = capped_format_data
    sys.stdout, sys.stderr = Capped(sys.stdout), Capped(sys.stderr)
    shell.events.register("pre_run_cell", new_cell)
    shell.events.register("post_run_cell", end_cell)


def install_safe_packer() -> None:
    """Send text holding lone surrogates (``print('\\ud800')``) with each one as U+FFFD, instead of
    failing the whole message inside jupyter-client and losing the cell's other output with it."""
    import re

    session = get_ipython().kernel.session  # noqa: F821 (the kernel's shell)
    pack, lone = session.pack, re.compile("[\ud800-\udfff]")

    def scrub(obj: object) -> object:
        if isinstance(obj, str):
            return lone.sub("\ufffd", obj)
        if isinstance(obj, dict):
            return {scrub(k): scrub(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [scrub(v) for v in obj]
        return obj

    def safe_pack(obj: object) -> bytes:
        try:
            return pack(obj)  # type: ignore[no-any-return]
        except UnicodeEncodeError:
            return pack(scrub(obj))  # type: ignore[no-any-return]

    session.pack = safe_pack


# Ours: a cell has no use for more; the kernel itself holds about 60 descriptors.
MAX_OPEN_FILES = 1024
# Ours: per file in the run's directory; a 2 GiB posix_fallocate was seen.
MAX_FILE_BYTES = 256 * 1024 * 1024


def startup_code(
    memory_limit_mb: int | None, cpu_time_limit_s: int | None, max_processes: int | None, output_limit_chars: int
) -> str:
    """The pre-imports, the limits (measured against the loaded kernel), the safe packer and the
    output cap, leaving no other names behind."""
    extra_data_bytes = None if memory_limit_mb is None else memory_limit_mb * 1024 * 1024
    return (
        PRE_IMPORTS
        + inspect.getsource(apply_limits)
        + f"apply_limits({extra_data_bytes!r}, {cpu_time_limit_s!r}, {max_processes!r}, {MAX_OPEN_FILES}, {MAX_FILE_BYTES})\n"
        + inspect.getsource(install_output_cap)
        + f"install_output_cap({output_limit_chars!r}, {DROPPED_MIME!r})\n"
        + inspect.getsource(install_safe_packer)
        + "install_safe_packer()\n"
        # pyzmq's garbage collector thread starts on the first big output: start it now, so that
        # kernels.leftovers counts it with the kernel's own threads
        + "__import__('zmq.utils.garbage').utils.garbage.gc.start()\n"
        + "del apply_limits, install_output_cap, install_safe_packer\n"
    )
