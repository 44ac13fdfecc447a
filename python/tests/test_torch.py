"""cacheagent.torch: PlannedSampler and Dataset, with a real DataLoader."""

import io
import subprocess
import sys

import pytest

import cacheagent
from cacheagent.torch import Dataset, PlannedSampler
from conftest import N_OBJECTS, need, wait_for

OBJS = [f"gs://bench/data/obj-{i:05d}" for i in range(N_OBJECTS)]


def test_import_does_not_import_torch():
    code = "import cacheagent, cacheagent.torch, sys; assert 'torch' not in sys.modules, 'torch imported'"
    src = str(__import__("pathlib").Path(cacheagent.__file__).parents[1])
    subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {src!r}); {code}"], check=True)


def test_planned_sampler_random(daemon, client, monkeypatch):
    torch = need("torch")
    from torch.utils.data import RandomSampler

    paths = [OBJS[i % N_OBJECTS] for i in range(200)]
    announced = []
    real_plan = cacheagent.Client.plan

    def spy(self, objects, id=None):
        announced.append((id, list(objects)))
        return real_plan(self, objects, id=id)

    monkeypatch.setattr(cacheagent.Client, "plan", spy)

    def sampler():
        return RandomSampler(range(200), generator=torch.Generator().manual_seed(11))

    ps = PlannedSampler(sampler(), paths, daemon.socket, advance_every=16)
    want = list(sampler())
    got = []
    for i in ps:
        got.append(i)
        if len(got) == 100:  # mid-epoch the daemon's position follows the reader
            assert 80 <= client.get_plan(ps.plan_id).position <= 100
    assert got == want and len(ps) == 200 and ps.errors == 0
    (pid, refs), = announced
    assert pid == ps.plan_id and [str(r) for r in refs] == [paths[i] for i in want]
    info = client.get_plan(ps.plan_id)
    assert info.objects == 200 and info.position == 200
    # a second epoch replaces the plan under the same id
    list(ps)
    assert len(announced) == 2 and announced[1][0] == ps.plan_id
    assert [p.id for p in client.plans()].count(ps.plan_id) == 1
    ps.close()
    assert ps.plan_id not in {p.id for p in client.plans()}


def test_planned_sampler_distributed_set_epoch(daemon, client):
    need("torch")
    from torch.utils.data import DistributedSampler

    ds = list(range(20))
    inner = DistributedSampler(ds, num_replicas=2, rank=1, shuffle=True, seed=3)
    with PlannedSampler(inner, [OBJS[i % N_OBJECTS] for i in ds], daemon.socket) as ps:
        orders = []
        for epoch in (0, 1):
            ps.set_epoch(epoch)
            ref = DistributedSampler(ds, num_replicas=2, rank=1, shuffle=True, seed=3)
            ref.set_epoch(epoch)
            orders.append(list(ps))
            assert orders[-1] == list(ref) and len(ps) == 10
        assert orders[0] != orders[1]
        assert client.get_plan(ps.plan_id).objects == 10


def test_planned_sampler_never_raises(tmp_path):
    """No daemon: the sampler yields its order, counts the errors, raises nothing."""
    ps = PlannedSampler([3, 1, 2], ["gs://b/a", "gs://b/b", "gs://b/c", "gs://b/d"], str(tmp_path / "none.sock"))
    assert list(ps) == [3, 1, 2] and ps.errors == 1 and ps.announced is None
    bad = PlannedSampler([0, 1], ["not a uri", "gs://b/b"], str(tmp_path / "none.sock"))
    assert list(bad) == [0, 1] and bad.errors == 1
    ps.close()


def test_planned_sampler_batches(daemon, client):
    batches = [[0, 1], [3, 2], [1]]
    with PlannedSampler(batches, OBJS, daemon.socket, advance_every=1) as ps:
        assert list(ps) == batches
        info = client.get_plan(ps.plan_id)
        assert info.objects == 5 and info.position == 5


def test_dataset_bytes_and_arrays(daemon, client):
    np = need("numpy")
    raw = Dataset(OBJS, socket=daemon.socket)
    assert len(raw) == N_OBJECTS and raw[1] == daemon.object_bytes("data/obj-00001")
    names = sorted(daemon.npy)
    arrays = Dataset([f"gs://bench/{n}" for n in names], socket=daemon.socket)
    for i, name in enumerate(names):
        want = np.load(io.BytesIO(daemon.npy[name]))
        got = arrays[i]
        np.testing.assert_array_equal(got, want)
        assert got.flags.writeable  # a copy
    items = arrays.__getitems__([0, 2, 1])
    for got, i in zip(items, [0, 2, 1]):
        np.testing.assert_array_equal(got, np.load(io.BytesIO(daemon.npy[names[i]])))
    sizes = Dataset(OBJS, decode=lambda view, ref: (ref.name, len(view)), socket=daemon.socket)
    assert sizes[0] == ("data/obj-00000", len(daemon.object_bytes("data/obj-00000")))
    assert client.status()["leases"] == 0
    with pytest.raises(cacheagent.NotFound):
        Dataset(["gs://bench/nope.npy"], socket=daemon.socket)[0]
    for d in (raw, arrays, sizes):
        d.close()


def test_dataset_pickles_without_client(daemon):
    import pickle

    ds = Dataset(OBJS, socket=daemon.socket)
    first = ds[0]
    again = pickle.loads(pickle.dumps(ds))  # what the spawn start method does
    assert again._clients._client is None and again[0] == first
    ds.close()
    again.close()


def test_dataset_zero_copy(daemon, client):
    np = need("numpy")
    name = "npy/f32.npy"
    ds = Dataset([f"gs://bench/{name}", OBJS[0]], socket=daemon.socket, zero_copy=True)
    a = ds[0]
    assert not a.flags.writeable
    np.testing.assert_array_equal(a, np.load(io.BytesIO(daemon.npy[name])))
    view = ds[1]
    assert isinstance(view, memoryview) and view.readonly
    assert client.status()["leases"] == 2  # held while the results live
    del a, view
    ds[1]  # the client releases collected leases on its next open (this one's goes when dropped)
    assert wait_for(lambda: client.status()["leases"] <= 1, 2)
    ds.close()
    assert wait_for(lambda: client.status()["leases"] == 0, 2)


def test_dataloader_two_workers(daemon, client):
    torch = need("torch")
    np = need("numpy")
    from torch.utils.data import DataLoader, RandomSampler

    name = "npy/f32.npy"
    want = np.load(io.BytesIO(daemon.npy[name]))
    uris = [f"gs://bench/{name}"] * 8 + OBJS
    ds = Dataset(uris, decode=lambda v, ref: np.frombuffer(v, dtype=np.uint8)[:16].copy()
                 if not ref.name.endswith(".npy") else np.array(want), socket=daemon.socket)
    plain = Dataset([f"gs://bench/{name}"] * 8, socket=daemon.socket)
    sampler = PlannedSampler(RandomSampler(range(len(uris)), generator=torch.Generator().manual_seed(5)),
                             uris, daemon.socket)
    seen = []
    loader = DataLoader(ds, batch_size=3, sampler=sampler, num_workers=2, collate_fn=lambda b: b)
    for batch in loader:
        seen.extend(batch)
    assert len(seen) == len(uris) and sampler.errors == 0
    for batch in DataLoader(plain, batch_size=4, num_workers=2):
        assert isinstance(batch, torch.Tensor) and batch.shape == (4,) + want.shape
        for row in batch:
            np.testing.assert_array_equal(row.numpy(), want)
    assert wait_for(lambda: client.status()["leases"] == 0, 2)
    sampler.close()
