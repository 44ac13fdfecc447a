"""cacheagent.Loader: loader sessions over the daemon's ring, against the
real daemon and the GCS emulator (conftest)."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from typing import List

import pytest

import cacheagent
from conftest import CI, child_env, need, wait_for

PREFIX = "ld/"
PATTERN = "shard-*.{x,y}.npy"
ROWS = [300, 257, 410, 123]  # rows per shard: 1090 samples
BIG_PREFIX = "ldbig/"
BIG_ROW = 64 << 10  # bytes per row of the big dataset
BIG_ROWS = 512


def _npy(a) -> bytes:
    from numpy.lib import format as fmt

    buf = io.BytesIO()
    fmt.write_array(buf, a)
    return buf.getvalue()


def big_row(np, i):
    return ((np.arange(BIG_ROW, dtype=np.int64) * 3 + i * 7) % 251).astype(np.uint8)


@pytest.fixture(scope="module")
def dataset(daemon):
    """Four shards of x (float32, rows × 5 × 3) and y (int64): the rows of all
    shards in shard order, as numpy reads the source objects."""
    np = need("numpy")
    rng = np.random.default_rng(3)
    xs, ys = [], []
    for k, n in enumerate(ROWS):
        x = rng.standard_normal((n, 5, 3)).astype(np.float32)
        y = np.arange(n, dtype=np.int64) + 1000 * k
        daemon.upload(f"{PREFIX}shard-{k:04d}.x.npy", _npy(x))
        daemon.upload(f"{PREFIX}shard-{k:04d}.y.npy", _npy(y))
    for k in range(len(ROWS)):  # read back from the source, as the test compares against it
        xs.append(np.load(io.BytesIO(daemon.object_bytes(f"{PREFIX}shard-{k:04d}.x.npy"))))
        ys.append(np.load(io.BytesIO(daemon.object_bytes(f"{PREFIX}shard-{k:04d}.y.npy"))))
    return {"x": np.concatenate(xs), "y": np.concatenate(ys)}


def ref_ids(daemon, *, batch: int, seed: int = 0, epoch: int = 0, epochs: int = 1, rank: int = 0, world: int = 1,
            shuffle: str = "", prefix: str = PREFIX, drop_last: bool = False,
            wrap: bool = True, ranks_per_node: int = 0) -> List[List[int]]:
    """The batches' ids as `cacheagent loader ids` prints them."""
    args = [str(daemon.bin / "cacheagent"), "--config", str(daemon.config), "loader", "ids",
            "--data", f"gs://bench/{prefix}", "--pattern", PATTERN, "--batch", str(batch), "--seed", str(seed),
            "--epoch", str(epoch), "--epochs", str(epochs), "--rank", str(rank), "--world", str(world)]
    if shuffle:
        args += ["--shuffle", shuffle]
    if ranks_per_node:
        args += ["--ranks-per-node", str(ranks_per_node)]
    if drop_last:
        args += ["--drop-last"]
    if not wrap:
        args += ["--tail", "drop"]
    r = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return [[int(v) for v in line.split()] for line in r.stdout.splitlines() if line.strip()]


def loader(daemon, **kw) -> cacheagent.Loader:
    kw.setdefault("pattern", PATTERN)
    kw.setdefault("batch_size", 64)
    return cacheagent.Loader(f"gs://bench/{kw.pop('prefix', PREFIX)}", socket=daemon.socket, timeout=30, **kw)


def child(script: str, **env) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(script)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=child_env(**env), text=True)


def loader_sessions(client) -> int:
    return int(client.status()["loader_sessions"])


