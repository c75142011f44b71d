//! Frozen store directories (FORMAT.md §2 and §4): a store written by an earlier build opens
//! with every write in place.
//!
//! `fixtures/store-v1/` is a whole store directory in manifest version 1, as a crash would
//! leave it (copied while the store was open): 600 keys flushed and compacted into a table,
//! then, with flushes held, 400 more and a delete of every fifth earlier key, in four logs
//! only (`write_store`). It is never regenerated; a later manifest or log format adds a
//! fixture beside it.
//!
//! `fixtures/store-v2/` is a store with keyspaces (manifest version 2), also as a crash
//! leaves it: tables in the default keyspace and in `users`, then logs holding batches across
//! three keyspaces (keyspace switches, FORMAT.md §2) and writes to a keyspace dropped since,
//! which replay must skip (`write_store_v2`).
//!
//! `fixtures/store-v2-own-settings/` is a store whose keyspaces have settings of their own
//! (options record version 5, FORMAT.md §6): `packed` with LZ4, 1 KiB blocks, prefix filters
//! on 3 bytes and a fixed standard Bloom filter; `plain` following the store; tables of both,
//! then writes in logs (`write_store_own_settings`).
//!
//! `fixtures/store-v3-keyspace-ttl/` is a store whose keyspace `sessions` has a default time
//! to live of one hour (options record version 6): 20 keys written at 1,000,000 ms past the
//! epoch (a `ManualClock`), so expiring at 4,600,000, then closed (`write_store_ttl`).

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::copy_dir;

use lsm_bloom::fs::FaultyFs;
use lsm_bloom::{Db, Options};

fn fixture_dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("fixtures/{name}"))
}

/// The value first written to key `k`: `v<k>` eight times.
fn value(k: &str) -> Vec<u8> {
    format!("v{k}").repeat(8).into_bytes()
}

/// What the fixtures hold: `a00000..a00599`, every fifth of them deleted, and
/// `b00000..b00399`, each with `value`.
fn model() -> Vec<(String, Option<Vec<u8>>)> {
    let a = (0..600).map(|i| {
        let k = format!("a{i:05}");
        let v = (i % 5 != 0).then(|| value(&k));
        (k, v)
    });
    let b = (0..400).map(|i| {
        let k = format!("b{i:05}");
        (k.clone(), Some(value(&k)))
    });
    a.chain(b).collect()
}

/// Writes the fixture's store into `dir` (created): the writes of `model`, the later ones
/// in logs a rotation started, copied while the store is open with its flushes held.
fn write_store(dir: &Path) {
    let fs = FaultyFs::new();
    let opts = Options::default()
        .with_memtable_size(16 * 1024)
        .with_max_immutable_memtables(8)
        .with_idle_compaction_after(None)
        .with_fs(Arc::new(fs.clone()));
    let live = tempfile::tempdir().unwrap();
    let db = Db::open(live.path(), opts).unwrap();
    let all = model();
    for (k, _) in all.iter().filter(|(k, _)| k.starts_with('a')) {
        db.put(k, value(k)).unwrap();
    }
    db.flush().unwrap();
    db.compact().unwrap();
    fs.hold_table_creates(true);
    for (k, v) in &all {
        match (k.starts_with('b'), v) {
            (true, Some(v)) => db.put(k, v).unwrap(),
            (false, None) => db.delete(k).unwrap(),
            _ => {}
        }
    }
    copy_dir(live.path(), dir);
    std::fs::remove_file(dir.join("LOCK")).unwrap();
    fs.hold_table_creates(false);
    drop(db);
}

/// The directory of fixture `name`, written first by `write` if missing and
/// `LSM_BLOOM_WRITE_MISSING_FIXTURES` is set (never overwriting), after checking that its
/// manifest is of `version`.
fn fixture(name: &str, version: u32, write: fn(&Path)) -> PathBuf {
    let fixture = fixture_dir(name);
    if !fixture.exists() {
        assert!(
            std::env::var_os("LSM_BLOOM_WRITE_MISSING_FIXTURES").is_some(),
            "missing fixture {}",
            fixture.display()
        );
        write(&fixture);
    }
    let manifest = std::fs::read(fixture.join("MANIFEST")).unwrap();
    assert_eq!(
        manifest[4..8],
        version.to_le_bytes(),
        "the fixture's manifest version"
    );
    fixture
}

