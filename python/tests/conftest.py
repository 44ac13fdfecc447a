"""Fixtures: a real cacheagent daemon over the GCS emulator (bench/cmd/gcsemu).

The session-scoped ``daemon`` fixture builds both Go commands, starts the
emulator (a synthetic dataset: ``gs://bench/data/obj-0000N``, 256 KiB each),
uploads ``.npy`` objects through the emulator's JSON upload API, writes a
daemon config under a temp dir and starts ``cacheagent serve``; everything
is stopped at the end, also on failure.

With CI=true a missing tool or module (go, numpy, torch) fails a test
instead of skipping it.

The tests import the *installed* ``cacheagent``: scripts/test.sh (CI)
installs ./python into a fresh venv and runs them with its interpreter from
a directory where python/src is not importable (``test_install.py`` checks
that). Nothing here puts python/src on sys.path; for a quick run against the
source tree set it yourself:

    PYTHONPATH=python/src /usr/bin/python3 -m pytest -q python/tests

Child processes the tests start import the same package as the tests
(:func:`child_env`).
"""

from __future__ import annotations

import io
import os
import select
import shutil
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, Optional
from urllib.parse import quote

import pytest

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "python" / "src"

try:
    import cacheagent
except ImportError as e:  # pragma: no cover - depends on how pytest was started
    raise ImportError(f"{e}: install the package (pip install ./python, as scripts/test.sh does in a venv), "
                      f"or set PYTHONPATH={SRC} to test the source tree") from e

PKG_ROOT = Path(cacheagent.__file__).resolve().parents[1]
"""The sys.path entry the tests' cacheagent comes from (site-packages, or python/src)."""

CI = os.environ.get("CI") == "true"
BUCKET = "bench"
N_OBJECTS = 4
OBJECT_SIZE = 256 << 10


def child_env(**extra: str) -> Dict[str, str]:
    """The environment of a child Python process (sys.executable) that
    imports the same cacheagent as the tests: PYTHONPATH names python/src
    only when the tests run against it."""
    env = dict(os.environ, **extra)
    if PKG_ROOT == SRC.resolve():
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), os.environ.get("PYTHONPATH", "")) if p)
    return env


def need(module: str):
    """Import module; skip the test if it is missing (fail with CI=true)."""
    try:
        return __import__(module)
    except ImportError as e:
        if CI:
            pytest.fail(f"{module} is missing and CI=true: {e}")
        pytest.skip(f"{module} is not installed")


@dataclass
class Env:
    """A running emulator and daemon."""

    tmp: Path
    bin: Path
    endpoint: str  # the emulator's JSON API endpoint, http://127.0.0.1:PORT/storage/v1/
    socket: str
    config: Path
    npy: Dict[str, bytes] = field(default_factory=dict)  # name -> the .npy bytes uploaded
    procs: List[subprocess.Popen] = field(default_factory=list)
    daemon: Optional[subprocess.Popen] = None

    @property
    def base(self) -> str:
        return self.endpoint.split("/storage/v1/")[0]

    def uri(self, name: str) -> str:
        return f"gs://{BUCKET}/{name}"

    def object_bytes(self, name: str) -> bytes:
        """The object's bytes as the emulator serves them."""
        url = f"{self.base}/storage/v1/b/{BUCKET}/o/{quote(name, safe='')}?alt=media"
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.read()

    def upload(self, name: str, data: bytes) -> None:
        url = f"{self.base}/upload/storage/v1/b/{BUCKET}/o?uploadType=media&name={quote(name, safe='')}"
        req = urllib.request.Request(url, data=data, method="POST",
                                     headers={"Content-Type": "application/octet-stream"})
        with urllib.request.urlopen(req, timeout=10) as r:
            r.read()

    def client(self, **kw) -> cacheagent.Client:
        return cacheagent.Client(self.socket, **kw)

    def start_daemon(self) -> None:
        log = open(self.tmp / "daemon.log", "ab")
        self.daemon = subprocess.Popen([str(self.bin / "cacheagent"), "serve", "--config", str(self.config)],
                                       stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        log.close()
        deadline = time.monotonic() + 30
        while True:
            try:
                cacheagent.Client(self.socket, timeout=2).close()
                return
            except cacheagent.CacheagentError:
                if self.daemon.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("daemon did not start:\n" + (self.tmp / "daemon.log").read_text()[-4000:])
                time.sleep(0.05)

    def stop_daemon(self) -> None:
        if self.daemon is not None:
            _stop(self.daemon)
            self.daemon = None


def _stop(p: subprocess.Popen) -> None:
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)