@pytest.mark.parametrize("cfg", [
    dict(shuffle="global", seed=1, rank=1, world=2),
    dict(seed=5),  # shard-window, the default
    dict(shuffle="sequential", rank=2, world=3, drop_last=True, wrap=False),
    dict(shuffle="node", seed=2, rank=3, world=4, ranks_per_node=2),  # node 1 of 2
])
def test_ids_match_cli_and_arrays_match_source(daemon, dataset, client, cfg):
    np = need("numpy")
    want = ref_ids(daemon, batch=64, epochs=2, **cfg)
    kw = dict(cfg)
    world = kw.pop("world", 1)
    with loader(daemon, epochs=2, world_size=world, rank=kw.pop("rank", 0), **kw) as ld:
        assert len(ld) * 2 == len(want)
        assert ld.ring_bytes > 0 and ld.ring.nbytes == ld.ring_bytes
        assert loader_sessions(client) == 1
        got = []
        for epoch in (0, 1):
            n = 0
            for b in ld:
                assert (b.epoch, b.index) == (epoch, n)
                n += 1
                assert b.ids.dtype == np.int64
                got.append(b.ids.tolist())
                ids = b.ids
                np.testing.assert_array_equal(b["x"], dataset["x"][ids])
                np.testing.assert_array_equal(b["y"], dataset["y"][ids])
                assert b["x"].tobytes() == dataset["x"][ids].tobytes()
                # zero copy: every array lies inside the ring
                lo = ld.ring.__array_interface__["data"][0]
                for name in b.keys():
                    a = b[name]
                    assert np.shares_memory(a, ld.ring), name
                    addr = a.__array_interface__["data"][0]
                    assert lo <= addr and addr + a.nbytes <= lo + ld.ring_bytes
                    assert a.base is not None
            assert n == len(ld)
        assert got == want
    assert wait_for(lambda: loader_sessions(client) == 0, 1.0)


def test_keep_release_copy_and_set_epoch(daemon, dataset):
    np = need("numpy")
    want0 = ref_ids(daemon, batch=100, seed=2, epoch=0)
    want3 = ref_ids(daemon, batch=100, seed=2, epoch=3)
    with loader(daemon, batch_size=100, seed=2, prefetch=4, keep=2) as ld:
        it = iter(ld)
        a, b = next(it), next(it)
        assert a.valid and b.valid
        owned = a.copy()
        got = [a.ids.tolist(), b.ids.tolist()]
        c = next(it)  # moved 2 past a
        assert not a.valid and b.valid and c.valid
        got.append(c.ids.tolist())
        b.release()
        assert not b.valid and c.valid
        assert owned.ids.tolist() == want0[0] and owned["x"].flags.owndata and owned.valid
        np.testing.assert_array_equal(owned["x"], dataset["x"][want0[0]])
        got += [x.ids.tolist() for x in it]
        assert got == want0 and not c.valid
        ld.set_epoch(3)
        assert [x.ids.tolist() for x in ld] == want3
        assert ld.stats["batches"] == len(want0) + len(want3) and ld.stats["seeks"] >= 1
        assert ld.stats["handoff_us"] > 0
        # breaking off and iterating again restarts the epoch
        ld.set_epoch(0)
        for i, x in enumerate(ld):
            if i == 2:
                break
        assert [x.ids.tolist() for x in ld] == want0
    with pytest.raises(cacheagent.ClientClosed):
        iter(ld)


def test_state_dict_in_process(daemon, dataset):
    want = ref_ids(daemon, batch=64, seed=9, epochs=2)
    with loader(daemon, seed=9, epochs=2) as ld:
        it = iter(ld)
        got = [next(it).ids.tolist() for _ in range(5)]
        st = ld.state_dict()  # the fifth batch, still held (keep=1), counts as consumed
        assert (st["epoch"], st["batch"]) == (0, 5)
        held = ld.state_dict(resume_held=True)  # the daemon's: the earliest batch held
        assert held == dict(st, batch=4)
        ld.load_state_dict(st)
        assert ld.state_dict() == st  # before any batch: the loaded state
        got += [b.ids.tolist() for b in ld]
        assert ld.state_dict() == dict(st, epoch=1, batch=0)
        got += [b.ids.tolist() for b in ld]
        assert ld.state_dict()["epoch"] == 2
    assert got == want


