"""The client against a real daemon: ping, status, errors, leases, plans."""

import io
import mmap
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import cacheagent
from cacheagent import errors
from conftest import N_OBJECTS, OBJECT_SIZE, PKG_ROOT, need, wait_for

OBJ = "data/obj-00001"


def test_ping_and_status(daemon, client):
    assert client.info.pid == daemon.daemon.pid and client.version
    assert client.ping().pid == daemon.daemon.pid
    st = client.status()
    assert st["cache_dir"].endswith("disk") and {"sessions", "leases", "plans", "tiers"} <= set(st)


def test_daemon_not_running(tmp_path):
    t = time.monotonic()
    with pytest.raises(cacheagent.DaemonNotRunning) as ei:
        cacheagent.Client(str(tmp_path / "missing.sock"))
    assert ei.value.socket == str(tmp_path / "missing.sock") and "missing.sock" in str(ei.value)
    # a socket file nobody listens on: connection refused
    path = str(tmp_path / "dead.sock")
    s = socket.socket(socket.AF_UNIX)
    s.bind(path)
    s.close()
    with pytest.raises(cacheagent.DaemonNotRunning):
        cacheagent.Client(path)
    with pytest.raises(cacheagent.DaemonNotRunning):
        cacheagent.open("gs://b/x", socket=path)
    assert time.monotonic() - t < 2


def test_silent_daemon_times_out(tmp_path):
    """A server that accepts and never answers: the call ends on its timeout."""
    path = str(tmp_path / "silent.sock")
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(path)
    srv.listen(8)
    try:
        t = time.monotonic()
        with pytest.raises(cacheagent.DaemonTimeout):
            cacheagent.Client(path, timeout=0.3)
        assert time.monotonic() - t < 3
    finally:
        srv.close()


def test_garbage_answer(tmp_path):
    """A server answering garbage: a CacheagentError, never a hang."""
    path = str(tmp_path / "garbage.sock")
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(path)
    srv.listen(8)

    def serve():
        for n in range(2):
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 500 Oops\r\nContent-Length: 5\r\n\r\nnope!" if n == 0 else b"\x00garbage\r\n\r\n")
            conn.close()

    th = threading.Thread(target=serve, daemon=True)
    th.start()
    try:
        with pytest.raises(cacheagent.InternalError) as ei:
            cacheagent.Client(path, timeout=2)
        assert "500" in str(ei.value)
        with pytest.raises(cacheagent.DaemonUnavailable):
            cacheagent.Client(path, timeout=2)
    finally:
        srv.close()


def test_error_codes_map_to_classes():
    for code, cls in [("object_not_found", errors.NotFound), ("invalid_name", errors.InvalidName),
                      ("checksum", errors.ChecksumError), ("no_space", errors.NoSpace), ("no_shm", errors.NoShm),
                      ("not_found", errors.ResourceNotFound), ("invalid", errors.InvalidRequest),
                      ("unavailable", errors.DaemonUnavailable), ("session_ended", errors.SessionEnded),
                      ("no_fleet", errors.NoFleet), ("internal", errors.InternalError),
                      ("brand_new", errors.InternalError)]:
        e = errors.error_for(code, "the daemon's words", 400)
        assert type(e) is cls and str(e) == "the daemon's words" and e.status == 400
        assert isinstance(e, cacheagent.CacheagentError)


def test_unknown_object(client):
    with pytest.raises(cacheagent.NotFound) as ei:
        client.open("gs://bench/data/no-such-object")
    assert ei.value.code == "object_not_found" and "no-such-object" in ei.value.message
    with pytest.raises(cacheagent.NotFound):
        client.fetch(["gs://bench/data/no-such-object"])
    with pytest.raises(cacheagent.ResourceNotFound):
        client.advance("no-such-plan", 1)
    with pytest.raises(cacheagent.ResourceNotFound):
        client.drop_plan("no-such-plan")
    with pytest.raises(cacheagent.InvalidName):
        client.plan([cacheagent.ObjectRef("bench", "")])
    with pytest.raises(cacheagent.InvalidRequest) as ei:
        client.plan(["gs://bench/x"], id="p" * 300)
    assert "plan id" in str(ei.value)
    assert client.status()["leases"] == 0


def test_malformed_uri(client):
    for bad in ["bench/x", "s3://b/x", "gs://", "gs://bench", "gs://b/x#0"]:
        with pytest.raises(ValueError):
            client.open(bad)
    with pytest.raises(ValueError):
        cacheagent.open("not-a-uri", socket=client.socket)