def _build(tmp: Path) -> Path:
    go = shutil.which("go")
    if go is None:
        if CI:
            pytest.fail("go is missing and CI=true")
        pytest.skip("go is not installed")
    out = tmp / "bin"
    out.mkdir()
    for target, name in (("./cmd/cacheagent", "cacheagent"), ("./bench/cmd/gcsemu", "gcsemu")):
        r = subprocess.run([go, "build", "-o", str(out / name), target], cwd=REPO, capture_output=True,
                           text=True, timeout=600)
        if r.returncode != 0:
            pytest.fail(f"go build {target} failed:\n{r.stderr[-4000:]}")
    return out


def _npy_dataset() -> Dict[str, bytes]:
    """Arrays in several dtypes, orders and .npy versions, as file bytes."""
    try:
        import numpy as np
        from numpy.lib import format as fmt
    except ImportError:  # the tests that need arrays say so (need("numpy"))
        return {}

    rng = np.random.default_rng(7)
    arrays = {
        "npy/f32.npy": (rng.standard_normal((64, 33)).astype(np.float32), None),
        "npy/i64_fortran.npy": (np.asfortranarray(np.arange(60, dtype=np.int64).reshape(6, 10)), None),
        "npy/u16_v2.npy": (np.arange(1000, dtype=np.uint16), (2, 0)),
        "npy/be_i32_v3.npy": (np.arange(12, dtype=">i4").reshape(3, 4), (3, 0)),
        "npy/scalar.npy": (np.array(3.5), None),
        "npy/empty.npy": (np.zeros((0, 4), dtype=np.float64), None),
        "npy/struct.npy": (np.array([(1, 2.0), (3, 4.0)], dtype=[("a", "<i4"), ("b", "<f8")]), None),
    }
    out = {}
    for name, (a, version) in arrays.items():
        buf = io.BytesIO()
        fmt.write_array(buf, a, version=version)
        out[name] = buf.getvalue()
    return out


@pytest.fixture(scope="session")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    tmp = tmp_path_factory.mktemp("cacheagent")
    binary = _build(tmp)
    emu = subprocess.Popen([str(binary / "gcsemu"), "-bucket", BUCKET, "-prefix", "data/",
                            "-objects", str(N_OBJECTS), "-size", str(OBJECT_SIZE), "-first-byte", "0", "-rate", "0"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    env = Env(tmp=tmp, bin=binary, endpoint="", socket=str(tmp / "control.sock"), config=tmp / "cacheagent.yaml",
              procs=[emu])
    try:
        ready, _, _ = select.select([emu.stdout], [], [], 30)
        line = emu.stdout.readline().decode().strip() if ready else ""
        if not line.startswith("http://"):
            pytest.fail(f"gcsemu printed no endpoint: {line!r}")
        env.endpoint = line
        env.npy = _npy_dataset()
        for name, data in env.npy.items():
            env.upload(name, data)
        env.upload("npy/not-npy.npy", b"this is not an npy file")
        (tmp / "disk").mkdir()
        env.config.write_text(
            "tiers:\n"
            f"  disk: {{dir: {tmp / 'disk'}, max: 1GiB}}\n"
            "  shm: {dir: none}\n"
            f"fetch: {{endpoint: \"{env.endpoint}\"}}\n"
            f"control: {{socket: {env.socket}}}\n"
            "metrics: {listen: none}\n"
            "gpu: none\n")
        env.start_daemon()
        yield env
    finally:
        env.stop_daemon()
        for p in env.procs:
            _stop(p)
            if p.stdout:
                p.stdout.close()


@pytest.fixture
def client(daemon: Env) -> Iterator[cacheagent.Client]:
    c = daemon.client()
    yield c
    c.close()


def wait_for(pred, timeout: float, interval: float = 0.02) -> bool:
    """Poll pred until it is true or timeout seconds passed."""
    deadline = time.monotonic() + timeout
    while True:
        if pred():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