@pytest.mark.parametrize("k", [1, 3])
def test_state_dict_in_loop_body_resumes_after_the_batch_in_hand(daemon, dataset, k):
    """torchdata's StatefulDataLoader convention: a state taken in the loop
    body after k batches resumes with batch k+1 (index k); with
    resume_held it resumes with the batch in hand (index k-1)."""
    want = ref_ids(daemon, batch=64, seed=11, shuffle="global")
    with loader(daemon, seed=11, shuffle="global") as ld:
        assert ld.state_dict() == {"epoch": 0, "batch": 0, "fingerprint": ld.state_dict()["fingerprint"]}
        for i, b in enumerate(ld):
            if i == k - 1:
                st, held = ld.state_dict(), ld.state_dict(resume_held=True)
                assert b.index == k - 1 and b.ids.tolist() == want[k - 1]
                break
    fp = ld.info["start"]["fingerprint"]
    assert st == {"epoch": 0, "batch": k, "fingerprint": fp} and held == dict(st, batch=k - 1) and fp
    for state, first in ((st, k), (held, k - 1)):
        with loader(daemon, seed=11, shuffle="global") as ld:
            ld.load_state_dict(state)
            got = [(b.epoch, b.index, b.ids.tolist()) for b in ld]
        assert got[0] == (0, first, want[first])
        assert [ids for _, _, ids in got] == want[first:]
    # resume_held=True on the Loader makes it state_dict's default
    with loader(daemon, seed=11, shuffle="global", resume_held=True) as ld:
        it = iter(ld)
        for _ in range(k):
            next(it)
        assert ld.state_dict() == held and ld.state_dict(resume_held=False) == st


def test_state_dict_at_epoch_ends_and_set_epoch(daemon, dataset):
    with loader(daemon, seed=11, epochs=3) as ld:
        n = len(ld)
        fp = ld.state_dict()["fingerprint"]
        for b in ld:
            # in the loop body of the epoch's last batch: the next epoch's start
            want = (0, b.index + 1) if b.index + 1 < n else (1, 0)
            assert ld.state_dict() == {"epoch": want[0], "batch": want[1], "fingerprint": fp}
        assert ld.state_dict() == {"epoch": 1, "batch": 0, "fingerprint": fp}
        it = iter(ld)
        next(it)
        next(it)
        assert ld.state_dict()["batch"] == 2
        ld.set_epoch(2)  # the next iteration reads epoch 2 from its start
        assert ld.state_dict() == {"epoch": 2, "batch": 0, "fingerprint": fp}
        assert next(iter(ld)).epoch == 2 and ld.state_dict() == {"epoch": 2, "batch": 1, "fingerprint": fp}


def test_set_epoch_keeps_a_loaded_mid_epoch_position(daemon, dataset):
    """README's loop calls set_epoch(epoch) before each epoch: after
    load_state_dict of a state taken in the loop body, set_epoch of the
    state's epoch continues with the saved batch instead of replaying the
    epoch; set_epoch of another epoch starts that one at its batch 0."""
    want = ref_ids(daemon, batch=64, seed=9, epochs=2)
    with loader(daemon, seed=9, epochs=2) as ld:
        it = iter(ld)
        for _ in range(5):
            next(it)
        st = ld.state_dict()
    assert (st["epoch"], st["batch"]) == (0, 5)
    with loader(daemon, seed=9, epochs=2) as ld:
        ld.load_state_dict(st)
        got = []
        for epoch in range(st["epoch"], 2):
            ld.set_epoch(epoch)
            if epoch == st["epoch"]:
                assert ld.state_dict() == st
            got += [(b.epoch, b.index, b.ids.tolist()) for b in ld]
    assert got[0][:2] == (0, 5)
    assert [ids for _, _, ids in got] == want[5:]
    with loader(daemon, seed=9, epochs=2) as ld:
        ld.load_state_dict(st)
        ld.set_epoch(1)
        assert ld.state_dict() == dict(st, epoch=1, batch=0)
        assert [b.ids.tolist() for b in ld] == want[len(ld):]


def _wait_line(p: subprocess.Popen, timeout: float = 30) -> str:
    import select

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r, _, _ = select.select([p.stdout], [], [], 0.5)
        if r:
            line = p.stdout.readline()
            if line:
                return line
            break
        if p.poll() is not None:
            break
    p.kill()
    raise AssertionError(f"child printed nothing; stderr: {p.stderr.read()[-3000:]}")


