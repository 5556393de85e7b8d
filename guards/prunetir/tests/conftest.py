"""The eval's fixtures (tests/eval/conftest.py) for this paper's protocol tests; the repository's
conftest.py gives the rest."""

from tests.eval.conftest import dataset, factory, isolated_cache_dir  # noqa: F401
