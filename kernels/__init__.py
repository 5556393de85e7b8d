"""Code-execution environments for tuiagent, registered under the ``tuiagent.kernels`` entry-point group."""

from kernels.base import Kernel, Output, ToolResult

__all__ = ["Kernel", "Output", "ToolResult"]