CHILD = """
import json, sys, time, cacheagent
ld = cacheagent.Loader("gs://bench/ld/", pattern="shard-*.{x,y}.npy", batch_size=64, shuffle="global", seed=4,
                       rank=0, world_size=1, epochs=2, socket=%r, timeout=30)
it = iter(ld)
ids = []
for _ in range(7):
    b = next(it)
    ids.append(b.ids.tolist())
b.release()
print(json.dumps({"state": ld.state_dict(), "ids": ids}), flush=True)
time.sleep(60)
"""


def test_sigkill_frees_session_and_resume(daemon, dataset, client):
    assert wait_for(lambda: loader_sessions(client) == 0, 2.0)
    want = ref_ids(daemon, batch=64, seed=4, shuffle="global", epochs=2)
    p = child(CHILD % daemon.socket)
    try:
        out = json.loads(_wait_line(p))
        assert loader_sessions(client) == 1
        p.send_signal(signal.SIGKILL)
        p.wait(10)
        t0 = time.monotonic()
        assert wait_for(lambda: loader_sessions(client) == 0, 1.0, interval=0.01), "session not freed within 1 s"
        freed = time.monotonic() - t0
    finally:
        if p.poll() is None:
            p.kill()
        p.wait()
        p.stdout.close()
        p.stderr.close()
    assert out["ids"] == want[:7] and freed < 1.0
    st = out["state"]
    assert (st["epoch"], st["batch"]) == (0, 7) and st["fingerprint"]
    # the next client is served, and resumes exactly where the killed one was
    with cacheagent.Loader("gs://bench/ld/", pattern=PATTERN, batch_size=64, shuffle="global", seed=4, rank=0,
                           world_size=1, epochs=2, socket=daemon.socket, timeout=30) as ld:
        ld.load_state_dict(st)
        got = [b.ids.tolist() for b in ld] + [b.ids.tolist() for b in ld]
    assert out["ids"] + got == want


def _forked_sleeper() -> int:
    """Fork a child that only sleeps, as a DataLoader worker or a pool
    process would, with copies of the parent's fds at the fork."""
    pid = os.fork()
    if pid == 0:
        try:
            time.sleep(60)
        finally:
            os._exit(0)
    return pid


def _kill(pid: int, reap: bool = True) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    if reap:
        os.waitpid(pid, 0)


def test_close_ends_session_while_a_forked_child_lives(daemon, dataset, client):
    ld = loader(daemon)
    next(iter(ld))
    assert loader_sessions(client) == 1
    pid = _forked_sleeper()
    try:
        ld.close()
        assert wait_for(lambda: loader_sessions(client) == 0, 10), "close() left the session to the child's fds"
    finally:
        _kill(pid)


def test_load_state_dict_ends_old_session_while_a_forked_child_lives(daemon, dataset, client):
    with loader(daemon) as ld:
        next(iter(ld))
        pid = _forked_sleeper()
        try:
            for _ in range(3):
                ld.load_state_dict(ld.state_dict())
            assert wait_for(lambda: loader_sessions(client) == 1, 10), \
                f"{loader_sessions(client)} sessions on the daemon for one Loader"
        finally:
            _kill(pid)
    assert wait_for(lambda: loader_sessions(client) == 0, 10)


def test_close_ends_session_while_another_process_holds_its_sockets(daemon, dataset, client):
    """close() shuts the sockets down: a process that got copies of them
    without the fork handler (pass_fds, a fork from C) does not keep the
    session."""
    ld = loader(daemon)
    next(iter(ld))
    fds = (ld._sock.fileno(), ld._conn.sock.fileno())
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], pass_fds=fds,
                         stdin=subprocess.DEVNULL)
    try:
        ld.close()
        assert wait_for(lambda: loader_sessions(client) == 0, 10), "close() left the session to the copies"
    finally:
        p.kill()
        p.wait()


