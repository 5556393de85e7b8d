"""Model configuration: models.toml files -> :class:`ModelRegistry` of :class:`ModelSpec`, and where
each model's weights are (:func:`resolve_model_file`, :func:`install_state`)."""

from tuiagent.config.loader import ModelRegistry, load_models, shipped_models_file
from tuiagent.config.sources import assembled_path, install_state, resolve_model_file
from tuiagent.config.spec import BACKENDS, CHAT_TEMPLATES, SOURCE_KINDS, ModelSpec, Source

__all__ = [
    "BACKENDS",
    "CHAT_TEMPLATES",
    "SOURCE_KINDS",
    "ModelRegistry",
    "ModelSpec",
    "Source",
    "assembled_path",
    "install_state",
    "load_models",
    "resolve_model_file",
    "shipped_models_file",
]
