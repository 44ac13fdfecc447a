"""The Loader sends the Go loader's one request shape: every key of the body
``session_request`` builds is a JSON field of ``loader/spec``'s ``Spec`` (or of
its ``State``, under ``resume``), read from the Go source so the two cannot
drift."""

from __future__ import annotations

import re
from typing import Set, Tuple

from cacheagent._request import session_request
from conftest import REPO


def _spec_fields() -> Tuple[Set[str], Set[str]]:
    """The JSON names of spec.Spec's and spec.State's fields."""
    src = (REPO / "loader" / "spec" / "spec.go").read_text()
    out = []
    for name in ("Spec", "State"):
        body = re.search(r"type %s struct \{(.*?)\n\}" % name, src, re.S)
        assert body, f"no type {name} in loader/spec/spec.go"
        out.append(set(re.findall(r'json:"(\w+)', body.group(1))))
    return out[0], out[1]


def test_request_keys_are_spec_fields() -> None:
    spec, state = _spec_fields()
    assert {"data", "pattern", "manifest", "batch_size", "resume"} <= spec, spec  # the regex still reads the file
    req = session_request(
        "gs://b/p/", "shard-*.{x,y}.npy", {"shards": []}, 8,
        {"shuffle": "node", "format": "tokens", "token_dtype": "uint16", "token_out_dtype": "int64"},
        {"window": 2, "seed": 1, "epoch": 1, "epochs": 2, "rank": 1, "world": 2, "prefetch": 3, "workers": 1,
         "seq_len": 16, "field_bytes": 1024}, True, False)
    req.update({"ranks_per_node": 2, "nodes": 1, "node": 0,  # what Loader adds for the node shuffle
                "resume": {"epoch": 1, "batch": 2, "fingerprint": 3}})  # and for load_state_dict
    assert set(req) <= spec, f"keys Go's spec.Spec does not have: {set(req) - spec}"
    assert set(req["resume"]) <= state