def test_forked_child_neither_uses_nor_ends_the_parents_loader(daemon, dataset, client):
    want = ref_ids(daemon, batch=64, seed=3)
    with loader(daemon, seed=3) as ld:
        it = iter(ld)
        got = [next(it).ids.tolist()]
        pid = os.fork()
        if pid == 0:  # the child: its copy of the Loader is closed; closing it leaves the parent's session alone
            code = 1
            try:
                try:
                    next(iter(ld))
                    code = 2
                except cacheagent.ClientClosed:
                    ld.close()
                    code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
        assert loader_sessions(client) == 1
        got += [b.ids.tolist() for b in it]
    assert got == want


FORKING_CHILD = """
import os, time, cacheagent
ld = cacheagent.Loader("gs://bench/ld/", pattern="shard-*.{x,y}.npy", batch_size=64, rank=0, world_size=1,
                       socket=%r, timeout=30)
next(iter(ld))
pid = os.fork()
if pid == 0:  # a DataLoader worker, which outlives its killed parent for a while
    time.sleep(60)
    os._exit(0)
print(pid, flush=True)
time.sleep(60)
"""


def test_killed_process_frees_session_while_its_forked_child_lives(daemon, dataset, client):
    """A forked child does not hold its parent's loader session: SIGKILL of
    the parent frees it at once, as without the child."""
    assert wait_for(lambda: loader_sessions(client) == 0, 10)
    p = child(FORKING_CHILD % daemon.socket)
    grandchild = 0
    try:
        grandchild = int(_wait_line(p))
        assert loader_sessions(client) == 1
        p.send_signal(signal.SIGKILL)
        p.wait(10)
        assert wait_for(lambda: loader_sessions(client) == 0, 10), "the forked child kept the session"
    finally:
        if grandchild:
            _kill(grandchild, reap=False)  # not ours to reap
        if p.poll() is None:
            p.kill()
        p.wait()
        p.stdout.close()
        p.stderr.close()


def test_refused_seek_goes_on(daemon, dataset):
    """A Seek the daemon refuses raises its reason; the session goes on."""
    want = ref_ids(daemon, batch=64, seed=6)
    with loader(daemon, seed=6) as ld:
        it = iter(ld)
        next(it)
        with pytest.raises(cacheagent.InvalidRequest, match="seek"):
            ld._seek(1 << 40, 0)  # out of range: refused (code 3)
        with pytest.raises(cacheagent.InvalidRequest):
            ld.set_epoch(-1)
        ld.set_epoch(0)
        assert [b.ids.tolist() for b in ld] == want


def test_daemon_stop_ends_session(daemon, dataset):
    ld = loader(daemon, seed=6)
    try:
        it = iter(ld)
        next(it)
        daemon.stop_daemon()
        t0 = time.monotonic()
        with pytest.raises((cacheagent.SessionEnded, cacheagent.DaemonUnavailable)):
            for _ in it:
                pass
        assert time.monotonic() - t0 < 5
    finally:
        ld.close()
        if daemon.daemon is None:
            daemon.start_daemon()


def test_manifest(daemon, dataset, tmp_path):
    """A manifest naming the same shards reads the same batches as the pattern."""
    np = need("numpy")
    want = ref_ids(daemon, batch=64, seed=8, shuffle="global")
    m = {"arrays": ["x", "y"], "shards": [{"x": f"gs://bench/{PREFIX}shard-{k:04d}.x.npy",
                                           "y": f"gs://bench/{PREFIX}shard-{k:04d}.y.npy", "rows": n}
                                          for k, n in enumerate(ROWS)]}
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(m))
    for manifest in (m, json.dumps(m), str(path)):
        with cacheagent.Loader(manifest=manifest, batch_size=64, seed=8, shuffle="global", rank=0, world_size=1,
                               socket=daemon.socket, timeout=30) as ld:
            got = []
            for b in ld:
                got.append(b.ids.tolist())
                np.testing.assert_array_equal(b["x"], dataset["x"][b.ids])
        assert got == want


def test_epochs_past_the_session(daemon, dataset):
    """With epochs=1, further iterations go on with the next epochs (the daemon restarts its loader)."""
    want = ref_ids(daemon, batch=64, seed=6, epochs=3)
    with loader(daemon, seed=6) as ld:
        got = [[b.ids.tolist() for b in ld] for _ in range(3)]
        assert [x for e in got for x in e] == want and all(len(e) == len(ld) for e in got)
        assert ld.state_dict()["epoch"] == 3


