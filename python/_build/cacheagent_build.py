"""In-tree PEP 517 build backend for the cacheagent Python package.

Standard library only, so ``pip install ./python`` works offline with no
flags and no build dependencies. It zips ``src/cacheagent`` into a
``py3-none-any`` wheel with METADATA, WHEEL and RECORD (sha256 digests).

numpy is an optional extra, not a hard requirement: a hard ``Requires-Dist``
makes pip fail offline in any environment without numpy (it would try to
download it). ``import cacheagent`` works without numpy; only the .npy
helpers need it. Install Debian's python3-numpy, or ``pip install
'./python[numpy]'`` where an index is reachable.
"""

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

NAME = "cacheagent"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "src", NAME)
STAMP = (2020, 1, 1, 0, 0, 0)  # reproducible zip entries


def _version():
    with open(os.path.join(SRC, "_version.py"), encoding="utf-8") as f:
        return re.search(r'__version__ = "([^"]+)"', f.read()).group(1)


def _metadata(version):
    return (
        "Metadata-Version: 2.1\n"
        f"Name: {NAME}\nVersion: {version}\n"
        "Summary: Client of the cacheagent daemon: GCS objects cached on local NVMe and /dev/shm\n"
        "License: Apache-2.0\nRequires-Python: >=3.9\n"
        "Provides-Extra: numpy\nRequires-Dist: numpy>=1.21; extra == \"numpy\"\n"
        "Provides-Extra: torch\nRequires-Dist: torch>=1.13; extra == \"torch\"\n"
    )


def _package_files():
    for dirpath, dirnames, filenames in os.walk(SRC):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for fn in sorted(filenames):
            if not fn.endswith((".pyc", ".pyo")):
                full = os.path.join(dirpath, fn)
                yield full, os.path.relpath(full, os.path.dirname(SRC)).replace(os.sep, "/")


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    version = _version()
    dist_info = f"{NAME}-{version}.dist-info"
    entries = []
    for full, arc in _package_files():
        with open(full, "rb") as f:
            entries.append((arc, f.read()))
    entries.append((f"{dist_info}/METADATA", _metadata(version).encode()))
    wheel = "Wheel-Version: 1.0\nGenerator: cacheagent_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    entries.append((f"{dist_info}/WHEEL", wheel.encode()))
    record = io.StringIO()
    for arc, data in entries:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.write(f"{arc},sha256={digest},{len(data)}\n")
    record.write(f"{dist_info}/RECORD,,\n")
    entries.append((f"{dist_info}/RECORD", record.getvalue().encode()))
    filename = f"{NAME}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, filename), "w", zipfile.ZIP_DEFLATED) as zf:
        for arc, data in entries:
            zf.writestr(zipfile.ZipInfo(arc, STAMP), data, zipfile.ZIP_DEFLATED)
    return filename


def build_sdist(sdist_directory, config_settings=None):
    version = _version()
    base = f"{NAME}-{version}"
    filename = f"{base}.tar.gz"
    pkg_info = _metadata(version).encode()
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz") as tf:
        for top in ("pyproject.toml", "README.md", "_build", "src", "tests"):
            path = os.path.join(ROOT, top)
            if os.path.exists(path):
                tf.add(path, f"{base}/{top}", filter=lambda ti: None if "__pycache__" in ti.name else ti)
        ti = tarfile.TarInfo(f"{base}/PKG-INFO")
        ti.size = len(pkg_info)
        tf.addfile(ti, io.BytesIO(pkg_info))
    return filename
