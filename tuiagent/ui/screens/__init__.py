"""The app's screens: solve, replay, compare, and the modal ones (help, open a run, choose a model)."""
