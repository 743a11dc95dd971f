"""API keys: created once, stored as a hash, resolved to their owner, revoked at once."""

from __future__ import annotations

import hashlib

import pytest

from memory_pipelines.infra.auth import create_key, list_keys, resolve_key, revoke_key
from memory_pipelines.infra.errors import ValidationError


def test_create_and_resolve(pool) -> None:
    key_id, key = create_key(pool, "alice", name="laptop")
    assert key.startswith("mp_") and len(key) >= 40
    assert resolve_key(pool, key) == "alice"
    with pool.connection() as conn:
        row = conn.execute(
            "SELECT key_hash, prefix, name, last_used_at FROM api_keys WHERE id = %s", (key_id,)
        ).fetchone()
        dump = str(conn.execute("SELECT array_agg(t::text) FROM api_keys t").fetchone()[0])
    assert row[0] == hashlib.sha256(key.encode()).hexdigest() and row[1] == key[:11] and row[2] == "laptop"
    assert row[3] is not None  # last_used_at recorded
    assert key not in dump and key[11:] not in dump  # only the hash and the short prefix are stored


@pytest.mark.parametrize("bad", ["", "mp_", "mp_wrong", "sk-abc", None, 42, "mp_" + "x" * 500])
def test_unknown_or_malformed_keys_resolve_to_none(pool, bad) -> None:
    create_key(pool, "alice")
    assert resolve_key(pool, bad) is None


def test_revoke_stops_the_key_at_once(pool) -> None:
    key_id, key = create_key(pool, "alice")
    other_id, other = create_key(pool, "alice")
    assert revoke_key(pool, key_id) is True
    assert resolve_key(pool, key) is None and resolve_key(pool, other) == "alice"
    assert revoke_key(pool, key_id) is False  # already revoked
    assert revoke_key(pool, other[:11]) is True and resolve_key(pool, other) is None
    assert revoke_key(pool, "00000000-0000-0000-0000-000000000000") is False
    assert revoke_key(pool, "mp_zzzzzzzz") is False
    for bad in ("", "abc"):
        with pytest.raises(ValidationError):
            revoke_key(pool, bad)


def test_ambiguous_prefix_is_refused(pool) -> None:
    key_id, key = create_key(pool, "alice")
    with pool.connection() as conn:  # force a second key with the same listed prefix
        conn.execute("INSERT INTO api_keys (owner_id, key_hash, prefix) VALUES ('bob', 'h', %s)", (key[:11],))
    with pytest.raises(ValidationError, match="revoke by id"):
        revoke_key(pool, key[:11])
    assert resolve_key(pool, key) == "alice"


def test_list_keys_never_shows_the_key(pool) -> None:
    a_id, a_key = create_key(pool, "alice", name="ci")
    b_id, _ = create_key(pool, "bob")
    revoke_key(pool, b_id)
    every = list_keys(pool)
    assert {k["id"] for k in every} == {a_id, b_id}
    assert all("key" not in k and "key_hash" not in k for k in every)
    assert a_key not in str(every)
    mine = list_keys(pool, "alice")
    assert [(k["id"], k["prefix"], k["name"], k["active"]) for k in mine] == [(a_id, a_key[:11], "ci", True)]
    assert [k["active"] for k in list_keys(pool, "bob")] == [False]


@pytest.mark.parametrize(
    ("owner", "name", "field"),
    [("", None, "owner"), (None, None, "owner"), ("a\x1bb", None, "owner"), ("alice", "n" * 201, "name"),
     ("alice", 5, "name")],
)
def test_create_validation(pool, owner, name, field) -> None:
    with pytest.raises(ValidationError) as err:
        create_key(pool, owner, name)
    assert err.value.field == field
    assert list_keys(pool) == []
