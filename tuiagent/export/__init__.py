"""Exports of saved runs, headless; for now the token confidence the app and the exports share."""
