"""The in-tree build backend makes a valid py3-none-any wheel and an sdist,
their metadata pyproject.toml's [project] table."""

import base64
import email.parser
import hashlib
import importlib.util
import re
import tarfile
import zipfile
from pathlib import Path

import pytest

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
        assert meta == b.metadata()[1]
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


def _toml(text):
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    return tomllib.loads(text)


def _project():
    return _toml((ROOT / "pyproject.toml").read_text())["project"]


def _fields(meta):
    msg = email.parser.Parser().parsestr(meta)
    return msg, {k: msg.get_all(k) for k in set(msg.keys())}


def test_metadata_is_pyprojects():
    """Every field of METADATA comes from [project]; the version from _version.py."""
    b = _backend()
    project = _project()
    _, meta = b.metadata()
    msg, f = _fields(meta)
    version = re.search(r'__version__ = "([^"]+)"', (ROOT / "src" / "cacheagent" / "_version.py").read_text())
    assert project["dynamic"] == ["version"] and "version" not in project
    assert f["Metadata-Version"] == ["2.1"] and f["Name"] == [project["name"]] and f["Version"] == [version.group(1)]
    assert f["Summary"] == [project["description"]] and f["Requires-Python"] == [project["requires-python"]]
    assert f["License"] == [project["license"]["text"]]
    assert f["Classifier"] == project["classifiers"] and f["Keywords"] == [",".join(project["keywords"])]
    extras = project["optional-dependencies"]
    assert f["Provides-Extra"] == list(extras)
    want = list(project["dependencies"]) + [f'{r}; extra == "{e}"' for e, rs in extras.items() for r in rs]
    assert f.get("Requires-Dist", []) == want
    assert "numpy" in extras and not any(r.startswith("numpy") for r in project["dependencies"])
    assert not msg.get_payload()  # no readme in [project]
    # nothing in the backend names the package's metadata itself
    code = (ROOT / "_build" / "cacheagent_build.py").read_text()
    for value in (project["description"], project["requires-python"], "numpy>=", "Apache"):
        assert value not in code, value


def test_metadata_follows_project(tmp_path):
    """Another [project] gives other metadata (the backend hard-codes none)."""
    b = _backend()
    project = {"name": "Other.Pkg", "version": "2.0", "description": "d", "requires-python": ">=3.10",
               "authors": [{"name": "A"}, {"name": "B", "email": "b@x.org"}], "urls": {"Home": "https://x.org"},
               "dependencies": ["numpy>=2"], "optional-dependencies": {"t": ['torch; python_version >= "3.10"']},
               "readme": {"text": "# Hi", "content-type": "text/markdown"}}
    _, meta = b.metadata(project)
    msg, f = _fields(meta)
    assert f["Name"] == ["Other.Pkg"] and f["Version"] == ["2.0"] and f["Requires-Python"] == [">=3.10"]
    assert f["Author"] == ["A"] and f["Author-email"] == ["B <b@x.org>"] and f["Project-URL"] == ["Home, https://x.org"]
    assert f["Requires-Dist"] == ["numpy>=2", 'torch; (python_version >= "3.10") and extra == "t"']
    assert f["Description-Content-Type"] == ["text/markdown"] and msg.get_payload() == "# Hi"
    assert b._normalize("Other.Pkg") == "other_pkg"
    for bad in (dict(project, entry_points={}), dict(project, dynamic=["version"]),
                dict(project, dynamic=["dependencies"]), {k: v for k, v in project.items() if k != "version"},
                dict(project, license="MIT")):
        with pytest.raises(ValueError):
            b.metadata(bad)


def test_toml_fallback_reads_pyproject_as_tomllib():
    """The reader used where tomllib and tomli are missing (Python < 3.11)."""
    b = _backend()
    text = (ROOT / "pyproject.toml").read_text()
    assert b.parse_toml_subset(text) == _toml(text)
    sample = "\n".join([
        r'a = "x\"y\u00e9\t"',
        r"b = 'lit\'",
        r'c = """',
        "multi\\",  # a line-ending backslash
        r"  \\ ",
        r'   line"""',
        r'"d.e" = [1, 2.5, -3, 1e3, true, false, [ "n" ], {x = 1, y.z = "q"}] # comment',
        r'[t . "u"]',
        r"k = '''",
        r"raw\n'''",
        r"v.w = 1_000",
        r"[t.v]",
        r"arr = [",
        r"  # comment",
        r'  "x",',
        r'  "y", # tail',
        r"]",
    ]) + "\n"
    assert b.parse_toml_subset(sample) == _toml(sample)
    for bad in ("a = 1\na = 2", 'a = "x', "a = [1 2]", "[[x]]\na = 1", "a = 1 b", "a = 1979-05-27"):
        with pytest.raises(ValueError):
            b.parse_toml_subset(bad)
