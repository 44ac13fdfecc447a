"""URI parsing matches the Go side (fetch/uri_test.go), and mount paths map to objects."""

import pytest

from cacheagent import URI, ObjectRef, object_of, parse_object, parse_prefix, parse_uri


@pytest.mark.parametrize("s, want", [
    ("gs://b/p/q", URI("b", "p/q", 0)),
    ("gs://b", URI("b", "", 0)),
    ("gs://b/", URI("b", "", 0)),
    ("gs://b/../x", URI("b", "../x", 0)),
    ("gs://b/x.npy#1712", URI("b", "x.npy", 1712)),
    ("gs://b/a#b", URI("b", "a#b", 0)),
    ("gs://b/a#1#b", URI("b", "a#1#b", 0)),
    ("gs://b/x#9223372036854775807", URI("b", "x", (1 << 63) - 1)),
    ("gs://b/x#٣", URI("b", "x#٣", 0)),  # only ASCII digits pin a generation
])
def test_parse_uri(s, want):
    assert parse_uri(s) == want


@pytest.mark.parametrize("s", ["gs://b/x#0", "gs://b/x#99999999999999999999", "gs://b/x#9223372036854775808",
                               "gs:///x", "gs://", "s3://b/x", "", "gs://b#12", "gs://b/#1", "/b/x", None, b"gs://b/x"])
def test_parse_uri_rejects(s):
    with pytest.raises(ValueError):
        parse_uri(s)


def test_round_trip():
    for s in ["gs://b/p", "gs://b/x#12", "gs://b/a#b", "gs://b/x#"]:
        assert str(parse_uri(s)) == s
        assert parse_uri(str(parse_uri(s))) == parse_uri(s)


def test_object_and_prefix():
    assert parse_object("gs://b/x.npy#7") == ObjectRef("b", "x.npy", 7)
    assert ObjectRef("b", "x.npy", 7).to_json() == {"bucket": "b", "name": "x.npy", "generation": 7}
    assert ObjectRef("b", "x").to_json() == {"bucket": "b", "name": "x"}
    with pytest.raises(ValueError):
        parse_object("gs://b")
    assert parse_prefix("gs://b/train/") == URI("b", "train/")
    with pytest.raises(ValueError):
        parse_prefix("gs://b/x#3")


def test_object_of_mount_paths(tmp_path):
    assert object_of("/mnt/gcs/bkt/train/x.npy", "/mnt/gcs") == ObjectRef("bkt", "train/x.npy")
    assert object_of("/mnt/gcs/bkt/a#1", "/mnt/gcs/") == ObjectRef("bkt", "a#1")  # no generations in paths
    assert object_of(tmp_path / "b" / "n", tmp_path) == ObjectRef("b", "n")
    assert object_of("gs://b/n", "/mnt/gcs") == ObjectRef("b", "n")
    assert object_of(ObjectRef("b", "n")) == ObjectRef("b", "n")
    for bad, root in [("/mnt/gcs/bkt", "/mnt/gcs"), ("/mnt/gcs", "/mnt/gcs"), ("/mnt/gcsx/b/n", "/mnt/gcs"),
                      ("/other/b/n", "/mnt/gcs"), ("/mnt/gcs/b/n", None), ("relative/x", None)]:
        with pytest.raises(ValueError):
            object_of(bad, root)
