"""cacheagent.Loader over token and record datasets (format=...): token
windows equal numpy's reading of the same files (np.memmap), WebDataset
fields equal tarfile's, and the ids equal `cacheagent loader ids` with the
same flags; against the real daemon and the GCS emulator (conftest)."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Dict, List

import pytest

import cacheagent
from conftest import REPO, need

L = 32  # the windows' length: samples of L+1 tokens
NANO_TOKENS = 20_000
FIXTURES = REPO / "loader" / "formats" / "testdata"


def cli_ids(daemon, prefix: str, pattern: str, batch: int, *flags: str) -> List[List[int]]:
    """The batches' ids as `cacheagent loader ids` prints them."""
    args = [str(daemon.bin / "cacheagent"), "--config", str(daemon.config), "loader", "ids",
            "--data", f"gs://bench/{prefix}", "--pattern", pattern, "--batch", str(batch), *flags]
    r = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return [[int(v) for v in line.split()] for line in r.stdout.splitlines() if line.strip()]


def upload_dir(daemon, local: Path, prefix: str) -> None:
    for p in sorted(local.iterdir()):
        if p.is_file() and p.name != "expect.json":
            daemon.upload(prefix + p.name, p.read_bytes())


@pytest.fixture(scope="module")
def tokens(daemon, tmp_path_factory):
    """nanoGPT's train.bin (uint16, written with np.memmap) under fmt/nano/,
    and the repository's token fixtures (loader/formats/testdata/token_datasets.py:
    raw shards, Megatron .bin/.idx) under fmt/raw/ and fmt/megatron/."""
    np = need("numpy")
    tmp = tmp_path_factory.mktemp("tokens")
    path = tmp / "train.bin"
    mm = np.memmap(path, dtype=np.uint16, mode="w+", shape=(NANO_TOKENS,))
    mm[:] = np.random.default_rng(11).integers(0, 50257, size=NANO_TOKENS, dtype=np.uint16)
    mm.flush()
    del mm
    daemon.upload("fmt/nano/train.bin", path.read_bytes())
    out = tmp / "fixtures"
    r = subprocess.run([sys.executable, str(FIXTURES / "token_datasets.py"), str(out), str(L)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    upload_dir(daemon, out / "raw", "fmt/raw/")
    upload_dir(daemon, out / "megatron", "fmt/megatron/")
    expect = json.loads((out / "expect.json").read_text())
    return {"nano": np.memmap(path, dtype=np.uint16, mode="r"), "expect": expect}


def read_all(ld: cacheagent.Loader, check) -> List[List[int]]:
    """Every batch's ids, each batch passed to check first."""
    ids = []
    for _ in range(ld._req.get("epochs", 1)):
        for b in ld:
            check(b)
            ids.append(b.ids.tolist())
    return ids


def test_tokens_nanogpt_train_bin(daemon, tokens):
    np = need("numpy")
    mm = tokens["nano"]
    batch, flags = 64, ["--format", "tokens", "--seq-len", str(L), "--token-dtype", "uint16", "--shuffle", "global",
                        "--seed", "3", "--epochs", "2"]
    want = cli_ids(daemon, "fmt/nano/", "*.bin", batch, *flags)
    with cacheagent.Loader("gs://bench/fmt/nano/", pattern="*.bin", format="tokens", seq_len=L, token_dtype="uint16",
                           batch_size=batch, shuffle="global", seed=3, epochs=2, socket=daemon.socket,
                           timeout=30) as ld:
        assert ld.format == "tokens" and ld.fields == []
        assert ld.batches_per_epoch * 2 == len(want)

        def check(b):
            t = b["tokens"]
            assert t.dtype == np.uint16 and t.shape == (len(b), L + 1)
            assert np.shares_memory(t, ld.ring)  # a view of the ring, no copy
            for i, k in enumerate(b.ids.tolist()):
                assert np.array_equal(t[i], mm[k * L:k * L + L + 1]), f"window {k}"

        got = read_all(ld, check)
    assert got == want
    assert sorted(set(i for b in got[:len(got) // 2] for i in b)) == list(range((NANO_TOKENS - 1) // L))


def test_tokens_widened_to_int64(daemon, tokens):
    """token_out_dtype="int64": the daemon widens the tokens as it gathers;
    torch.from_numpy of the batch is an int64 index tensor on the ring."""
    np = need("numpy")
    mm = tokens["nano"]
    with cacheagent.Loader("gs://bench/fmt/nano/", pattern="*.bin", seq_len=L, token_dtype="uint16",
                           token_out_dtype="int64", batch_size=16, shuffle="global", seed=2, socket=daemon.socket,
                           timeout=30) as ld:
        assert ld.format == "tokens" and ld.array_specs[0]["dtype"] == "<i8"
        n = 0
        for b in ld:
            t = b["tokens"]
            assert t.dtype == np.int64 and t.shape == (len(b), L + 1) and np.shares_memory(t, ld.ring)
            for i, k in enumerate(b.ids.tolist()):
                assert np.array_equal(t[i], mm[k * L:k * L + L + 1].astype(np.int64)), f"window {k}"
            n += len(b)
        assert n == (NANO_TOKENS - 1) // L


@pytest.mark.parametrize("name,pattern,fmt", [
    ("raw", "shard-*.bin", "tokens"),  # windows across shard boundaries
    ("megatron", "shard-*.{bin,idx}", None),  # guessed from the pattern, as the CLI guesses
])
def test_token_fixtures(daemon, tokens, name, pattern, fmt):
    need("numpy")
    windows = tokens["expect"][name]
    flags = ["--seq-len", str(L), "--token-dtype", "uint16", "--shuffle", "global", "--seed", "8"]
    if fmt:
        flags += ["--format", fmt]
    want = cli_ids(daemon, f"fmt/{name}/", pattern, 5, *flags)
    with cacheagent.Loader(f"gs://bench/fmt/{name}/", pattern=pattern, format=fmt, seq_len=L, token_dtype="uint16",
                           batch_size=5, shuffle="global", seed=8, socket=daemon.socket, timeout=30) as ld:
        assert ld.format == (fmt or "megatron")

        def check(b):
            for i, k in enumerate(b.ids.tolist()):
                assert b["tokens"][i].tolist() == windows[k], f"window {k}"

        got = read_all(ld, check)
    assert got == want and sorted(i for b in got for i in b) == list(range(len(windows)))


@pytest.fixture(scope="module")
def wds(daemon, tmp_path_factory):
    """The repository's WebDataset fixture (loader/formats/testdata/wds_dataset.py:
    ustar, pax and GNU tars) under fmt/wds/, and each sample's fields as
    Python's tarfile reads them, in order."""
    tmp = tmp_path_factory.mktemp("wds") / "tars"
    r = subprocess.run([sys.executable, str(FIXTURES / "wds_dataset.py"), str(tmp)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    upload_dir(daemon, tmp, "fmt/wds/")
    samples: List[Dict[str, bytes]] = []
    for k in range(3):
        keys: List[str] = []
        with tarfile.open(tmp / f"shard-{k}.tar") as tar:
            for m in tar.getmembers():
                key, field = m.name.split(".", 1)
                if not keys or keys[-1] != key:
                    keys.append(key)
                    samples.append({})
                samples[-1][field] = tar.extractfile(m).read()
    return samples


def test_webdataset_fields_match_tarfile(daemon, wds):
    np = need("numpy")
    batch = 3
    want = cli_ids(daemon, "fmt/wds/", "shard-*.tar", batch, "--shuffle", "global", "--seed", "4", "--epochs", "2")
    with cacheagent.Loader("gs://bench/fmt/wds/", pattern="shard-*.tar", batch_size=batch, shuffle="global", seed=4,
                           epochs=2, socket=daemon.socket, timeout=30) as ld:
        assert ld.format == "webdataset" and sorted(ld.fields) == ["bin", "json", "txt"]

        def check(b):
            assert b.fields == ld.fields and "txt" in b
            for name in b.fields:
                f = b[name]
                assert f.offsets.dtype == np.int64 and f.data.dtype == np.uint8 and len(f) == len(b)
                assert f.offsets[0] == 0 and f.offsets[-1] == len(f.data)
                assert np.shares_memory(f.offsets, ld.ring)  # views of the ring, no copy
                assert len(f.data) == 0 or np.shares_memory(f.data, ld.ring)
                for i, k in enumerate(b.ids.tolist()):
                    assert f.bytes(i) == wds[k].get(name, b""), f"sample {k} field {name}"
                    assert bytes(f[i]) == f.bytes(i)
                assert [bytes(v) for v in f] == [wds[k].get(name, b"") for k in b.ids.tolist()]
            c = b.copy()
            assert c["txt"].bytes(0) == b["txt"].bytes(0) and not np.shares_memory(c["txt"].data, ld.ring)

        got = read_all(ld, check)
    assert got == want


def test_webdataset_field_bytes_too_small(daemon, wds):
    with cacheagent.Loader("gs://bench/fmt/wds/", pattern="shard-*.tar", batch_size=4, field_bytes=16,
                           socket=daemon.socket, timeout=30) as ld:
        with pytest.raises(cacheagent.LoaderError, match="exceeds its buffer"):
            for _ in ld:
                pass


def test_token_format_needs_seq_len(daemon, tokens):
    with pytest.raises(cacheagent.InvalidRequest, match="seq_len"):
        cacheagent.Loader("gs://bench/fmt/nano/", pattern="*.bin", format="tokens", token_dtype="uint16",
                          batch_size=4, socket=daemon.socket, timeout=30)
