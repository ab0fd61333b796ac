"""The bootstrap store as only a communicator's members can use it: `SealedStore`, a
`torch.distributed.Store` over a TCPStore client that names every key and authenticates every value
with the communicator's secret (`Meeting.secret`: 256 random bits carried in the root info, or
derived from the rank table), so what the store holds is of no use to a process without it.

PyTorch's TCPStore has no authentication: any process that reaches its port can list, read, write
and delete every key. Here a key `k` of namespace `ns` is stored as
`hccl/` + hex(HMAC-SHA256(secret, "name\\0" ns "/" k))[:32]: a stranger cannot tell which keys are a
communicator's, nor compute the key a rank will read next. A value `v` is stored as
`v || HMAC-SHA256(secret, "value\\0" name "\\0" v)`: a value that does not carry the tag of its own
key (written by a stranger, or a member's value copied to another key) is refused on read with
`Unauthenticated`, which the communicator turns into an "unauthenticated message" error on every
rank, never into data. The tag is deterministic, so compare-and-set still compares stored bytes.
Values are readable by anyone (headers, addresses, heartbeat counts): the one value that must stay
secret, an NCCL unique id exchanged through the store, is also encrypted (`conceal`).

A stranger can still delete or overwrite keys it sees (an unauthenticated store allows that):
the ranks then fail within their timeouts, with "unauthenticated message" when they read what it
wrote. torch.distributed's gloo gets the same store (its addresses are authenticated too).
"""
from __future__ import annotations

import datetime
import hashlib
import hmac
import os
from typing import Any

SECRET_BYTES = 32        # 256 bits (NCCL's bootstrap magic is 64; the issue asks 128 at least)
TAG_BYTES = 32           # HMAC-SHA256
NAME_HEX = 32            # 128 bits of a key's name


class Unauthenticated(Exception):
    """A value in the store that does not carry the communicator's tag for its key."""

    def __init__(self, key: str):
        self.key = key
        super().__init__(f"unauthenticated message: the bootstrap store's value of {key!r} does not carry this "
                         "communicator's HMAC-SHA256 tag; a process that is not a member wrote to the store")


def new_secret() -> bytes:
    return os.urandom(SECRET_BYTES)


def rank_table_secret(table: bytes) -> bytes:
    """A rank table's secret: HMAC-SHA256 keyed with ACLNN_GPU_HCCL_SECRET (empty when unset) over the
    table's bytes. Without the variable, whoever can read the table file is a member."""
    shared = os.environ.get("ACLNN_GPU_HCCL_SECRET", "").encode()
    return hmac.new(shared, b"rank table\0" + table, hashlib.sha256).digest()


def _mac(secret: bytes, *parts: bytes) -> bytes:
    return hmac.new(secret, b"\0".join(parts), hashlib.sha256).digest()


def conceal(secret: bytes, label: str, data: bytes) -> bytes:
    """`data` XOR an HMAC-SHA256 keystream of (secret, label): encrypts and decrypts. Each label is
    used for one value only (a communicator's NCCL id), so a keystream is never reused."""
    stream = b"".join(_mac(secret, b"conceal", label.encode(), i.to_bytes(4, "little"))
                      for i in range((len(data) + 31) // 32))
    return bytes(a ^ b for a, b in zip(data, stream))


def _as_bytes(value: Any) -> bytes:
    if isinstance(value, str):
        return value.encode()
    return bytes(value)


_store_class: Any = None


def sealed_store(inner: Any, secret: bytes, namespace: str) -> Any:
    """A `SealedStore` of namespace `namespace` over the TCPStore client `inner`."""
    global _store_class
    if _store_class is None:
        _store_class = _define()
    return _store_class(inner, secret, namespace)


def _define() -> Any:
    from torch.distributed import Store  # PyTorch only when a communicator is made

    class SealedStore(Store):
        """The store methods the communicator and gloo use (set, get, wait, check, multi_get,
        compare_set, add, delete_key), each on the named and tagged form of its key and value."""

        def __init__(self, inner: Any, secret: bytes, namespace: str):
            super().__init__()
            self.inner, self.secret, self.namespace = inner, secret, namespace

        def name(self, key: str) -> str:
            digest = _mac(self.secret, b"name", f"{self.namespace}/{key}".encode()).hex()
            return "hccl/" + digest[:NAME_HEX]

        def seal(self, name: str, value: bytes) -> bytes:
            return value + _mac(self.secret, b"value", name.encode(), value)

        def open(self, key: str, name: str, raw: Any) -> bytes:
            raw = _as_bytes(raw)
            value, tag = raw[:-TAG_BYTES], raw[-TAG_BYTES:]
            if len(raw) < TAG_BYTES or not hmac.compare_digest(tag, _mac(self.secret, b"value", name.encode(), value)):
                raise Unauthenticated(key)
            return value

        def set(self, key: str, value: Any) -> None:
            name = self.name(key)
            self.inner.set(name, self.seal(name, _as_bytes(value)))

        def get(self, key: str) -> bytes:
            name = self.name(key)
            return self.open(key, name, self.inner.get(name))

        def multi_get(self, keys: list[str]) -> list[bytes]:
            names = [self.name(k) for k in keys]
            return [self.open(k, n, raw) for k, n, raw in zip(keys, names, self.inner.multi_get(names))]

        def wait(self, keys: list[str], timeout: datetime.timedelta | None = None) -> None:
            names = [self.name(k) for k in keys]
            if timeout is None:
                self.inner.wait(names)
            else:
                self.inner.wait(names, timeout)

        def check(self, keys: list[str]) -> bool:
            return bool(self.inner.check([self.name(k) for k in keys]))

        def delete_key(self, key: str) -> bool:
            return bool(self.inner.delete_key(self.name(key)))

        def compare_set(self, key: str, expected: Any, desired: Any) -> bytes:
            """TCPStore's compare-and-set on the tagged values ("" expected: the key is absent);
            returns the value now held, checked."""
            name = self.name(key)
            old = _as_bytes(expected)
            raw_old = self.seal(name, old) if old else b""
            return self.open(key, name, self.inner.compare_set(name, raw_old, self.seal(name, _as_bytes(desired))))

        def add(self, key: str, amount: int) -> int:
            """An integer counter, added to by compare-and-set on its tagged value. Each value
            carries a random nonce, so a write never equals the value it replaces (compare-and-set
            answers the new value both when it wrote it and when the store already held it)."""
            name = self.name(key)
            raw_old = b""
            while True:
                old = int(self.open(key, name, raw_old).split(b":")[0]) if raw_old else 0
                raw_new = self.seal(name, f"{old + amount}:{os.urandom(8).hex()}".encode())
                held = _as_bytes(self.inner.compare_set(name, raw_old, raw_new))
                if held == raw_new:
                    return old + amount
                raw_old = b"" if held == raw_old else held   # held == the stale value: the key was deleted

        def num_keys(self) -> int:
            return int(self.inner.num_keys())

        def set_timeout(self, timeout: datetime.timedelta) -> None:
            self.inner.set_timeout(timeout)

    return SealedStore