def test_open_bytes(daemon, client):
    want = daemon.object_bytes(OBJ)
    assert len(want) == OBJECT_SIZE
    with client.open(daemon.uri(OBJ)) as lease:
        assert lease.size == OBJECT_SIZE and lease.tier == "disk" and not lease.stale
        assert lease.attrs.bucket == "bench" and lease.attrs.name == OBJ and lease.attrs.generation > 0
        view = lease.bytes()
        assert view.readonly and view.tobytes() == want
        with pytest.raises(TypeError):
            view[0] = 1
        view.release()
    assert client.read(daemon.uri(OBJ)) == want


def test_packed_objects_map_at_their_offset(daemon, client):
    # The daemon packs small objects into segment files: a lease maps its own object's bytes at its offset.
    offsets = set()
    for i in range(N_OBJECTS):
        name = f"data/obj-{i:05d}"
        with client.open(daemon.uri(name)) as lease:
            assert lease.offset % mmap.ALLOCATIONGRANULARITY == 0
            offsets.add((lease.path, lease.offset))
            view = lease.bytes()
            assert view.tobytes() == daemon.object_bytes(name)
            view.release()
    assert len(offsets) == N_OBJECTS and any(off > 0 for _, off in offsets)


def test_open_convenience_and_pinned_generation(daemon):
    with cacheagent.open(daemon.uri(OBJ), socket=daemon.socket) as lease:
        gen = lease.attrs.generation
        data = lease.bytes().tobytes()
    with cacheagent.open(f"{daemon.uri(OBJ)}#{gen}", socket=daemon.socket) as lease:
        assert lease.bytes().tobytes() == data
    with pytest.raises(cacheagent.NotFound):
        cacheagent.open(f"{daemon.uri(OBJ)}#{gen + 1}", socket=daemon.socket)


def test_npy_arrays(daemon, client):
    np = need("numpy")
    assert daemon.npy
    for name, data in daemon.npy.items():
        want = np.load(io.BytesIO(daemon.object_bytes(name)))
        with client.open(daemon.uri(name)) as lease:
            got = lease.array()
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_array_equal(got, want)
            assert not got.flags.writeable
            del got
    with client.open(daemon.uri("npy/not-npy.npy")) as lease:
        with pytest.raises(ValueError):
            lease.array()


def test_lease_freed_on_close(daemon, client):
    leases = [client.open(daemon.uri(f"data/obj-{i:05d}")) for i in range(N_OBJECTS)]
    st = client.status()
    assert st["leases"] == N_OBJECTS and st["sessions"] >= 1
    for lease in leases:
        lease.close()
        lease.close()  # idempotent
    assert client.status()["leases"] == 0
    with pytest.raises(cacheagent.ClientClosed):
        leases[0].bytes()


def test_collected_lease_released(daemon, client):
    lease = client.open(daemon.uri(OBJ))
    assert client.status()["leases"] == 1
    del lease
    client.open(daemon.uri(OBJ)).close()  # the next call releases the collected one
    assert client.status()["leases"] == 0


class _PopTogether(list):
    """A list whose pop() of an entry waits until a second thread pops
    too: both threads saw the entry, as two open() calls can (the
    interleaving of a race, made certain)."""

    def __init__(self, items) -> None:
        super().__init__(items)
        self._both = threading.Barrier(2)

    def pop(self, *args):
        if self:
            try:
                self._both.wait(10)
            except threading.BrokenBarrierError:  # the other thread did not come: pop alone
                pass
        return super().pop(*args)


