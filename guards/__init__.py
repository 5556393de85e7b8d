"""Inference-time guards, registered under the ``tuiagent.guards`` entry-point group."""
