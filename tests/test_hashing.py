"""data/hashing.py: the one SHA-256 helper and its one file-digest cache, on real files."""

from __future__ import annotations

import hashlib
import json
import os

from data.hashing import (CACHE_ENV, cached_sha256_files, canonical_json, default_cache_path, sha256_bytes,
                          sha256_file, sha256_json, sha256_text)


def test_digests_equal_hashlib(tmp_path):
    blob = os.urandom(3 << 20) + "é\n".encode()  # larger than one read block
    f = tmp_path / "weights.bin"
    f.write_bytes(blob)
    want = hashlib.sha256(blob).hexdigest()
    assert sha256_file(f) == sha256_bytes(blob) == want
    assert sha256_file(f, block=7) == want
    assert sha256_text("é") == hashlib.sha256("é".encode("utf-8")).hexdigest()
    doc = {"b": [1, 2.5], "a": "é"}
    assert canonical_json(doc) == '{"a":"é","b":[1,2.5]}'
    assert sha256_json(doc) == hashlib.sha256('{"a":"é","b":[1,2.5]}'.encode()).hexdigest()


def test_cache_reuses_until_the_file_changes(tmp_path):
    f, g = tmp_path / "a.bin", tmp_path / "b.bin"
    f.write_bytes(b"abc")
    g.write_bytes(b"xyz")
    cache = tmp_path / "cache" / "digests.json"
    assert cached_sha256_files([f, g], cache) == [hashlib.sha256(b"abc").hexdigest(), hashlib.sha256(b"xyz").hexdigest()]
    stored = json.loads(cache.read_text())
    st = f.stat()
    key = f"{f.resolve()}|{st.st_size}|{st.st_mtime_ns}"
    assert key in stored and len(stored) == 2
    # a cached digest is used while path, size and mtime_ns match (planted to prove it is read) ...
    cache.write_text(json.dumps({**stored, key: "planted"}))
    assert cached_sha256_files([f], cache) == ["planted"]
    # ... and a changed file (new size and mtime) is hashed again and stored under its new key
    f.write_bytes(b"abcd")
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert cached_sha256_files([f], cache) == [hashlib.sha256(b"abcd").hexdigest()]
    assert len(json.loads(cache.read_text())) == 3


def test_same_size_rewrite_with_new_mtime_is_rehashed(tmp_path):
    f = tmp_path / "a.bin"
    f.write_bytes(b"abc")
    cache = tmp_path / "c.json"
    cached_sha256_files([f], cache)
    mtime = f.stat().st_mtime_ns
    f.write_bytes(b"xyz")
    os.utime(f, ns=(mtime, mtime + 1_000_000))
    assert cached_sha256_files([f], cache) == [hashlib.sha256(b"xyz").hexdigest()]


def test_damaged_or_unwritable_cache_costs_only_time(tmp_path):
    f = tmp_path / "a.bin"
    f.write_bytes(b"abc")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert cached_sha256_files([f], bad) == [hashlib.sha256(b"abc").hexdigest()]
    assert json.loads(bad.read_text())  # rewritten whole
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert cached_sha256_files([f], blocker / "c.json") == [hashlib.sha256(b"abc").hexdigest()]


def test_default_cache_path_follows_env(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "here"))
    assert default_cache_path() == tmp_path / "here" / "sha256-cache.json"
    monkeypatch.delenv(CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_path() == tmp_path / "xdg" / "omni-campaign" / "sha256-cache.json"
