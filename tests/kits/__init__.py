"""The test kits: helpers the tests import, one module per kit (``from kits.parts import require``).

Fixtures stay in the ``conftest.py`` files, which import from here; no kit imports a conftest. The package is
found because pytest puts ``tests/`` on ``sys.path`` (``tests/conftest.py`` sits in a directory without an
``__init__.py``); a script run outside pytest (a benchmark, the fuzz runner) inserts ``tests/`` itself.
"""
