"""In-tree PEP 517 build backend for the cacheagent Python package.

Standard library only, so ``pip install ./python`` works offline with no
flags and no build dependencies. It zips ``src/`` into a ``py3-none-any``
wheel with METADATA, WHEEL and RECORD (sha256 digests), and makes an sdist.

The metadata is ``pyproject.toml``'s ``[project]`` table (PEP 621), read with
``tomllib`` (Python >= 3.11), else ``tomli`` if installed, else the small
TOML reader below (enough for this file; ``tests/test_build.py`` checks that
it reads pyproject.toml as tomllib does). The version is ``[project]``'s
``version``, or, when ``dynamic = ["version"]``, ``__version__`` in
``src/<name>/_version.py``. Fields this backend does not implement are an
error rather than silently left out of the metadata.
"""

from __future__ import annotations

import base64
import hashlib
import importlib
import io
import os
import re
import tarfile
import zipfile
from typing import Any, Dict, Iterator, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "src")
STAMP = (2020, 1, 1, 0, 0, 0)  # reproducible zip entries

# [project] keys turned into metadata here; anything else is an error.
_KNOWN = {"name", "version", "dynamic", "description", "readme", "requires-python", "license", "authors",
          "maintainers", "keywords", "classifiers", "urls", "dependencies", "optional-dependencies"}


# ----- reading pyproject.toml


def _load_toml(text: str) -> Dict[str, Any]:
    for module in ("tomllib", "tomli"):  # Python >= 3.11; tomli where a 3.9/3.10 has it
        try:
            return importlib.import_module(module).loads(text)
        except ImportError:
            pass
    return parse_toml_subset(text)


