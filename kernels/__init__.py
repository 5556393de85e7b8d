"""Code-execution environments for tuiagent, registered under the ``tuiagent.kernels`` entry-point group."""

from kernels.base import CellResult, Kernel, Output

__all__ = ["CellResult", "Kernel", "Output"]
