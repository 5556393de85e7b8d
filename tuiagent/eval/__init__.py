"""The evaluation harness behind ``tuiagent eval``.

- ``datasets``: problems with gold answers (GSM8K, MATH/MATH-500, AIME JSONL; the built-in demo set; HF hub);
- ``configs``: the settings to compare (guards, tool-use-tax conditions, budgets), from ``--config`` and TOML;
- ``protocols``: the papers' protocols as plug-ins (their variants, settings, sections, judging passes);
- ``harness``: running problems x settings x seeds concurrently into an append-only, resumable results file;
- ``metrics``: one run's numbers, folded from its events;
- ``stats`` and ``report``: paired comparisons, tool-call bins, and the table / Markdown / CSV / JSON / PNG forms.

Nothing here is imported by ``import tuiagent``; the CLI imports it when ``eval`` runs.
"""
