"""tuiagent: tool-integrated math reasoning with a real Jupyter kernel and inference-time guards.

Importing this package is cheap: backends (llama_cpp, vllm, torch) load only when a model is opened.
"""

__version__ = "0.1.0"
