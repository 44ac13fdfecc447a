"""The tests run against the installed package when scripts/test.sh (CI)
runs them: it installs ./python into a fresh venv and names it in
CACHEAGENT_TEST_VENV."""

from __future__ import annotations

import importlib.metadata
import os
import sys
import sysconfig
from pathlib import Path

import pytest

import cacheagent
from conftest import CI, SRC


def test_cacheagent_is_the_installed_package():
    venv = os.environ.get("CACHEAGENT_TEST_VENV")
    if not venv:
        if CI:
            pytest.fail("CI=true: the Python tests must run against the package installed in a venv "
                        "(scripts/test.sh sets CACHEAGENT_TEST_VENV)")
        pytest.skip("CACHEAGENT_TEST_VENV is not set: testing whatever cacheagent sys.path finds")
    venv_dir = Path(venv).resolve()
    assert Path(sys.prefix).resolve() == venv_dir and sys.prefix != sys.base_prefix, (sys.prefix, venv)
    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    path = Path(cacheagent.__file__).resolve()
    assert site in path.parents and venv_dir in path.parents, (path, site)
    assert SRC.resolve() not in path.parents, path
    assert not any(Path(p or ".").resolve() == SRC.resolve() for p in sys.path), sys.path
    # installed by pip from this tree: its metadata is pyproject.toml's
    dist = importlib.metadata.distribution("cacheagent")
    assert dist.version == cacheagent.__version__
    assert dist.metadata["Requires-Python"] and dist.metadata["Summary"]
    files = {str(f) for f in dist.files or ()}
    assert "cacheagent/__init__.py" in files and "cacheagent/py.typed" in files