/// Opens a copy of fixture `name` (`fixture`) with `opts`. The copy lives as long as the
/// directory returned.
fn open_fixture_with(
    name: &str,
    version: u32,
    write: fn(&Path),
    opts: Options,
) -> (tempfile::TempDir, Db) {
    let fixture = fixture(name, version, write);
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&fixture, dir.path());
    let db = Db::open(dir.path(), opts).unwrap();
    (dir, db)
}

/// `open_fixture_with` the default options.
fn open_fixture(name: &str, version: u32, write: fn(&Path)) -> (tempfile::TempDir, Db) {
    open_fixture_with(name, version, write, Options::default())
}

/// Opens a copy of fixture `version` of `model` and checks every key.
fn check(version: u32) -> (tempfile::TempDir, Db) {
    let (dir, db) = open_fixture(&format!("store-v{version}"), version, write_store);
    let r = db.recovery();
    assert!(r.wal_damage.is_none(), "{r:?}");
    for (k, v) in model() {
        assert_eq!(db.get(&k).unwrap(), v, "{k} in store v{version}");
    }
    let live = model().iter().filter(|(_, v)| v.is_some()).count();
    assert_eq!(db.scan::<&[u8], _>(..).unwrap().count(), live);
    (dir, db)
}

#[test]
fn store_v1_fixture_still_reads() {
    let (_dir, db) = check(1);
    // Every write after the compaction is in the four logs: 400 puts and 120 deletes.
    let r = db.recovery();
    assert_eq!((r.logs_replayed, r.batches_replayed), (4, 520), "{r:?}");
    db.put("after", "ok").unwrap();
}

/// Keyspace, key and value (`None`: absent) of everything `fixtures/store-v2/` holds.
fn model_v2() -> Vec<(&'static str, String, Option<Vec<u8>>)> {
    let mut m = Vec::new();
    for i in 0..300 {
        let k = format!("a{i:05}");
        let v = (i % 5 != 0).then(|| value(&k));
        m.push(("default", k, v));
    }
    for i in 0..300 {
        let k = format!("u{i:05}");
        // The first 200 overwritten by the batches in the logs.
        let v = if i < 200 {
            format!("new {k}").into_bytes()
        } else {
            value(&k)
        };
        m.push(("users", k, Some(v)));
    }
    for i in 0..200 {
        let k = format!("s{i:05}");
        m.push(("sessions", k.clone(), Some(value(&k))));
        m.push(("default", format!("b{i:05}"), Some(value(&k))));
    }
    m
}

/// Writes `fixtures/store-v2/` into `dir` (created): see the module comment.
fn write_store_v2(dir: &Path) {
    use lsm_bloom::WriteBatch;
    let fs = FaultyFs::new();
    let opts = Options::default()
        .with_memtable_size(16 * 1024)
        .with_max_immutable_memtables(8)
        .with_idle_compaction_after(None)
        .with_fs(Arc::new(fs.clone()));
    let live = tempfile::tempdir().unwrap();
    let db = Db::open(live.path(), opts).unwrap();
    let users = db.keyspace("users").unwrap();
    let sessions = db.keyspace("sessions").unwrap();
    let gone = db.keyspace("gone").unwrap();
    for i in 0..300 {
        let (a, u) = (format!("a{i:05}"), format!("u{i:05}"));
        db.put(&a, value(&a)).unwrap();
        users.put(&u, value(&u)).unwrap();
        gone.put(&u, "dropped later").unwrap();
    }
    db.flush().unwrap();
    db.compact().unwrap();
    fs.hold_table_creates(true);
    for i in 0..200 {
        let (u, s, b) = (format!("u{i:05}"), format!("s{i:05}"), format!("b{i:05}"));
        let mut batch = WriteBatch::new();
        batch.put_in(&users, u.clone(), format!("new {u}"));
        batch.put_in(&sessions, s.clone(), value(&s));
        batch.put(b, value(&s));
        batch.put_in(&gone, u, "dropped later");
        if i % 5 == 0 {
            batch.delete(format!("a{:05}", i + 100).into_bytes());
        }
        db.write(batch).unwrap();
    }
    for i in (0..100).step_by(5) {
        db.delete(format!("a{i:05}")).unwrap();
    }
    assert!(db.drop_keyspace("gone").unwrap());
    copy_dir(live.path(), dir);
    std::fs::remove_file(dir.join("LOCK")).unwrap();
    fs.hold_table_creates(false);
    drop(db);
}

