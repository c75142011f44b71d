//! Tests of the database map and flushes (`databases.rs`).

use super::*;

/// A flush unmaps at once, but drops the keyspace only when the last command holding it
/// is done; that command keeps reading its data meanwhile.
#[test]
fn a_flush_waits_for_the_commands_on_its_keyspace() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), lsm_bloom::Options::default()).unwrap();
    let dbs = Arc::new(Databases::open(db, 2).unwrap());
    let ks = dbs.slot_for_write(1).unwrap();
    ks.put("k", "v").unwrap();
    let name = ks.name().to_string();
    drop(ks);
    let held = dbs.slot(1).unwrap(); // a command in flight
    let flushing = {
        let dbs = Arc::clone(&dbs);
        std::thread::spawn(move || dbs.flush(&[1], false))
    };
    std::thread::sleep(Duration::from_millis(300));
    assert!(!flushing.is_finished(), "the flush did not wait");
    assert!(
        dbs.slot(1).is_none(),
        "new commands must see the database empty"
    );
    assert_eq!(held.get("k").unwrap(), Some(b"v".to_vec()));
    drop(held);
    flushing.join().unwrap().unwrap();
    assert!(!dbs.store().keyspace_names().contains(&name));
    // Written again: a new keyspace, empty but for the new write.
    let again = dbs.slot_for_write(1).unwrap();
    assert_ne!(again.name(), name);
    assert_eq!(again.get("k").unwrap(), None);
}

#[test]
fn map_text_round_trips_and_damage_is_named() {
    let text = format!("{MAP_HEADER}\nnext 7\n0 default\n3 db.3.6\n");
    let (named, next) = parse(text.as_bytes()).unwrap();
    assert_eq!(next, 7);
    assert_eq!(named, vec![(0, "default".into()), (3, "db.3.6".into())]);
    for bad in [
        "nonsense\nnext 1\n".to_string(),
        format!("{MAP_HEADER}\nnext x\n"),
        format!("{MAP_HEADER}\nnext 1\n3\n"),
        format!("{MAP_HEADER}\nnext 1\n3 users\n"),
        format!("{MAP_HEADER}\nnext 1\n3 db.3.1\n3 db.3.2\n"),
        format!("{MAP_HEADER}\nnext 1\n99999999 db.1.1\n"),
    ] {
        let e = parse(bad.as_bytes()).unwrap_err();
        assert!(e.contains("damaged"), "{e}");
    }
    // 20,000 damaged copies (bytes changed, cut, added): each parses or is refused by
    // name, none panics, and whatever parses stays within the map's bounds.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for _ in 0..20_000 {
        let mut b = text.clone().into_bytes();
        for _ in 0..1 + next() % 4 {
            let i = (next() % (b.len() as u64 + 1)) as usize;
            match next() % 3 {
                0 if i < b.len() => b[i] = next() as u8,
                1 => b.truncate(i),
                _ => b.insert(i.min(b.len()), next() as u8),
            }
        }
        match parse(&b) {
            Ok((named, _)) => assert!(named.iter().all(|(n, _)| *n < MAX_DATABASES)),
            Err(e) => assert!(e.contains("damaged"), "{e}"),
        }
    }
}
