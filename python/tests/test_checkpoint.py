"""cacheagent.checkpoint against a real daemon: save through a staging
directory, wait for the commit, list and latest, restore (hard links to the
cache's copies), an abandoned save, a second save of a committed prefix."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import cacheagent
import cacheagent.checkpoint as ckpt
from conftest import BUCKET, Env

RUN = f"gs://{BUCKET}/ckpt-run/"


def _files() -> dict:
    return {
        "model.pt": os.urandom(3 << 20),
        ".metadata": b'{"step": 100}',
        "optim/__0_0.distcp": os.urandom(70_000),
    }


def test_save_wait_list_restore(daemon: Env, tmp_path: Path) -> None:
    files = _files()
    uri = RUN + "step-100/"
    with ckpt.save(uri, socket=daemon.socket) as ck:
        assert ck.dir.is_dir() and not any(ck.dir.iterdir())
        for name, data in files.items():
            p = ck.dir / name
            p.parent.mkdir(parents=True, exist_ok=True)
            tmp = p.with_name(p.name + ".tmp")  # temp-then-rename, as Orbax and safetensors write
            tmp.write_bytes(data)
            os.replace(tmp, p)
    assert ck.info is not None and ck.info["state"] == "local" and ck.info["files"] == len(files)
    assert not ck.dir.exists()  # the staging directory is handed over and removed
    info = ckpt.wait(uri, durability="gcs", timeout=60, socket=daemon.socket)
    assert info["state"] == "gcs" and info["uploaded_bytes"] == sum(len(b) for b in files.values())
    assert ckpt.latest(RUN, socket=daemon.socket) == uri
    assert [c["uri"] for c in ckpt.list(RUN, socket=daemon.socket)] == [uri]
    assert any(s["uri"] == uri for s in ckpt.status(socket=daemon.socket))
    with ckpt.restore(uri, socket=daemon.socket) as r:
        for name, data in files.items():
            assert (r.dir / name).read_bytes() == data
        assert r.info["linked"] == len(files)
        d = r.dir
    assert not d.exists()  # a fresh restore directory goes with the block
    out = tmp_path / "restored"
    r = ckpt.restore(uri, out, socket=daemon.socket)
    assert r.dir == out
    for name, data in files.items():
        assert (out / name).read_bytes() == data
    with pytest.raises(FileExistsError):
        ckpt.restore(uri, out, socket=daemon.socket)  # nothing is overwritten
    assert (out / "model.pt").read_bytes() == files["model.pt"]


def test_abandoned_save_commits_nothing(daemon: Env) -> None:
    uri = RUN + "step-abandoned/"
    with pytest.raises(RuntimeError):
        with ckpt.save(uri, socket=daemon.socket) as ck:
            (ck.dir / "half.pt").write_bytes(b"x" * 10)
            raise RuntimeError("training crashed mid-save")
    assert not ck.dir.exists()
    assert all(c["uri"] != uri for c in ckpt.list(RUN, socket=daemon.socket))
    with pytest.raises(cacheagent.ResourceNotFound):
        ckpt.wait(uri, timeout=1, socket=daemon.socket)


def test_second_save_of_a_committed_prefix(daemon: Env) -> None:
    uri = RUN + "step-dup/"
    with ckpt.save(uri, wait="gcs", socket=daemon.socket) as ck:
        (ck.dir / "a").write_bytes(b"first")
    with pytest.raises(cacheagent.Conflict):
        with ckpt.save(uri, socket=daemon.socket) as ck2:
            (ck2.dir / "a").write_bytes(b"second")
    with ckpt.restore(uri, socket=daemon.socket) as r:
        assert (r.dir / "a").read_bytes() == b"first"


def test_bad_durability(daemon: Env) -> None:
    with pytest.raises(ValueError):
        ckpt.save(RUN + "x/", wait="disk", socket=daemon.socket)


def test_peers_without_a_fleet(daemon: Env) -> None:
    """A single node refuses "peers" durability before it takes anything."""
    uri = RUN + "step-peers/"
    with pytest.raises(cacheagent.NoFleet):
        with ckpt.save(uri, wait="peers", socket=daemon.socket) as ck:
            (ck.dir / "a").write_bytes(b"x")
    assert (ck.dir / "a").read_bytes() == b"x"  # nothing taken
    with pytest.raises(cacheagent.ResourceNotFound):
        ckpt.wait(uri, timeout=1, socket=daemon.socket)