#[test]
fn store_v2_fixture_with_keyspaces_still_reads() {
    let (_dir, db) = open_fixture("store-v2", 2, write_store_v2);
    let r = db.recovery();
    assert!(r.wal_damage.is_none() && r.logs_replayed >= 2, "{r:?}");
    assert_eq!(db.keyspace_names(), ["default", "users", "sessions"]);
    let mut live = std::collections::BTreeMap::<&str, usize>::new();
    for (name, k, v) in model_v2() {
        let ks = db.keyspace(name).unwrap();
        *live.entry(name).or_default() += usize::from(v.is_some());
        assert_eq!(ks.get(&k).unwrap(), v, "{name}/{k} in store v2");
    }
    for (name, n) in live {
        let ks = db.keyspace(name).unwrap();
        assert_eq!(ks.iter().unwrap().count(), n, "{name}: live keys");
    }
    // The dropped keyspace's name starts empty, its log writes skipped.
    assert_eq!(db.keyspace("gone").unwrap().iter().unwrap().count(), 0);
    db.put("after", "ok").unwrap();
}

/// The settings `packed` of `fixtures/store-v2-own-settings/` was given.
fn packed_settings() -> lsm_bloom::KeyspaceOptions {
    use lsm_bloom::{Compression, FilterKind, FilterPolicy, Filters, PrefixExtractor};
    lsm_bloom::KeyspaceOptions::default()
        .with_compression(Some(Compression::Lz4.into()))
        .with_block_size(Some(1024))
        .with_prefix_filters(Some(lsm_bloom::PrefixFilters::with(
            PrefixExtractor::fixed(3),
        )))
        .with_filters(Some(Filters::fixed(FilterPolicy::bits_per_key(
            FilterKind::Standard,
            8.0,
        ))))
}

/// Writes `fixtures/store-v2-own-settings/` into `dir` (created): see the module comment.
fn write_store_own_settings(dir: &Path) {
    let fs = FaultyFs::new();
    let opts = Options::default()
        .with_memtable_size(64 * 1024)
        .with_max_immutable_memtables(8)
        .with_idle_compaction_after(None)
        .with_fs(Arc::new(fs.clone()));
    let live = tempfile::tempdir().unwrap();
    let db = Db::open(live.path(), opts).unwrap();
    let packed = db.create_keyspace("packed", packed_settings()).unwrap();
    let plain = db.keyspace("plain").unwrap();
    for i in 0..400 {
        let k = format!("p{i:05}");
        packed.put(&k, value(&k)).unwrap();
        plain.put(&k, value(&k)).unwrap();
    }
    db.flush().unwrap();
    fs.hold_table_creates(true);
    for i in 400..500 {
        let k = format!("p{i:05}");
        packed.put(&k, value(&k)).unwrap();
        plain.put(&k, value(&k)).unwrap();
    }
    copy_dir(live.path(), dir);
    std::fs::remove_file(dir.join("LOCK")).unwrap();
    fs.hold_table_creates(false);
    drop((packed, plain));
    drop(db);
}

#[test]
fn store_fixture_with_keyspace_settings_still_reads_and_keeps_them() {
    use lsm_bloom::Compression;
    let (dir, db) = open_fixture("store-v2-own-settings", 2, write_store_own_settings);
    let record = std::fs::read(fixture_dir("store-v2-own-settings").join("OPTIONS")).unwrap();
    assert_eq!(record[4..8], 5u32.to_le_bytes(), "options record version");
    assert!(
        db.recovery().options.changed.is_empty(),
        "{:?}",
        db.recovery()
    );
    let packed = db.keyspace("packed").unwrap();
    let plain = db.keyspace("plain").unwrap();
    let got = packed.options().unwrap();
    let want = packed_settings();
    assert_eq!(
        (
            got.filters,
            got.prefix_filters,
            got.compression,
            got.block_size
        ),
        (
            want.filters,
            want.prefix_filters,
            want.compression,
            want.block_size
        )
    );
    assert_eq!(
        plain.options().unwrap().compression,
        Some(Default::default())
    );
    for i in 0..500 {
        let k = format!("p{i:05}");
        assert_eq!(packed.get(&k).unwrap(), Some(value(&k)), "packed/{k}");
        assert_eq!(plain.get(&k).unwrap(), Some(value(&k)), "plain/{k}");
    }
    db.flush().unwrap();
    let codecs = |ks: &lsm_bloom::Keyspace| -> Vec<Compression> {
        let levels = ks.levels().unwrap();
        levels
            .iter()
            .flatten()
            .map(|t| t.properties().compression)
            .collect()
    };
    assert!(codecs(&packed).iter().all(|c| *c == Compression::Lz4));
    assert!(codecs(&plain).iter().all(|c| *c == Compression::None));
    drop((packed, plain, dir));
}