def test_concurrent_opens_release_a_collected_lease_once(daemon, client):
    """Client is thread-safe: two open() calls that both find one collected
    lease to release do not fail, and it is released."""
    lease = client.open(daemon.uri(OBJ))
    del lease
    assert len(client._pending) == 1
    client._pending = _PopTogether(client._pending)
    opened, failed = [], []

    def open_one() -> None:
        try:
            opened.append(client.open(daemon.uri(OBJ)))
        except BaseException as e:
            failed.append(e)

    threads = [threading.Thread(target=open_one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    assert not failed, failed
    assert len(opened) == 2 and client.status()["leases"] == 2
    for lease in opened:
        lease.close()
    assert client.status()["leases"] == 0


def test_client_close_releases(daemon):
    c = daemon.client()
    lease = c.open(daemon.uri(OBJ))
    other = daemon.client()
    assert other.status()["leases"] == 1
    c.close()
    assert lease.wait_stale(2)
    assert wait_for(lambda: other.status()["leases"] == 0, 2)
    with pytest.raises(cacheagent.ClientClosed):
        c.status()
    lease.close()
    other.close()


CHILD = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, sys.argv[1])
    import cacheagent
    c = cacheagent.Client(sys.argv[2])
    leases = [c.open(u) for u in sys.argv[3:]]
    print("ready", flush=True)
    time.sleep(60)
""")


def test_sigkill_releases_leases(daemon, client):
    uris = [daemon.uri(f"data/obj-{i:05d}") for i in range(3)]
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(PKG_ROOT), daemon.socket, *uris],
                             stdout=subprocess.PIPE)
    try:
        assert child.stdout.readline().strip() == b"ready"
        assert client.status()["leases"] == 3
        child.send_signal(signal.SIGKILL)
        child.wait(5)
        assert wait_for(lambda: client.status()["leases"] == 0, 1.0), client.status()["leases"]
    finally:
        child.kill()
        child.wait()
        child.stdout.close()


def test_plans(daemon, client):
    uris = [daemon.uri(f"data/obj-{i:05d}") for i in (2, 0, 3)]
    p = client.plan(uris, id="py-plan")
    assert p.id == "py-plan" and len(p) == 3 and p.position == 0
    assert {q.id: q.objects for q in client.plans()}["py-plan"] == 3
    p.advance(2)
    assert client.get_plan("py-plan").position == 2 and p.info().position == 2
    p2 = client.plan(uris[:1], id="py-plan")  # replaces
    assert client.get_plan("py-plan").objects == 1 and p2.position == 0
    p.close()
    assert "py-plan" not in {q.id for q in client.plans()}
    p.close()  # idempotent
    with pytest.raises(cacheagent.ClientClosed):
        p.advance(1)
    auto = client.plan(uris)
    assert auto.id and auto.id in {q.id for q in client.plans()}
    auto.close()


def test_plan_convenience_with_mount_paths(daemon, client):
    paths = [f"/mnt/gcs/bench/data/obj-{i:05d}" for i in range(N_OBJECTS)]
    with cacheagent.plan(paths, socket=daemon.socket, mount_root="/mnt/gcs", id="py-mount") as p:
        assert client.get_plan("py-mount").objects == N_OBJECTS
        for i in range(N_OBJECTS + 1):
            p.advance(i)
        assert client.get_plan("py-mount").position == N_OBJECTS
    assert "py-mount" not in {q.id for q in client.plans()}
    assert p.client._closed


def test_fetch_promote_prefetch(daemon, client):
    client.fetch([daemon.uri(f"data/obj-{i:05d}") for i in range(N_OBJECTS)])
    r = client.promote([daemon.uri(OBJ)])  # no shm tier here: nothing to do
    assert r.get("promoted", 0) == 0
    job = client.prefetch("gs://bench/data/")
    assert job["id"] and job["uri"] == "gs://bench/data/"
    assert wait_for(lambda: client.job(job["id"])["state"] == "done", 10)
    with pytest.raises(ValueError):
        client.prefetch("gs://bench/data/x#3")


def test_fork_child_uses_own_connection(daemon, client):
    lease = client.open(daemon.uri(OBJ))
    pid = os.fork()
    if pid == 0:  # the child: the parent's client works through new connections
        code = 1
        try:
            with client.open(daemon.uri("data/obj-00002")) as l2:
                code = 0 if client.status()["leases"] == 2 and l2.size == OBJECT_SIZE else 2
            lease.close()  # the parent's lease: only the local mapping goes
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    assert client.status()["leases"] == 1 and not lease.stale  # the parent's session lives on
    lease.close()
    assert client.status()["leases"] == 0


def test_daemon_restart_ends_session(daemon):
    c = daemon.client()
    try:
        lease = c.open(daemon.uri(OBJ))
        sid = lease._session.id
        daemon.stop_daemon()
        assert lease.wait_stale(5)
        with pytest.raises(cacheagent.DaemonNotRunning):
            c.open(daemon.uri(OBJ))
        daemon.start_daemon()
        with c.open(daemon.uri(OBJ)) as again:
            assert again._session.id != sid and not again.stale
        lease.close()  # its session is gone: nothing to release
        assert c.status()["leases"] == 0
    finally:
        c.close()
        if daemon.daemon is None:
            daemon.start_daemon()


def test_evicted_lease_turns_stale(daemon, client):
    """The session stream's later lines mark leases stale (here: evicted)."""
    name = "data/obj-00003"
    with client.open(daemon.uri(name)) as lease:
        want = daemon.object_bytes(name)
        client._request("POST", "/v1/evict", {"bucket": "bench", "prefix": name})  # no public evict yet
        assert lease.wait_stale(3)
        assert lease.bytes().tobytes() == want  # still readable until closed
    with client.open(daemon.uri(name)) as again:
        assert not again.stale and again.bytes().tobytes() == want


def test_no_fleet(client):
    """A daemon without a fleet: section answers GET /v1/fleet with code no_fleet."""
    with pytest.raises(cacheagent.NoFleet) as ei:
        client._request("GET", "/v1/fleet")
    assert ei.value.code == "no_fleet" and ei.value.status == 404 and ei.value.message
