"""The Textual app: solve (live), replay (step through), compare (runs side by side).

Importing this package imports Textual; the CLI imports it only when it opens the app.
"""

from tuiagent.ui.app import TuiAgentApp, make_app
from tuiagent.ui.controller import AppConfig

__all__ = ["AppConfig", "TuiAgentApp", "make_app"]