/// The expiry `fixtures/store-v3/` gives key `i` of its 300: every third at 2,000,000 ms past
/// the epoch, every third but one at 3,000,000, the rest none.
fn expiry_v3(i: usize) -> Option<u64> {
    match i % 3 {
        0 => Some(2_000_000),
        1 => Some(3_000_000),
        _ => None,
    }
}

/// Writes `fixtures/store-v3/` into `dir` (created): a store whose logs hold expiring puts
/// (manifest version 3, FORMAT.md §2 and §4), as a crash leaves it. Keys `e00000..e00299`
/// with `expiry_v3`, flushed and compacted into format 5 tables; then, with flushes held,
/// `f00000..f00199` in keyspace `users` the same way, every tenth `e` key put again without
/// an expiry, and every seventh `e` key deleted, in logs only. Written at clock 1,000,000.
fn write_store_v3(dir: &Path) {
    use lsm_bloom::{ManualClock, WriteBatch};
    use std::time::{Duration, UNIX_EPOCH};
    let at = |ms: u64| UNIX_EPOCH + Duration::from_millis(ms);
    let fs = FaultyFs::new();
    let opts = Options::default()
        .with_memtable_size(16 * 1024)
        .with_max_immutable_memtables(8)
        .with_idle_compaction_after(None)
        .with_clock(Arc::new(ManualClock::new(1_000_000)))
        .with_fs(Arc::new(fs.clone()));
    let live = tempfile::tempdir().unwrap();
    let db = Db::open(live.path(), opts).unwrap();
    let users = db.keyspace("users").unwrap();
    for i in 0..300 {
        let k = format!("e{i:05}");
        match expiry_v3(i) {
            Some(ms) => db.put_with_expiry(&k, value(&k), at(ms)).unwrap(),
            None => db.put(&k, value(&k)).unwrap(),
        }
    }
    db.flush().unwrap();
    db.compact().unwrap();
    fs.hold_table_creates(true);
    for i in 0..200 {
        let f = format!("f{i:05}");
        let mut batch = WriteBatch::new();
        match expiry_v3(i) {
            Some(ms) => batch.put_in_with_expiry(&users, f.clone(), value(&f), at(ms)),
            None => batch.put_in(&users, f.clone(), value(&f)),
        };
        db.write(batch).unwrap();
    }
    for i in (0..300).step_by(10) {
        let k = format!("e{i:05}");
        db.put(&k, "again").unwrap();
    }
    for i in (0..300).step_by(7) {
        db.delete(format!("e{i:05}")).unwrap();
    }
    copy_dir(live.path(), dir);
    std::fs::remove_file(dir.join("LOCK")).unwrap();
    fs.hold_table_creates(false);
    drop(db);
}

/// What `fixtures/store-v3/` holds for `e` key `i` when the clock reads `now`.
fn model_v3_e(i: usize, now: u64) -> (Option<Vec<u8>>, lsm_bloom::KeyExpiry) {
    use lsm_bloom::KeyExpiry;
    let k = format!("e{i:05}");
    if i.is_multiple_of(7) {
        return (None, KeyExpiry::Absent);
    }
    if i.is_multiple_of(10) {
        return (Some(b"again".to_vec()), KeyExpiry::Never);
    }
    match expiry_v3(i) {
        Some(ms) if ms <= now => (None, KeyExpiry::Absent),
        Some(ms) => (Some(value(&k)), KeyExpiry::At(ms)),
        None => (Some(value(&k)), KeyExpiry::Never),
    }
}