def test_old_iterator_stops(daemon, dataset):
    want = ref_ids(daemon, batch=64, seed=6)
    with loader(daemon, seed=6) as ld:
        old = iter(ld)
        next(old)
        new = iter(ld)  # ends the old one; restarts the epoch
        assert list(old) == []
        assert [b.ids.tolist() for b in new] == want
        old = iter(ld)
        next(old)
        ld.load_state_dict({"epoch": 0, "batch": 3, "fingerprint": ld.state_dict()["fingerprint"]})
        assert list(old) == []
        assert [b.ids.tolist() for b in ld] == want[3:]


def test_fingerprint_mismatch_refused(daemon, dataset):
    with loader(daemon, seed=1) as ld:
        st = ld.state_dict()
    with loader(daemon, seed=1) as ld:
        with pytest.raises(cacheagent.InvalidRequest):
            ld.load_state_dict(dict(st, fingerprint=st["fingerprint"] ^ 1))


@pytest.mark.parametrize("kw,exc", [
    (dict(data="gs://no-such-bucket-xyz/train/"), cacheagent.NotFound),
    (dict(pattern="shard-{x.npy"), cacheagent.InvalidRequest),
    (dict(batch_size=0), cacheagent.InvalidRequest),
    (dict(shuffle="sideways"), cacheagent.InvalidRequest),
])
def test_bad_input(daemon, dataset, client, kw, exc):
    args = dict(pattern=PATTERN, batch_size=64)
    args.update(kw)
    data = args.pop("data", "gs://bench/ld/")
    t0 = time.monotonic()
    with pytest.raises(exc) as ei:
        cacheagent.Loader(data, socket=daemon.socket, timeout=30, **args)
    assert time.monotonic() - t0 < 10
    assert ei.value.message and ei.value.status  # the daemon's reason
    assert wait_for(lambda: loader_sessions(client) == 0, 1.0)


def test_default_rank_world(monkeypatch):
    import types

    from cacheagent.loader import _default_rank_world

    monkeypatch.delitem(sys.modules, "torch", raising=False)
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "8")
    assert _default_rank_world() == (3, 8)
    monkeypatch.delenv("RANK")
    monkeypatch.delenv("WORLD_SIZE")
    assert _default_rank_world() == (0, 1)
    assert "torch" not in sys.modules  # never imported for that
    # torch imported, its process group initialised: its rank and world size
    dist = types.SimpleNamespace(is_available=lambda: True, is_initialized=lambda: True, get_rank=lambda: 5,
                                 get_world_size=lambda: 6)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(distributed=dist))
    monkeypatch.setenv("RANK", "3")
    assert _default_rank_world() == (5, 6)
    dist.is_initialized = lambda: False
    assert _default_rank_world() == (3, 1)


def test_torch_from_numpy_shares_the_ring(daemon, dataset):
    torch = need("torch")
    np = need("numpy")
    with loader(daemon, seed=3) as ld:
        b = next(iter(ld))
        t = torch.from_numpy(b["x"])
        lo = ld.ring.__array_interface__["data"][0]
        assert lo <= t.data_ptr() < lo + ld.ring_bytes
        np.testing.assert_array_equal(t.numpy(), dataset["x"][b.ids])


def test_slot_header_mismatch_is_an_error(daemon, dataset):
    from cacheagent.loader import T_READY

    with loader(daemon, seed=3) as ld:
        b = next(iter(ld))
        with pytest.raises(cacheagent.ProtocolError, match="the Ready says batch"):
            ld._batch((T_READY, b.slot, b.seq + 1, b.epoch, b.index, len(b), 0))


