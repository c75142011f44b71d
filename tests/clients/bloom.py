"""kv_server's RedisBloom commands through redis-py's `r.bf()`, as a crawler's URL dedup
meets them: reserve, add, madd, exists, mexists, insert with every option, info, and the
errors RedisBloom gives. Run by tests/kv_server_bloom.rs: `python3 bloom.py PORT`; any
failed check raises, so the exit status is not 0."""
import sys

import redis

port = int(sys.argv[1])
r = redis.Redis(host="127.0.0.1", port=port)
bf = r.bf()

assert bf.create("seen", 0.001, 1000) in (True, b"OK"), "reserve"
try:
    bf.create("seen", 0.001, 1000)
    raise AssertionError("a second reserve was accepted")
except redis.ResponseError as e:
    assert str(e) == "item exists", e
assert bf.add("seen", "https://a.example/") == 1
assert bf.add("seen", "https://a.example/") == 0
assert bf.madd("seen", "https://b.example/", "https://a.example/", "https://c.example/") == [1, 0, 1]
assert bf.exists("seen", "https://b.example/") == 1
assert bf.exists("seen", "https://never.example/") == 0
assert bf.mexists("seen", "https://c.example/", "https://z.example/") == [1, 0]
assert r.execute_command("BF.CARD", "seen") == 3
info = bf.info("seen")
assert (info.capacity, info.filterNum, info.insertedNum, info.expansionRate) == (1000, 1, 3, 2), vars(info)
assert info.size > 0

# insert with every option, in the order redis-py sends them.
assert bf.insert("fixed", ["x", "y", "x"], capacity=2, error=0.01, expansion=None, noScale=True) == [1, 1, 0]
# A full filter's refusal stands in the reply's array, in the item's place.
(full,) = bf.insert("fixed", ["z"])
assert isinstance(full, redis.ResponseError) and "non scaling filter is full" in str(full), full
assert bf.info("fixed").expansionRate is None
assert bf.insert("grown", ["a"], capacity=10, error=0.05, expansion=4) == [1]
assert bf.info("grown").expansionRate == 4
try:
    bf.insert("missing", ["a"], noCreate=True)
    raise AssertionError("NOCREATE created a filter")
except redis.ResponseError as e:
    assert str(e) == "not found", e
try:
    bf.create("bad", 2, 10)
    raise AssertionError("an error rate of 2 was accepted")
except redis.ResponseError as e:
    assert "error rate must be in the range" in str(e), e

# The generic commands see filters.
assert r.type("seen") == b"MBbloom--"
assert r.exists("seen", "fixed", "nope") == 2
assert set(r.scan_iter(_type="MBbloom--")) == {b"seen", b"fixed", b"grown"}
r.set("plain", "v")
try:
    bf.add("plain", "x")
    raise AssertionError("a string took an item")
except redis.ResponseError as e:
    assert str(e).startswith("WRONGTYPE"), e
assert r.expire("seen", 100) and 0 < r.ttl("seen") <= 100
assert r.delete("seen") == 1
assert bf.exists("seen", "https://a.example/") == 0
print("redis-py: bf() reserve, add, madd, exists, mexists, insert, info and the generic commands")
