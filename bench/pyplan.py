#!/usr/bin/python3
"""PlannedSampler through the FUSE mount, over a shaped link (issue 19).

A shuffled map-style PyTorch job over many small files (ImageFolder-style:
gs://bench/imgs/class-K/img-NNNNN.bin), whose Dataset opens and reads each
file through the daemon's mount, DataLoader with 2 workers and batch 32, is
run against a fresh daemon (empty cache, fresh mount) per configuration:

* cold: the first epoch WITH cacheagent.torch.PlannedSampler (wrapping a
  seeded RandomSampler; paths are mount paths with mount_root) and WITHOUT
  (the same RandomSampler: each open waits out a first byte), against the
  link-limited ideal: the time a bare client takes to GET every object
  through the same link on the daemon's connections (measured first, best
  of two passes; the nominal objects x (first byte + size / rate) /
  connections and the bandwidth-only dataset / (connections x rate) are
  printed beside it);
* half cache: tiers.disk.max = half the dataset (shm off), 3 epochs with and
  without the plan; the GCS bytes of each epoch are counted at the proxy
  (GET /_linkshape/status before and after the epoch);
* warm (--only warm): once every file is cached, the same job through the
  mount against the same job over copies of the files in a local directory
  (and a plain open/read loop in this process, both ways), in alternating
  rounds: the mount's files/s as a share of reading the files directly.

Self-contained: builds `cacheagent`, the GCS emulator and the shaping proxy
(or copies them from CACHEAGENT_BIN_DIR), starts the emulator and the proxy
(-first-byte, -rate per connection) once, uploads the dataset to the
emulator directly (uploads are not counted), and for each configuration
starts a daemon whose fetch.endpoint is the proxy and whose mount.path is a
fresh directory. Everything (mounts, processes, temporary directories) is
cleaned up at the end, on failure and on Ctrl-C. Needs root (or fuse
access), fusermount3, numpy and torch.

    /usr/bin/python3 bench/pyplan.py [--objects 2000 --size 102400 --connections 8]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from urllib.parse import quote

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python" / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch.utils.data import DataLoader, RandomSampler  # noqa: E402

import cacheagent  # noqa: E402
from cacheagent.torch import PlannedSampler  # noqa: E402
from pyloader import _stop  # noqa: E402  (SIGTERM, then SIGKILL after 10 s)

BUCKET = "bench"
PREFIX = "imgs"


def _unmount(path: Path) -> None:
    if os.path.ismount(path):
        cmd = ["fusermount3", "-u", "-z"] if shutil.which("fusermount3") else ["umount", "-l"]  # root without fuse3
        subprocess.run(cmd + [str(path)], stderr=subprocess.DEVNULL, check=False)


def _first_line(p: subprocess.Popen, what: str) -> str:
    r, _, _ = select.select([p.stdout], [], [], 60)
    line = p.stdout.readline().decode().strip() if r else ""
    if not line.startswith("http://"):
        sys.exit(f"{what} printed no URL: {line!r}")
    return line


class Bench:
    def __init__(self, args: argparse.Namespace, tmp: Path) -> None:
        self.args, self.tmp = args, tmp
        self.procs: list = []  # emulator and proxy, stopped last
        self.mounts: list = []
        self.disks: list = []  # the daemons' disk tiers (outside tmp with --disk-parent)
        self.bin = tmp / "bin"
        self.proxy = ""
        self.endpoint = ""
        self.names: list = []

    # --- setup -----------------------------------------------------------
    def build(self) -> None:
        self.bin.mkdir()
        prebuilt = os.environ.get("CACHEAGENT_BIN_DIR")
        for target, name in (("./cmd/cacheagent", "cacheagent"), ("./bench/cmd/gcsemu", "gcsemu"),
                             ("./bench/cmd/gcsproxy", "gcsproxy")):
            if prebuilt and (Path(prebuilt) / name).exists():
                shutil.copy(Path(prebuilt) / name, self.bin / name)
            else:
                subprocess.run(["go", "build", "-o", str(self.bin / name), target], cwd=REPO, check=True)

    def start_link(self) -> None:
        a = self.args
        # Objects in files (-dir): the emulator's memory backend costs O(objects) per request, which on a small
        # machine measured the emulator (68 % of its CPU in its object search, half the machine's CPU).
        (self.tmp / "emu").mkdir()
        emu = subprocess.Popen([str(self.bin / "gcsemu"), "-bucket", BUCKET, "-prefix", "unused/", "-objects", "1",
                                "-size", "1", "-first-byte", "0", "-rate", "0", "-dir", str(self.tmp / "emu")],
                               stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        self.procs.append(emu)
        emu_endpoint = _first_line(emu, "gcsemu")  # http://127.0.0.1:P/storage/v1/
        self.emu_base = emu_endpoint.split("/storage/v1/")[0]
        proxy = subprocess.Popen([str(self.bin / "gcsproxy"), "-upstream", self.emu_base, "-first-byte",
                                  a.first_byte, "-rate", a.rate], stdout=subprocess.PIPE,
                                 stderr=open(self.tmp / "proxy.log", "ab"), stdin=subprocess.DEVNULL)
        self.procs.append(proxy)
        self.proxy = _first_line(proxy, "gcsproxy").rstrip("/")
        # the daemon takes the endpoint in the form gcsemu prints it (pyloader.setup)
        self.endpoint = self.proxy + "/storage/v1/"

    def upload(self) -> None:
        a = self.args
        rng = np.random.default_rng(1)
        for i in range(a.objects):
            name = f"{PREFIX}/class-{i % a.classes:02d}/img-{i:05d}.bin"
            body = rng.integers(0, 255, a.size, dtype=np.uint8).tobytes()
            req = urllib.request.Request(f"{self.emu_base}/upload/storage/v1/b/{BUCKET}/o?uploadType=media&name="
                                         f"{quote(name, safe='')}", data=body, method="POST")
            urllib.request.urlopen(req, timeout=60).read()
            self.names.append(name)

    def measure_link(self, conns: int) -> float:
        """The link's own time for the dataset: every object GET through the
        proxy (the daemon's kind of request, one whole object each), `conns`
        keep-alive connections at once, no daemon, no disk. Returns seconds."""
        host, port = self.proxy.removeprefix("http://").split(":")
        names = iter(self.names)
        lock = threading.Lock()
        errors: list = []

        def worker() -> None:
            c = http.client.HTTPConnection(host, int(port), timeout=60)
            try:
                while True:
                    with lock:
                        name = next(names, None)
                    if name is None:
                        return
                    c.request("GET", f"/{BUCKET}/{quote(name, safe='/')}")
                    r = c.getresponse()
                    body = r.read()
                    if r.status != 200 or len(body) != self.args.size:
                        raise RuntimeError(f"link: GET {name}: status {r.status}, {len(body)} bytes")
            except Exception as e:  # noqa: BLE001 (reported below)
                errors.append(e)
            finally:
                c.close()

        threads = [threading.Thread(target=worker) for _ in range(conns)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        dt = time.perf_counter() - t0
        if errors:
            raise RuntimeError(f"link measurement failed: {errors[0]}")
        return dt

    def link_bytes(self) -> int:
        with urllib.request.urlopen(self.proxy + "/_linkshape/status", timeout=10) as r:
            return int(json.load(r)["stats"]["bytes_served"])

    def start_daemon(self, tag: str, disk_max: str, open_mode: str = "") -> tuple:
        a = self.args
        d = self.tmp / tag
        d.mkdir()
        disk = Path(tempfile.mkdtemp(prefix=f"{tag}-", dir=a.disk_parent)) if a.disk_parent else d / "disk"
        disk.mkdir(exist_ok=True)
        self.disks.append(disk)
        mnt = d / "mnt"
        mnt.mkdir()
        sock = str(d / "control.sock")
        cfg = d / "cacheagent.yaml"
        with socket.socket() as ls:  # a free loopback port for /metrics
            ls.bind(("127.0.0.1", 0))
            self.metrics = f"127.0.0.1:{ls.getsockname()[1]}"
        cfg.write_text("tiers:\n"
                       f"  disk: {{dir: {disk}, max: {disk_max}}}\n"
                       "  shm: {dir: none}\n"
                       f"fetch: {{endpoint: \"{self.endpoint}\", connections: {a.connections}"
                       + (f", small_connections: {a.small_connections}" if a.small_connections else "") + "}\n"
                       f"mount: {{path: {mnt}, open: {open_mode or a.open}}}\n"
                       f"control: {{socket: {sock}}}\n"
                       f"metrics: {{listen: \"{self.metrics}\"}}\n"
                       "gpu: none\n")
        log = open(d / "daemon.log", "ab")
        p = subprocess.Popen([str(self.bin / "cacheagent"), "serve", "--config", str(cfg)], stdout=log, stderr=log,
                             stdin=subprocess.DEVNULL)
        self.mounts.append(mnt)
        deadline = time.monotonic() + 30
        while True:
            if p.poll() is not None:
                sys.exit(f"the daemon ({tag}) exited:\n" + (d / "daemon.log").read_text()[-3000:])
            try:
                cacheagent.Client(sock, timeout=2).close()
                if os.path.ismount(mnt):
                    break
            except cacheagent.CacheagentError:
                pass
            if time.monotonic() > deadline:
                _stop(p)
                sys.exit(f"the daemon ({tag}) did not start:\n" + (d / "daemon.log").read_text()[-3000:])
            time.sleep(0.05)
        return p, sock, mnt

    # --- the job ---------------------------------------------------------
    def run_job(self, tag: str, disk_max: str, planned: bool, epochs: int, open_mode: str = "") -> list:
        """A fresh daemon and mount; `epochs` epochs of the DataLoader job.
        Returns [(seconds, link bytes)] per epoch."""
        a = self.args
        p, sock, mnt = self.start_daemon(tag, disk_max, open_mode)
        try:
            paths = [f"{mnt}/{BUCKET}/{n}" for n in self.names]
            ds = FileDataset(paths)
            base = RandomSampler(ds, generator=torch.Generator().manual_seed(a.seed))
            sampler = PlannedSampler(base, paths, socket=sock, mount_root=str(mnt)) if planned else base
            dl = DataLoader(ds, batch_size=a.batch, sampler=sampler, num_workers=a.workers)
            out = []
            for _ in range(epochs):
                b0 = self.link_bytes()
                t0 = time.perf_counter()
                n = 0
                for x in dl:
                    n += x.shape[0]
                dt = time.perf_counter() - t0
                if n != len(ds):
                    raise RuntimeError(f"{tag}: epoch read {n} of {len(ds)} samples")
                out.append((dt, self.link_bytes() - b0))
            if planned:
                if sampler.errors:
                    raise RuntimeError(f"{tag}: PlannedSampler logged {sampler.errors} errors")
                with urllib.request.urlopen(f"http://{self.metrics}/metrics", timeout=10) as r:
                    m = {ln.split()[0]: ln.split()[1] for ln in r.read().decode().splitlines()
                         if ln.startswith("cacheagent_plan_")}
                print(f"  {tag}: the planner prefetched {m.get('cacheagent_plan_prefetched_objects_total')} objects, "
                      f"listed {m.get('cacheagent_plan_listings_total')} directories and fetched "
                      f"{m.get('cacheagent_plan_listed_objects_total')} objects by their listing")
                sampler.close()
            return out
        except Exception:
            print(f"{tag}: the daemon's log ends:\n" + (self.tmp / tag / "daemon.log").read_text()[-4000:], file=sys.stderr)
            raise
        finally:
            _stop(p)
            _unmount(mnt)

    def run_warm(self, rounds: int) -> list:
        """A fresh daemon; one epoch fills the cache, the files are copied
        to a local directory, then `rounds` rounds of the job and of a plain
        read loop, through the mount and directly, alternating which goes
        first. Returns [(kind, mount files/s, direct files/s)]."""
        a = self.args
        p, sock, mnt = self.start_daemon("warm", "8GiB")
        try:
            through = [f"{mnt}/{BUCKET}/{n}" for n in self.names]
            local = self.tmp / "direct"
            direct = [str(local / n) for n in self.names]
            for src, dst in zip(through, direct):  # the cold epoch: every file cached
                Path(dst).parent.mkdir(parents=True, exist_ok=True)
                Path(dst).write_bytes(Path(src).read_bytes())

            def job(paths: list) -> float:
                ds = FileDataset(paths)
                sampler = RandomSampler(ds, generator=torch.Generator().manual_seed(a.seed))
                dl = DataLoader(ds, batch_size=a.batch, sampler=sampler, num_workers=a.workers)
                t0 = time.perf_counter()
                n = sum(x.shape[0] for x in dl)
                dt = time.perf_counter() - t0
                if n != len(paths):
                    raise RuntimeError(f"warm job read {n} of {len(paths)} samples")
                return n / dt

            def loop(paths: list, buffering: int = -1) -> float:
                order = np.random.default_rng(a.seed).permutation(len(paths))
                t0 = time.perf_counter()
                for i in order:
                    with open(paths[i], "rb", buffering=buffering) as f:
                        f.read()
                return len(paths) / (time.perf_counter() - t0)

            def raw_loop(paths: list) -> float:  # unbuffered: open() asks no isatty()
                return loop(paths, 0)

            job(through), job(direct), loop(through), loop(direct)  # warm both page caches and the workers' imports
            out = []
            for r in range(rounds):
                for kind, fn in (("DataLoader job", job), ("open+read loop", loop),
                                 ("open(buffering=0)+read loop", raw_loop)):
                    if r % 2 == 0:
                        m, d = fn(through), fn(direct)
                    else:
                        d, m = fn(direct), fn(through)
                    out.append((kind, m, d))
            return out
        finally:
            _stop(p)
            _unmount(mnt)

    def cleanup(self) -> None:
        for m in self.mounts:
            _unmount(m)
        for p in reversed(self.procs):
            _stop(p)
            if p.stdout:
                p.stdout.close()


class FileDataset(torch.utils.data.Dataset):
    """ImageFolder-style: each item opens and reads one file (through the mount)."""

    def __init__(self, paths: list) -> None:
        self.paths = paths

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> torch.Tensor:
        with open(self.paths[i], "rb") as f:
            b = f.read()
        return torch.frombuffer(bytearray(b), dtype=torch.uint8)


def _size(s: str) -> int:
    for suf, m in (("MB", 10**6), ("KB", 10**3)):
        if s.upper().endswith(suf):
            return int(float(s[:-2]) * m)
    return int(s)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--objects", type=int, default=2000)
    ap.add_argument("--size", type=int, default=100 * 1024, help="bytes per object")
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--connections", type=int, default=8, help="the daemon's fetch.connections")
    ap.add_argument("--small-connections", type=int, default=0,
                    help="fetch.small_connections (0: the daemon's default, as many as connections)")
    ap.add_argument("--first-byte", default="20ms")
    ap.add_argument("--rate", default="100MB", help="per connection (decimal MB)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--epochs", type=int, default=3, help="epochs of the half-cache runs")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--only", choices=["cold", "half", "plan", "warm"],
                    help="run one part only (plan: the planned cold epoch alone, for quick comparisons; "
                         "warm: the warm job through the mount against direct reads, not run otherwise)")
    ap.add_argument("--open", choices=["auto", "ask", "skip"], default="auto", help="the daemon's mount.open")
    ap.add_argument("--disk-parent", help="where the daemons' disk tiers go (default: the run's temporary "
                                          "directory); each gets a fresh directory there, removed at the end")
    ap.add_argument("--rounds", type=int, default=5, help="rounds of --only warm")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="pyplan-bench-"))
    b = Bench(args, tmp)
    # SIGTERM as Ctrl-C: the finally below cleans up
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    signal.signal(signal.SIGINT, signal.default_int_handler)  # also when started in the background
    try:
        t_all = time.perf_counter()
        b.build()
        b.start_link()
        b.upload()
        total = args.objects * args.size
        rate = _size(args.rate)
        conns = args.connections
        small = args.small_connections or conns
        bandwidth = total / ((conns + small) * rate)
        fb = float(args.first_byte.rstrip("ms")) / 1e3 if args.first_byte.endswith("ms") else float(args.first_byte)
        nominal = args.objects * (fb + args.size / rate) / (conns + small)
        print(f"pyplan: {args.objects} objects x {args.size} B = {total / 1e6:.1f} MB under gs://{BUCKET}/{PREFIX}/"
              f"class-*/, link {args.first_byte} first byte, {args.rate}/s per connection; daemon "
              f"fetch.connections {conns} (small-object lane {small}); DataLoader {args.workers} workers, "
              f"batch {args.batch}, RandomSampler seed {args.seed}")
        ideal = nominal
        if args.only in (None, "cold", "plan"):
            # The link-limited ideal: the time the link itself takes to deliver the dataset on the daemon's
            # connections, measured (the best of two passes of a bare client), against which the job is judged.
            ideal = min(b.measure_link(conns + small) for _ in range(2))
            print(f"link-limited ideal, measured (every object GET through the link on {conns} + {small} connections, "
                  f"no daemon; best of 2): {ideal:.3f} s; nominal (each object's first byte and body, on as many "
                  f"connections): {nominal:.3f} s; bandwidth alone: {bandwidth:.3f} s")
        res = {}
        if args.only == "warm":
            rows = b.run_warm(args.rounds)
            print(f"\nwarm, mount.open {args.open}: files/s through the mount / reading the same files directly")
            print("| kind | round | mount files/s | direct files/s | mount/direct |")
            print("|---|---:|---:|---:|---:|")
            for i, (kind, m, d) in enumerate(rows):
                print(f"| {kind} | {i // 3 + 1} | {m:,.0f} | {d:,.0f} | {m / d:.2f} |")
            for kind in ("DataLoader job", "open+read loop", "open(buffering=0)+read loop"):
                rs = sorted(m / d for k, m, d in rows if k == kind)
                print(f"{kind}: median mount/direct {rs[len(rs) // 2]:.2f} (target >= 0.5)")
        if args.only == "plan":
            dt, by = b.run_job("cold-plan", "8GiB", True, 1)[0]
            print(f"cold-plan: {dt:.2f} s, {by / 1e6:.1f} MB from GCS, {args.objects / dt:,.0f} samples/s, "
                  f"{dt / ideal:.2f}x the measured link, {dt / nominal:.2f}x nominal, {dt / bandwidth:.1f}x bandwidth")
        if args.only in (None, "cold"):
            for planned in (True, False):
                tag = f"cold-{'plan' if planned else 'noplan'}"
                res[tag] = b.run_job(tag, "8GiB", planned, 1)
            tp, tn = res["cold-plan"][0][0], res["cold-noplan"][0][0]
            print()
            print("| cold first epoch | seconds | GCS MB | samples/s | x measured link | x nominal |")
            print("|---|---:|---:|---:|---:|---:|")
            for tag in ("cold-plan", "cold-noplan"):
                dt, by = res[tag][0]
                print(f"| {tag} | {dt:.2f} | {by / 1e6:.1f} | {args.objects / dt:,.0f} | {dt / ideal:.2f} | "
                      f"{dt / nominal:.2f} |")
            w = b.run_job("warm", "8GiB", False, 2)[1][0]
            print(f"| warm (2nd epoch, everything cached, no plan) | {w:.2f} | - | {args.objects / w:,.0f} | "
                  f"{w / ideal:.2f} | {w / nominal:.2f} |")
            print(f"target 1: plan <= 1.3x the link-limited ideal: {tp / ideal:.2f}x -> {'met' if tp <= 1.3 * ideal else 'NOT met'}; "
                  f"plan >= 2x faster than no plan: {tn / tp:.2f}x -> {'met' if tn >= 2 * tp else 'NOT met'}")
        if args.only in (None, "half"):
            half = total // 2
            for planned in (True, False):
                tag = f"half-{'plan' if planned else 'lru'}"
                # mount.open ask: a mount that skips opens serves what its own page cache holds without asking the
                # daemon, and this machine's RAM holds the whole dataset there, a cache beyond tiers.disk.max that
                # would hide the eviction policy being measured (LRU then reads 0 bytes in later epochs).
                res[tag] = b.run_job(tag, str(half), planned, args.epochs, "ask")
            print()
            print(f"| half cache (tiers.disk.max {half} B, mount.open ask) | " + " | ".join(
                f"epoch {e + 1} s | epoch {e + 1} GCS x dataset" for e in range(args.epochs)) + " |")
            print("|---|" + "---:|---:|" * args.epochs)
            for tag in ("half-plan", "half-lru"):
                print(f"| {tag} | " + " | ".join(f"{dt:.2f} | {by / total:.2f}" for dt, by in res[tag]) + " |")
            later = [by / total for _, by in res["half-plan"][1:]]
            later_lru = [by / total for _, by in res["half-lru"][1:]]
            ok = bool(later) and max(later) <= 0.6
            print(f"target 2: plan epochs 2-{args.epochs} GCS <= 0.6x dataset: "
                  f"{', '.join(f'{v:.2f}' for v in later)} -> {'met' if ok else 'NOT met'}; "
                  f"LRU: {', '.join(f'{v:.2f}' for v in later_lru)}")
        print(f"\ntotal wall {time.perf_counter() - t_all:.1f} s")
    except KeyboardInterrupt:
        print("interrupted; cleaning up", file=sys.stderr)
        sys.exit(130)
    finally:
        b.cleanup()
        for disk in b.disks:
            shutil.rmtree(disk, ignore_errors=True)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