class _Toml:
    """A reader of the TOML this project's pyproject.toml uses: tables,
    dotted and quoted keys, strings (basic, literal, multi-line), integers,
    floats, booleans, arrays and inline tables. No dates, no arrays of
    tables."""

    _BARE = re.compile(r"[A-Za-z0-9_-]+")
    _NUMBER = re.compile(r"[+-]?(?:0|[1-9](?:_?[0-9])*)(\.[0-9](?:_?[0-9])*)?([eE][+-]?[0-9](?:_?[0-9])*)?")
    _ESCAPES = {"b": "\b", "t": "\t", "n": "\n", "f": "\f", "r": "\r", '"': '"', "\\": "\\"}

    def __init__(self, text: str) -> None:
        self.s, self.i = text, 0

    def fail(self, what: str) -> ValueError:
        line = self.s.count("\n", 0, self.i) + 1
        return ValueError(f"pyproject.toml line {line}: {what}")

    def peek(self, n: int = 1) -> str:
        return self.s[self.i:self.i + n]

    def spaces(self) -> None:
        while self.peek() in (" ", "\t"):
            self.i += 1

    def blank(self) -> None:
        """Skip whitespace, newlines and comments."""
        while self.i < len(self.s):
            c = self.s[self.i]
            if c in " \t\r\n":
                self.i += 1
            elif c == "#":
                while self.i < len(self.s) and self.s[self.i] != "\n":
                    self.i += 1
            else:
                return

    def end_of_line(self) -> None:
        self.spaces()
        if self.peek() == "#":
            while self.i < len(self.s) and self.s[self.i] != "\n":
                self.i += 1
        if self.peek() == "\r":
            self.i += 1
        if self.i < len(self.s) and self.s[self.i] != "\n":
            raise self.fail(f"unexpected {self.s[self.i:self.i + 20]!r}")

    def expect(self, c: str) -> None:
        if self.peek(len(c)) != c:
            raise self.fail(f"want {c!r}, got {self.peek(20)!r}")
        self.i += len(c)

    def key(self) -> List[str]:
        parts: List[str] = []
        while True:
            self.spaces()
            if self.peek() in ('"', "'"):
                parts.append(self.string())
            else:
                m = self._BARE.match(self.s, self.i)
                if not m:
                    raise self.fail(f"want a key, got {self.peek(20)!r}")
                parts.append(m.group())
                self.i = m.end()
            self.spaces()
            if self.peek() != ".":
                return parts
            self.i += 1

    def string(self) -> str:
        q = self.peek()
        if self.peek(3) == q * 3:  # multi-line
            self.i += 3
            if self.peek() == "\n":
                self.i += 1
            elif self.peek(2) == "\r\n":
                self.i += 2
            end = self.s.find(q * 3, self.i)
            if end < 0:
                raise self.fail("unterminated string")
            while self.s.startswith(q, end + 3):  # up to two quotes may end the value
                end += 1
            raw, self.i = self.s[self.i:end], end + 3
            return raw if q == "'" else self.unescape(raw, multiline=True)
        self.i += 1
        end = self.i
        while True:
            if end >= len(self.s) or self.s[end] == "\n":
                raise self.fail("unterminated string")
            if self.s[end] == "\\" and q == '"':
                end += 2
                continue
            if self.s[end] == q:
                break
            end += 1
        raw, self.i = self.s[self.i:end], end + 1
        return raw if q == "'" else self.unescape(raw, multiline=False)

    def unescape(self, raw: str, multiline: bool) -> str:
        out: List[str] = []
        i = 0
        while i < len(raw):
            c = raw[i]
            if c != "\\":
                out.append(c)
                i += 1
                continue
            e = raw[i + 1:i + 2]
            if e in self._ESCAPES:
                out.append(self._ESCAPES[e])
                i += 2
            elif e in ("u", "U"):
                n = 4 if e == "u" else 8
                out.append(chr(int(raw[i + 2:i + 2 + n], 16)))
                i += 2 + n
            elif multiline and raw[i + 1:].lstrip(" \t").startswith(("\n", "\r\n")):
                i += 1  # a line-ending backslash: drop the newline and the blanks after it
                while i < len(raw) and raw[i] in " \t\r\n":
                    i += 1
            else:
                raise self.fail(f"bad escape \\{e}")
        return "".join(out)

    def value(self) -> Any:
        c = self.peek()
        if c in ('"', "'"):
            return self.string()
        if c == "[":
            self.i += 1
            arr: List[Any] = []
            while True:
                self.blank()
                if self.peek() == "]":
                    self.i += 1
                    return arr
                arr.append(self.value())
                self.blank()
                if self.peek() == ",":
                    self.i += 1
                elif self.peek() != "]":
                    raise self.fail(f"want ',' or ']' in an array, got {self.peek(20)!r}")
        if c == "{":
            self.i += 1
            table: Dict[str, Any] = {}
            self.spaces()
            if self.peek() == "}":
                self.i += 1
                return table
            while True:
                self.assign(table)
                self.spaces()
                if self.peek() == "}":
                    self.i += 1
                    return table
                self.expect(",")
        for word, v in (("true", True), ("false", False)):
            if self.s.startswith(word, self.i):
                self.i += len(word)
                return v
        m = self._NUMBER.match(self.s, self.i)
        if m:
            self.i = m.end()
            text = m.group().replace("_", "")
            return float(text) if m.group(1) or m.group(2) else int(text)
        raise self.fail(f"unsupported value {self.s[self.i:self.i + 20]!r}")

    def assign(self, table: Dict[str, Any]) -> None:
        keys = self.key()
        self.expect("=")
        self.spaces()
        v = self.value()
        for k in keys[:-1]:
            table = table.setdefault(k, {})
            if not isinstance(table, dict):
                raise self.fail(f"key {k!r} is not a table")
        if keys[-1] in table:
            raise self.fail(f"key {keys[-1]!r} defined twice")
        table[keys[-1]] = v

    def document(self) -> Dict[str, Any]:
        root: Dict[str, Any] = {}
        cur = root
        while True:
            self.blank()
            if self.i >= len(self.s):
                return root
            if self.peek(2) == "[[":
                raise self.fail("arrays of tables are not supported")
            if self.peek() == "[":
                self.i += 1
                keys = self.key()
                self.expect("]")
                cur = root
                for k in keys:
                    cur = cur.setdefault(k, {})
                    if not isinstance(cur, dict):
                        raise self.fail(f"key {k!r} is not a table")
            else:
                self.assign(cur)
            self.end_of_line()


