"""kv_server's numbered databases through redis-py, as an application meets them: db=3 at
connect (and in a URL), SELECT, DBSIZE, FLUSHDB while another connection scans, SWAPDB, MOVE,
FLUSHALL ASYNC. Run by tests/kv_server_databases.rs: `python3 databases.py PORT`; any failed
check raises, so the exit status is not 0."""
import sys
import threading

import redis

port = int(sys.argv[1])


def conn(db):
    return redis.Redis(host="127.0.0.1", port=port, db=db)


r0, r3 = conn(0), conn(3)
r3.set("py:k", "three")
r0.set("py:k", "zero")
assert r3.get("py:k") == b"three", r3.get("py:k")
assert r0.get("py:k") == b"zero"
assert r3.dbsize() == 1, r3.dbsize()
assert redis.Redis.from_url(f"redis://127.0.0.1:{port}/3").get("py:k") == b"three"
assert r0.config_get("databases") == {"databases": "16"}

# SELECT on a connection of its own (redis-py pools connections: one connection, one db).
single = redis.Redis(host="127.0.0.1", port=port, single_connection_client=True)
single.execute_command("SELECT", 3)
assert single.get("py:k") == b"three"
try:
    single.execute_command("SELECT", 16)
    raise AssertionError("SELECT 16 accepted")
except redis.ResponseError as e:
    assert "out of range" in str(e), e

# FLUSHDB while another connection scans the same database.
pipe = r3.pipeline(transaction=False)
for i in range(3000):
    pipe.set(f"scan:{i}", i)
pipe.execute()
assert r3.dbsize() == 3001
scanned, errors, started = [], [], threading.Event()


def scan():
    try:
        for k in conn(3).scan_iter(count=100):
            scanned.append(k)
            started.set()
    except Exception as e:  # noqa: BLE001 (any failure is the test's)
        errors.append(e)
    started.set()


t = threading.Thread(target=scan)
t.start()
started.wait(10)
r3.flushdb()
t.join(30)
assert not errors, errors
assert len(set(scanned)) == len(scanned), "a key returned twice"
assert r3.dbsize() == 0 and r3.get("py:k") is None
assert r0.get("py:k") == b"zero", "FLUSHDB of 3 touched 0"

# SWAPDB and MOVE.
r3.set("py:k", "three again")
assert r0.swapdb(0, 3)
assert r3.get("py:k") == b"zero" and r0.get("py:k") == b"three again"
r3.set("mv", "1")
assert r3.move("mv", 4) is True
assert r3.move("mv", 4) is False
assert conn(4).get("mv") == b"1" and r3.get("mv") is None

# FLUSHALL ASYNC: every database empty at once.
assert r0.flushall(asynchronous=True)
for db in (0, 3, 4):
    assert conn(db).dbsize() == 0, db
info = r0.info("keyspace")
assert info == {}, info
r3.set("after", "flushall")
assert r0.info("keyspace") == {"db3": {"keys": 1, "expires": 0, "avg_ttl": 0}}, r0.info("keyspace")
print("redis-py", redis.__version__, "ok")
