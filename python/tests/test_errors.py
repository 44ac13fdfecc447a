"""Every error code the daemon sends has its own Python class, read from the
Go source so that the two cannot drift: the control API's codes
(``control/errors.go``, ``Code* = "..."``) and the loader data socket's
(``loader/ring``, ``Code* = N``)."""

from __future__ import annotations

import re
from typing import Dict

import pytest

import cacheagent
from cacheagent import _ring, errors
from conftest import REPO


def _go_constants(paths, pattern: str) -> Dict[str, str]:
    out: Dict[str, str] = {}
    for path in paths:
        for name, value in re.findall(pattern, path.read_text()):
            assert name not in out, f"{name} defined twice"
            out[name] = value
    return out


@pytest.fixture(scope="module")
def control_codes() -> Dict[str, str]:
    """control/errors.go's Code* constants: name -> code."""
    codes = _go_constants([REPO / "control" / "errors.go"], r'\b(Code\w+)\s*=\s*"(\w+)"')
    assert "CodeInternal" in codes and "CodeNoFleet" in codes, codes  # the regex still reads the file
    return codes


@pytest.fixture(scope="module")
def ring_codes() -> Dict[str, int]:
    """loader/ring's Code* constants: name -> number."""
    files = sorted(p for p in (REPO / "loader" / "ring").glob("*.go") if not p.name.endswith("_test.go"))
    codes = {k: int(v) for k, v in _go_constants(files, r'\b(Code\w+)\s*=\s*(\d+)\b').items()}
    assert "CodeInternal" in codes and "CodeRefused" in codes, codes
    return codes


def _exported(cls: type) -> None:
    assert getattr(cacheagent, cls.__name__) is cls and cls.__name__ in cacheagent.__all__, cls
    assert getattr(errors, cls.__name__) is cls and cls.__name__ in errors.__all__, cls


def test_control_codes(control_codes):
    for name, code in control_codes.items():
        e = errors.error_for(code, "the daemon's words", 400)
        assert e.code == code and str(e) == "the daemon's words" and e.status == 400, name
        cls = type(e)
        if code == "internal":
            assert cls is errors.InternalError
        else:
            assert cls is not errors.InternalError, f"{name} ({code!r}) has no class of its own"
            assert cls.__dict__.get("code") == code, (name, cls)
        _exported(cls)
    # no code Go lacks, and one class per code
    assert set(errors._BY_CODE) == set(control_codes.values())
    assert len(set(errors._BY_CODE.values())) == len(errors._BY_CODE)


def _snake(go_name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", go_name).upper()  # CodeRefused -> CODE_REFUSED


def test_ring_codes(ring_codes):
    py = {k: v for k, v in vars(_ring).items() if k.startswith("CODE_")}
    assert py == {_snake(k): v for k, v in ring_codes.items()}
    assert set(_ring.RING_ERRORS) == set(ring_codes.values())  # no code Go lacks
    classes = []
    for name, value in ring_codes.items():
        e = _ring_error_of(value)
        cls = type(e)
        classes.append(cls)
        assert cls is _ring.RING_ERRORS[value] and "the daemon's words" in str(e), name
        if name == "CodeInternal":
            assert cls is errors.InternalError and e.code == "internal"
        else:
            assert cls is not errors.InternalError, f"ring {name} ({value}) has no class of its own"
            assert e.code == cls.code
        _exported(cls)
    assert len(set(classes)) == len(classes)
    assert type(_ring_error_of(max(ring_codes.values()) + 1)) is errors.InternalError  # unknown: internal


def _ring_error_of(code: int) -> errors.CacheagentError:
    return _ring._ring_error(code, "the daemon's words")


def test_every_coded_class_is_a_daemon_code(control_codes, ring_codes):
    """A class with a code of its own stands for a code Go sends."""
    known = set(errors._BY_CODE.values()) | set(_ring.RING_ERRORS.values())
    for name in errors.__all__:
        cls = getattr(errors, name)
        if isinstance(cls, type) and issubclass(cls, errors.CacheagentError) and cls.__dict__.get("code") is not None:
            assert cls in known, f"{name}.code {cls.code!r} is no code the daemon sends"
