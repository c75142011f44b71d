//! A keyspace's default time to live (`KeyspaceOptions::default_ttl`): every put written there
//! without an expiry of its own expires that long after its write (one clock reading per
//! batch), in single puts and batches alike; an explicit expiry wins; deletes and other
//! keyspaces are untouched; the setting is kept across reopens (options record version 6),
//! changed for later writes only, and refused out of range. A store whose keyspaces have none
//! keeps writing options record version 5 or older.

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use lsm_bloom::{
    Db, DefaultTtl, Error, KeyExpiry, KeyspaceOptions, ManualClock, Options, WriteBatch, MAX_TTL,
};

const T0: u64 = 1_000_000;

fn ttl(d: Duration) -> KeyspaceOptions {
    KeyspaceOptions::default().with_default_ttl(Some(DefaultTtl::After(d)))
}

/// The options record's version.
fn record_version(dir: &std::path::Path) -> u32 {
    let b = std::fs::read(dir.join("OPTIONS")).unwrap();
    u32::from_le_bytes(b[4..8].try_into().unwrap())
}

#[test]
fn puts_without_an_expiry_take_the_keyspace_ttl() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let opts = Options::default().with_clock(clock.clone());
    let db = Db::open(dir.path(), opts.clone()).unwrap();
    let minute = Duration::from_secs(60);
    let sessions = db.create_keyspace("sessions", ttl(minute)).unwrap();
    let plain = db.keyspace("plain").unwrap();
    assert_eq!(
        sessions.options().unwrap().default_ttl,
        Some(DefaultTtl::After(minute))
    );
    assert_eq!(
        plain.options().unwrap().default_ttl,
        Some(DefaultTtl::Never)
    );
    sessions.put("a", "1").unwrap();
    clock.set(T0 + 10);
    let mut b = WriteBatch::new();
    b.put_in(&sessions, "b", "2")
        .put_in(&plain, "b", "2")
        .put("b", "2")
        .put_in_with_expiry(
            &sessions,
            "c",
            "3",
            UNIX_EPOCH + Duration::from_millis(T0 + 5),
        )
        .delete_in(&sessions, "gone");
    db.write(b).unwrap();
    assert_eq!(sessions.expiry_of("a").unwrap(), KeyExpiry::At(T0 + 60_000));
    assert_eq!(sessions.expiry_of("b").unwrap(), KeyExpiry::At(T0 + 60_010));
    assert_eq!(
        sessions.expiry_of("c").unwrap(),
        KeyExpiry::Absent,
        "explicit, passed"
    );
    assert_eq!(plain.expiry_of("b").unwrap(), KeyExpiry::Never);
    assert_eq!(db.expiry_of("b").unwrap(), KeyExpiry::Never);
    assert_eq!(record_version(dir.path()), 6);
    drop((sessions, plain));
    db.close().unwrap();

    // Kept across a reopen that does not repeat it, and applied to new puts.
    let db = Db::open(dir.path(), opts).unwrap();
    let sessions = db.keyspace("sessions").unwrap();
    sessions.put("d", "4").unwrap();
    assert_eq!(sessions.expiry_of("d").unwrap(), KeyExpiry::At(T0 + 60_010));
    assert_eq!(sessions.expiry_of("a").unwrap(), KeyExpiry::At(T0 + 60_000));
    clock.set(T0 + 60_000);
    assert_eq!(sessions.get("a").unwrap(), None);
    assert_eq!(sessions.get("b").unwrap(), Some(b"2".to_vec()));

    // Changed to none: later puts never expire, earlier ones keep theirs.
    let never = KeyspaceOptions::default().with_default_ttl(Some(DefaultTtl::Never));
    let sessions = db.create_keyspace("sessions", never).unwrap();
    sessions.put("e", "5").unwrap();
    assert_eq!(sessions.expiry_of("e").unwrap(), KeyExpiry::Never);
    assert_eq!(sessions.expiry_of("d").unwrap(), KeyExpiry::At(T0 + 60_010));
}

#[test]
fn out_of_range_ttls_are_refused_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    for bad in [
        Duration::ZERO,
        Duration::from_micros(999),
        MAX_TTL + Duration::from_secs(1),
    ] {
        match db.create_keyspace("k", ttl(bad)) {
            Err(Error::InvalidArgument(why)) => assert!(why.contains("default_ttl"), "{why}"),
            other => panic!("{bad:?}: {other:?}"),
        }
    }
    assert!(db.keyspace_names().iter().all(|n| n != "k"));
    // The default keyspace takes its settings from `Db::open`, which has none to give.
    assert!(db
        .create_keyspace(lsm_bloom::DEFAULT_KEYSPACE, ttl(Duration::from_secs(1)))
        .is_err());
    db.create_keyspace("k", ttl(MAX_TTL)).unwrap();
}

#[test]
fn a_store_without_ttls_writes_an_older_record() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    let small = KeyspaceOptions::default().with_block_size(Some(1024));
    db.create_keyspace("small", small).unwrap();
    assert_eq!(record_version(dir.path()), 5, "own settings, no TTL");
    db.create_keyspace("ttl", ttl(Duration::from_secs(5)))
        .unwrap();
    assert_eq!(record_version(dir.path()), 6);
    db.drop_keyspace("ttl").unwrap();
    assert_eq!(
        record_version(dir.path()),
        5,
        "the keyspace with one dropped"
    );
}