def parse_toml_subset(text: str) -> Dict[str, Any]:
    """Parse ``text`` with the fallback reader (see :class:`_Toml`)."""
    return _Toml(text).document()


def _pyproject() -> Dict[str, Any]:
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        return _load_toml(f.read())


# ----- the metadata


def _normalize(name: str) -> str:
    """The name as wheel and sdist file names spell it (PEP 503, then _)."""
    return re.sub(r"[-_.]+", "_", name).lower()


def _version(project: Dict[str, Any]) -> str:
    dynamic = project.get("dynamic", [])
    if "version" in project:
        if "version" in dynamic:
            raise ValueError("pyproject.toml: version is both set and dynamic")
        return str(project["version"])
    if "version" not in dynamic:
        raise ValueError("pyproject.toml: [project] needs version, or dynamic = [\"version\"]")
    path = os.path.join(SRC, _normalize(project["name"]), "_version.py")
    with open(path, encoding="utf-8") as f:
        m = re.search(r'^__version__ = "([^"]+)"', f.read(), re.M)
    if not m:
        raise ValueError(f"{path}: no __version__ = \"...\" line")
    return m.group(1)


def _people(field: str, people: List[Dict[str, str]]) -> List[Tuple[str, str]]:
    names = [p["name"] for p in people if "name" in p and "email" not in p]
    emails = [f"{p['name']} <{p['email']}>" if "name" in p else p["email"] for p in people if "email" in p]
    out: List[Tuple[str, str]] = []
    if names:
        out.append((field, ", ".join(names)))
    if emails:
        out.append((f"{field}-email", ", ".join(emails)))
    return out


def _readme(readme: Any) -> Tuple[Optional[str], Optional[str], Optional[str]]:
    """(text, content type, file relative to ROOT) of [project]'s readme."""
    if readme is None:
        return None, None, None
    if isinstance(readme, str):
        readme = {"file": readme}
    kind = readme.get("content-type")
    path = readme.get("file")
    if path is not None:
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            text = f.read()
        if kind is None:
            ext = os.path.splitext(path)[1].lower()
            kind = {".md": "text/markdown", ".rst": "text/x-rst", ".txt": "text/plain"}.get(ext)
            if kind is None:
                raise ValueError(f"pyproject.toml: readme {path!r}: give its content-type")
    else:
        text = readme["text"]
    return text, kind, path


def _requirement(req: str, extra: Optional[str]) -> str:
    if extra is None:
        return req
    spec, sep, marker = req.partition(";")
    cond = f'extra == "{extra}"'
    return f"{spec.strip()}; ({marker.strip()}) and {cond}" if sep else f"{spec.strip()}; {cond}"


