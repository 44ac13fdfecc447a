"""The in-tree build backend makes a valid py3-none-any wheel and an sdist."""

import base64
import hashlib
import importlib.util
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _backend():
    spec = importlib.util.spec_from_file_location("cacheagent_build", ROOT / "_build" / "cacheagent_build.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_wheel(tmp_path):
    b = _backend()
    assert b.get_requires_for_build_wheel() == [] and b.get_requires_for_build_sdist() == []
    name = b.build_wheel(str(tmp_path))
    assert name.endswith("-py3-none-any.whl") and name.startswith("cacheagent-")
    with zipfile.ZipFile(tmp_path / name) as zf:
        names = zf.namelist()
        assert "cacheagent/__init__.py" in names and "cacheagent/py.typed" in names
        assert not any("__pycache__" in n for n in names)
        dist = next(n.split("/")[0] for n in names if n.endswith(".dist-info/RECORD"))
        meta = zf.read(f"{dist}/METADATA").decode()
        assert "Name: cacheagent" in meta and 'Requires-Dist: numpy>=1.21; extra == "numpy"' in meta
        assert "Tag: py3-none-any" in zf.read(f"{dist}/WHEEL").decode()
        rows = [r.split(",") for r in zf.read(f"{dist}/RECORD").decode().splitlines()]
        assert sorted(r[0] for r in rows) == sorted(names)
        for path, digest, size in rows:
            if path.endswith("RECORD"):
                assert digest == size == ""
                continue
            data = zf.read(path)
            want = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert digest == "sha256=" + want and int(size) == len(data)


def test_sdist(tmp_path):
    name = _backend().build_sdist(str(tmp_path))
    with tarfile.open(tmp_path / name) as tf:
        names = tf.getnames()
    base = name[: -len(".tar.gz")]
    for want in ("pyproject.toml", "PKG-INFO", "_build/cacheagent_build.py", "src/cacheagent/client.py"):
        assert f"{base}/{want}" in names
