"""The Textual app: solve (live), replay (step through), compare (runs side by side).

Importing this package imports Textual; the CLI imports it only when it opens the app.
"""

from tuiagent.ui.app import AppConfig, TuiAgentApp, make_app

__all__ = ["AppConfig", "TuiAgentApp", "make_app"]