#[test]
fn store_v3_fixture_with_expiring_entries_still_reads() {
    use lsm_bloom::{KeyExpiry, ManualClock};
    for now in [1_500_000, 2_500_000, 3_500_000] {
        let clock = Arc::new(ManualClock::new(now));
        let opts = Options::default().with_clock(clock);
        let (_dir, db) = open_fixture_with("store-v3", 3, write_store_v3, opts);
        let r = db.recovery();
        assert!(r.wal_damage.is_none() && r.logs_replayed >= 2, "{r:?}");
        let mut live = 0;
        for i in 0..300 {
            let k = format!("e{i:05}");
            let (v, expiry) = model_v3_e(i, now);
            live += usize::from(v.is_some());
            assert_eq!(db.get(&k).unwrap(), v, "{k} at {now}");
            assert_eq!(db.expiry_of(&k).unwrap(), expiry, "{k} at {now}");
        }
        assert_eq!(db.iter().count(), live, "live e keys at {now}");
        let users = db.keyspace("users").unwrap();
        for i in 0..200 {
            let f = format!("f{i:05}");
            let live = expiry_v3(i).is_none_or(|ms| ms > now);
            assert_eq!(
                users.get(&f).unwrap(),
                live.then(|| value(&f)),
                "{f} at {now}"
            );
            let want = match expiry_v3(i) {
                _ if !live => KeyExpiry::Absent,
                Some(ms) => KeyExpiry::At(ms),
                None => KeyExpiry::Never,
            };
            assert_eq!(users.expiry_of(&f).unwrap(), want, "{f} at {now}");
        }
        db.put("after", "ok").unwrap();
    }
}

/// Writes `fixtures/store-v3-keyspace-ttl/` into `dir` (created): see the module comment.
fn write_store_ttl(dir: &Path) {
    let clock = Arc::new(lsm_bloom::ManualClock::new(1_000_000));
    let db = Db::open(dir, Options::default().with_clock(clock)).unwrap();
    let hour = lsm_bloom::DefaultTtl::After(std::time::Duration::from_secs(3600));
    let ks = lsm_bloom::KeyspaceOptions::default().with_default_ttl(Some(hour));
    let sessions = db.create_keyspace("sessions", ks).unwrap();
    for i in 0..20 {
        let k = format!("s{i:02}");
        sessions.put(&k, value(&k)).unwrap();
    }
    drop(sessions);
    db.close().unwrap();
}

/// A keyspace's default time to live is kept in options record version 6: the fixture's keys
/// expire as written, and new puts take the recorded time to live.
#[test]
fn store_fixture_with_a_keyspace_ttl_still_reads_and_keeps_it() {
    use lsm_bloom::{DefaultTtl, KeyExpiry, ManualClock};
    let name = "store-v3-keyspace-ttl";
    let record = {
        fixture(name, 3, write_store_ttl);
        std::fs::read(fixture_dir(name).join("OPTIONS")).unwrap()
    };
    assert_eq!(record[4..8], 6u32.to_le_bytes(), "options record version");
    let clock = Arc::new(ManualClock::new(2_000_000));
    let opts = Options::default().with_clock(clock.clone());
    let (_dir, db) = open_fixture_with(name, 3, write_store_ttl, opts);
    let sessions = db.keyspace("sessions").unwrap();
    let hour = std::time::Duration::from_secs(3600);
    assert_eq!(
        sessions.options().unwrap().default_ttl,
        Some(DefaultTtl::After(hour))
    );
    for i in 0..20 {
        let k = format!("s{i:02}");
        assert_eq!(sessions.get(&k).unwrap(), Some(value(&k)), "{k}");
        assert_eq!(sessions.expiry_of(&k).unwrap(), KeyExpiry::At(4_600_000));
    }
    sessions.put("new", "x").unwrap();
    assert_eq!(sessions.expiry_of("new").unwrap(), KeyExpiry::At(5_600_000));
    clock.set(4_600_000);
    assert_eq!(sessions.get("s00").unwrap(), None, "expired");
    assert_eq!(sessions.get("new").unwrap(), Some(b"x".to_vec()));
}