def metadata(project: Optional[Dict[str, Any]] = None) -> Tuple[Dict[str, Any], str]:
    """The [project] table (read from pyproject.toml when not given) and the
    core metadata (METADATA / PKG-INFO, version 2.1) it describes."""
    if project is None:
        project = _pyproject().get("project")
        if not isinstance(project, dict):
            raise ValueError("pyproject.toml has no [project] table")
    unknown = sorted(set(project) - _KNOWN)
    if unknown:
        raise ValueError(f"pyproject.toml: [project] {', '.join(unknown)}: not supported by the in-tree backend")
    bad_dynamic = sorted(set(project.get("dynamic", [])) - {"version"})
    if bad_dynamic:
        raise ValueError(f"pyproject.toml: only version can be dynamic, not {', '.join(bad_dynamic)}")
    fields: List[Tuple[str, str]] = [("Metadata-Version", "2.1"), ("Name", project["name"]),
                                     ("Version", _version(project))]
    if "description" in project:
        fields.append(("Summary", project["description"]))
    lic = project.get("license")
    if lic is not None:
        if not isinstance(lic, dict) or not ("text" in lic or "file" in lic):
            raise ValueError("pyproject.toml: license must be {text = ...} or {file = ...}")
        if "text" in lic:
            fields.append(("License", lic["text"]))
        else:
            with open(os.path.join(ROOT, lic["file"]), encoding="utf-8") as f:
                fields.append(("License", f.read().strip().replace("\n", "\n        ")))
    fields += _people("Author", project.get("authors", []))
    fields += _people("Maintainer", project.get("maintainers", []))
    if project.get("keywords"):
        fields.append(("Keywords", ",".join(project["keywords"])))
    fields += [("Classifier", c) for c in project.get("classifiers", [])]
    fields += [("Project-URL", f"{label}, {url}") for label, url in project.get("urls", {}).items()]
    if "requires-python" in project:
        fields.append(("Requires-Python", project["requires-python"]))
    fields += [("Requires-Dist", _requirement(r, None)) for r in project.get("dependencies", [])]
    for extra, reqs in project.get("optional-dependencies", {}).items():
        fields.append(("Provides-Extra", extra))
        fields += [("Requires-Dist", _requirement(r, extra)) for r in reqs]
    text, kind, _ = _readme(project.get("readme"))
    if kind is not None:
        fields.append(("Description-Content-Type", kind))
    out = "".join(f"{k}: {v}\n" for k, v in fields)
    if text is not None:
        out += "\n" + text
    return project, out


def _package_files() -> Iterator[Tuple[str, str]]:
    for dirpath, dirnames, filenames in os.walk(SRC):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.endswith(".egg-info"))
        for fn in sorted(filenames):
            if not fn.endswith((".pyc", ".pyo")):
                full = os.path.join(dirpath, fn)
                yield full, os.path.relpath(full, SRC).replace(os.sep, "/")


# ----- PEP 517 hooks


def get_requires_for_build_wheel(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def build_wheel(wheel_directory: str, config_settings: Optional[Dict[str, Any]] = None,
                metadata_directory: Optional[str] = None) -> str:
    project, meta = metadata()
    name, version = _normalize(project["name"]), _version(project)
    dist_info = f"{name}-{version}.dist-info"
    entries: List[Tuple[str, bytes]] = []
    for full, arc in _package_files():
        with open(full, "rb") as f:
            entries.append((arc, f.read()))
    entries.append((f"{dist_info}/METADATA", meta.encode()))
    wheel = "Wheel-Version: 1.0\nGenerator: cacheagent_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    entries.append((f"{dist_info}/WHEEL", wheel.encode()))
    record = io.StringIO()
    for arc, data in entries:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.write(f"{arc},sha256={digest},{len(data)}\n")
    record.write(f"{dist_info}/RECORD,,\n")
    entries.append((f"{dist_info}/RECORD", record.getvalue().encode()))
    filename = f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, filename), "w", zipfile.ZIP_DEFLATED) as zf:
        for arc, data in entries:
            zf.writestr(zipfile.ZipInfo(arc, STAMP), data, zipfile.ZIP_DEFLATED)
    return filename


def build_sdist(sdist_directory: str, config_settings: Optional[Dict[str, Any]] = None) -> str:
    project, meta = metadata()
    base = f"{_normalize(project['name'])}-{_version(project)}"
    filename = f"{base}.tar.gz"
    pkg_info = meta.encode()
    _, _, readme = _readme(project.get("readme"))
    tops = ["pyproject.toml", "_build", "src", "tests"] + ([readme] if readme else [])
    lic = project.get("license")
    if isinstance(lic, dict) and "file" in lic:
        tops.append(str(lic["file"]))

    def skip_caches(ti: tarfile.TarInfo) -> Optional[tarfile.TarInfo]:
        return None if "__pycache__" in ti.name else ti

    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz") as tf:
        for top in tops:
            path = os.path.join(ROOT, top)
            if os.path.exists(path):
                tf.add(path, f"{base}/{top}", filter=skip_caches)
        ti = tarfile.TarInfo(f"{base}/PKG-INFO")
        ti.size = len(pkg_info)
        tf.addfile(ti, io.BytesIO(pkg_info))
    return filename