@pytest.fixture(scope="module")
def big_dataset(daemon):
    np = need("numpy")
    rows = np.stack([big_row(np, i) for i in range(BIG_ROWS)])
    daemon.upload(f"{BIG_PREFIX}shard-0000.x.npy", _npy(rows[: BIG_ROWS // 2]))
    daemon.upload(f"{BIG_PREFIX}shard-0001.x.npy", _npy(rows[BIG_ROWS // 2:]))
    for k in (0, 1):
        daemon.upload(f"{BIG_PREFIX}shard-{k:04d}.y.npy", _npy(np.arange(BIG_ROWS // 2, dtype=np.int64)))
    return rows


SHM_CHILD = """
import os, sys, numpy as np, cacheagent
st = os.statvfs("/dev/shm")
assert st.f_blocks * st.f_frsize <= 64 << 20, "no 64 MiB /dev/shm"
ld = cacheagent.Loader("gs://bench/ldbig/", pattern="shard-*.{x,y}.npy", batch_size=128, prefetch=10, rank=0,
                       world_size=1, socket=%r, timeout=60)
assert ld.ring_bytes > 64 << 20, ld.ring_bytes
n = 0
for b in ld:
    for j, i in enumerate(b.ids.tolist()):
        want = ((np.arange(%d, dtype=np.int64) * 3 + i * 7) %% 251).astype(np.uint8)
        assert (b["x"][j] == want).all(), (i, j)
    n += len(b)
print("ok", ld.ring_bytes, n, flush=True)
ld.close()
"""


def test_small_dev_shm(daemon, big_dataset):
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        if CI:
            pytest.fail("test_small_dev_shm needs root and unshare, and CI=true")
        pytest.skip("needs root and unshare")
    script = daemon.tmp / "shm_child.py"
    script.write_text(textwrap.dedent(SHM_CHILD % (daemon.socket, BIG_ROW)))
    r = subprocess.run(["unshare", "-m", "sh", "-c",
                        f"mount -t tmpfs -o size=64m tmpfs /dev/shm && exec {sys.executable} {script}"],
                       capture_output=True, text=True, timeout=120, env=child_env())
    assert r.returncode == 0, r.stderr[-3000:]
    words = r.stdout.split()
    assert words[0] == "ok" and int(words[1]) > 64 << 20 and int(words[2]) == BIG_ROWS, r.stdout


TWO_JOBS = """
import sys, cacheagent
with cacheagent.Loader("gs://bench/two/", pattern="shard-*.{x,y}.npy", batch_size=32, shuffle="global", seed=%d,
                       rank=0, world_size=1, socket=%r, timeout=60) as ld:
    n = sum(len(b) for b in ld)
print(n, flush=True)
"""


def test_two_jobs_one_download_per_object(daemon, client):
    """Two Python jobs on one VM read the same fresh dataset at once: each
    object leaves the (emulated) GCS once."""
    np = need("numpy")
    shards, rows = 6, 200
    for k in range(shards):
        daemon.upload(f"two/shard-{k:04d}.x.npy", _npy(np.full((rows, 64), k, dtype=np.uint8)))
        daemon.upload(f"two/shard-{k:04d}.y.npy", _npy(np.arange(rows, dtype=np.int64)))
    before = client.status()["fetch"]["objects"]
    jobs = [child(TWO_JOBS % (seed, daemon.socket)) for seed in (1, 2)]
    try:
        counts = [int(_wait_line(p, timeout=120)) for p in jobs]
    finally:
        for p in jobs:
            if p.poll() is None:
                p.kill()
            p.wait()
            p.stdout.close()
            p.stderr.close()
    assert counts == [shards * rows] * 2
    assert client.status()["fetch"]["objects"] - before == 2 * shards  # x and y of each shard, once


def test_stats_by_cause(daemon, dataset):
    """The session's Go loader reports its figures, stalls split by cause."""
    with loader(daemon, shuffle="global", seed=2, epochs=3) as ld:
        for _ in range(2):
            for _ in ld:
                time.sleep(0.06)  # a training step: the epochs last past the loader's report interval (1 s)
        assert wait_for(lambda: "loader" in ld.stats, 5.0), ld.stats
        st = ld.stats["loader"]
    for key in ("batches", "samples", "wait_seconds", "fetch_seconds", "promote_seconds", "gather_seconds",
                "other_seconds"):
        assert key in st, st
    assert st["batches"] > 0
