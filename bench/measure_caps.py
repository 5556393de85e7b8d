"""What a hostile cell gets past a kernel's caps: a flood of files, deleted files held open, thousands
of threads, each in a fresh strict-sandbox kernel with the default caps.

    python bench/measure_caps.py            # as the user running it
    setpriv --reuid=65534 --regid=65534 --clear-groups env HOME=/tmp python bench/measure_caps.py

Prints one line per cell: what it managed before the first error, the error, and what the kernel said
after it (docs/security.md quotes the lines).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernels.jupyter import JupyterKernel  # noqa: E402

CELLS = {
    "150,000 files": (
        "import os\nmade = 0\ntry:\n    for i in range(150_000):\n        open(f'f{i}', 'w').close(); made += 1\n"
        "except OSError as e:\n    print(made, 'files;', e.strerror)\nelse:\n    print(made, 'files; no error')"
    ),
    "1.5 GB deleted, held open": (
        "import os\nheld = []\ntry:\n    for i in range(15):\n"
        "        p = os.path.join(os.environ['TMPDIR'], f'u{i}'); f = open(p, 'wb'); os.unlink(p); held.append(f)\n"
        "        f.write(b'x' * (100 << 20)); f.flush()\n"
        "except OSError as e:\n    print(len(held) * 100, 'MB started;', e.strerror)\n"
        "else:\n    print(len(held) * 100, 'MB; no error')\nfor f in held: f.close()"
    ),
    "4,000 threads": (
        # small stacks: each thread's 8 MB stack would otherwise meet the memory cap (RLIMIT_DATA) first
        "import threading\nthreading.stack_size(1 << 16)\nstop = threading.Event(); started = 0\ntry:\n"
        "    for _ in range(4000):\n"
        "        threading.Thread(target=stop.wait, daemon=True).start(); started += 1\n"
        "except RuntimeError as e:\n    print(started, 'threads;', e)\nelse:\n    print(started, 'threads; no error')\n"
        "stop.set()"
    ),
}


async def main() -> None:
    print(f"uid {os.getuid()}, Linux {os.uname().release}")
    for name, code in CELLS.items():
        async with JupyterKernel(sandbox="strict", timeout=300) as kernel:
            started = time.perf_counter()
            result = await kernel.execute(code, 300)
            lines = [line for line in result.text.splitlines() if line.strip()]
            notes = [line for line in lines if line.startswith("The files") or line.startswith("The kernel had")]
            print(f"{name}: {lines[0] if lines else '(nothing)'} [{time.perf_counter() - started:.1f} s]")
            for note in notes:
                print(f"    {note}")


if __name__ == "__main__":
    asyncio.run(main())
