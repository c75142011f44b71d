//! Redis's numbered databases (`SELECT n`, `--databases N`) as keyspaces of the store.
//!
//! Database `n` is the keyspace the map names for it, or none: a database nothing has been
//! written to since the server first started or since it was flushed has no keyspace and
//! reads as empty; its first write creates one under a fresh name (`db.<n>.<generation>`,
//! never used twice). So:
//! - `FLUSHDB` unmaps the database's keyspace and drops it — the store removes its tables at
//!   once, whatever their size (Redis's `FLUSHDB` is O(keys));
//! - `FLUSHALL` does that for every database, with one map write;
//! - `SWAPDB a b` swaps two map entries: one small write, whatever the databases hold.
//!
//! The map is one value (key `databases` in the keyspace `kv_server`; its text is described
//! in FORMAT.md §10), written with a synced write before the change is
//! answered. A crash between a step's store change and its map write leaves either a keyspace
//! no database names (dropped at the next start: every `db.` keyspace the map does not list)
//! or a map entry naming a dropped keyspace (read as no keyspace). Database 0 of a store
//! written before databases existed is the store's default keyspace, where those writes went;
//! the default keyspace cannot be dropped, so its first `FLUSHDB` unmaps it and a background
//! thread deletes its keys (resumed at the next start until it is empty).
//!
//! Commands resolve their database once (`slot`), holding an `Arc` of its keyspace handle for
//! the command's length: a flush waits (at most `DROP_WAIT`) until no command holds the
//! keyspace it unmapped before dropping it, so a command that started before the flush
//! finishes on the data it started on — it is ordered before the flush.

use std::collections::HashMap;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use lsm_bloom::{Db, Keyspace, WriteBatch, WriteOptions, DEFAULT_KEYSPACE};

/// Most databases a server may serve (`--databases`).
pub const MAX_DATABASES: usize = 1 << 16;
/// The keyspace holding the map, and the map's key in it.
const META_KEYSPACE: &str = "kv_server";
const MAP_KEY: &[u8] = b"databases";
/// The first line of the map's text.
const MAP_HEADER: &str = "lsm-bloom kv_server databases v1";
/// Names of database keyspaces start with this.
const PREFIX: &str = "db.";
/// How long a flush waits for commands still using the keyspace it unmapped.
const DROP_WAIT: Duration = Duration::from_secs(10);
/// Keys deleted per batch when the default keyspace is cleared.
const CLEAR_BATCH: usize = 1000;
/// Names of the keyspaces holding Bloom filter keys (`bloom.rs`) start with this.
const FILTERS_PREFIX: &str = "bf.";

/// The keyspace holding the Bloom filter keys of the database whose keyspace is `main`
/// (local and replicated alike): made on a filter's first write, flushed, swapped and
/// dropped with `main`.
pub fn filters_name(main: &str) -> String {
    // A cluster names its default keyspace "" (database 0).
    if main == DEFAULT_KEYSPACE || main.is_empty() {
        format!("{FILTERS_PREFIX}default")
    } else {
        format!("{FILTERS_PREFIX}{main}")
    }
}

/// A database's keyspace, shared by the commands using it.
pub type Slot = Option<Arc<Keyspace>>;

struct Map {
    slots: Vec<Slot>,
    /// The generation the next created keyspace's name takes.
    next: u64,
}

/// Every database of a local store and its keyspace.
pub struct Databases {
    /// Shared with the threads that drop flushed keyspaces.
    db: Arc<Db>,
    meta: Keyspace,
    map: RwLock<Map>,
    /// The filters keyspace (`filters_name`) of each database keyspace that has one, by the
    /// database keyspace's name.
    filters: RwLock<HashMap<String, Arc<Keyspace>>>,
}

impl Databases {
    /// The databases of `db`, `count` of them: the map read (or made, on a store that has
    /// none), keyspaces no database names dropped, and the default keyspace's clearing
    /// resumed if one was under way. An error names what is wrong: a damaged map, or data in
    /// a database at or above `count`.
    pub fn open(db: Db, count: usize) -> Result<Databases, String> {
        if count == 0 || count > MAX_DATABASES {
            return Err(format!(
                "--databases must be 1 to {MAX_DATABASES}, not {count}"
            ));
        }
        let meta = db.keyspace(META_KEYSPACE).map_err(|e| e.to_string())?;
        let stored = meta.get(MAP_KEY).map_err(|e| e.to_string())?;
        let live = db.keyspace_names();
        let (named, next, fresh) = match stored {
            Some(text) => {
                let (named, next) = parse(&text)?;
                (named, next, false)
            }
            // A store without a map: its default keyspace is database 0 if it holds anything
            // (a store of an earlier kv_server); a new store starts with no keyspace at all.
            None => {
                let used = db.iter().next().is_some();
                let named = if used {
                    vec![(0, DEFAULT_KEYSPACE.to_string())]
                } else {
                    Vec::new()
                };
                (named, 1, true)
            }
        };
        let beyond: Vec<String> = named
            .iter()
            .filter(|(n, _)| *n >= count)
            .map(|(n, name)| format!("database {n} (keyspace {name:?})"))
            .collect();
        if let Some(need) = named
            .iter()
            .map(|(n, _)| n + 1)
            .max()
            .filter(|&m| m > count)
        {
            return Err(format!(
                "{} may hold data but --databases is {count}: start with --databases {need} or \
                 more (or FLUSHDB them first)",
                beyond.join(", ")
            ));
        }
        let mut slots: Vec<Slot> = vec![None; count];
        let mut filters = HashMap::new();
        for (n, name) in &named {
            if live.iter().any(|l| l == name) {
                let ks = db.keyspace(name).map_err(|e| e.to_string())?;
                slots[*n] = Some(Arc::new(ks));
                let side = filters_name(name);
                if live.contains(&side) {
                    let fs = db.keyspace(&side).map_err(|e| e.to_string())?;
                    filters.insert(name.clone(), Arc::new(fs));
                }
            } else {
                tracing::warn!(database = n, keyspace = %name, "the map names a keyspace the store lacks: the database is empty");
            }
        }
        let dbs = Databases {
            db: Arc::new(db),
            meta,
            map: RwLock::new(Map { slots, next }),
            filters: RwLock::new(filters),
        };
        if fresh {
            dbs.save(&dbs.write_map())?;
        }
        dbs.tidy(&live);
        Ok(dbs)
    }

    /// How many databases there are.
    pub fn count(&self) -> usize {
        self.read_map().slots.len()
    }

    /// The store.
    pub fn store(&self) -> &Db {
        &self.db
    }

    /// Database `n`'s keyspace, if it has one; `n` below `count()`.
    pub fn slot(&self, n: usize) -> Slot {
        self.read_map().slots.get(n).cloned().flatten()
    }

    /// Database `n`'s keyspace, created (and the map written) if it has none.
    pub fn slot_for_write(&self, n: usize) -> Result<Arc<Keyspace>, String> {
        if let Some(ks) = self.slot(n) {
            return Ok(ks);
        }
        let mut map = self.write_map();
        if let Some(ks) = map.slots.get(n).cloned().flatten() {
            return Ok(ks); // made meanwhile
        }
        if n >= map.slots.len() {
            return Err(format!("DB index {n} is out of range"));
        }
        let name = format!("{PREFIX}{n}.{}", map.next);
        map.next += 1;
        // Created before the map names it: a crash between leaves a keyspace no database
        // names, dropped at the next start.
        let ks = Arc::new(self.db.keyspace(&name).map_err(|e| e.to_string())?);
        map.slots[n] = Some(Arc::clone(&ks));
        if let Err(e) = self.save(&map) {
            map.slots[n] = None;
            return Err(e);
        }
        Ok(ks)
    }

    /// The filters keyspace of the database keyspace `main`, if it has one.
    pub fn filters_of(&self, main: &str) -> Slot {
        let map = self.filters.read().unwrap_or_else(|p| p.into_inner());
        map.get(main).cloned()
    }

    /// The filters keyspace of the database keyspace `main`, made if it has none.
    pub fn filters_for_write(&self, main: &str) -> Result<Arc<Keyspace>, String> {
        if let Some(fs) = self.filters_of(main) {
            return Ok(fs);
        }
        let mut map = self.filters.write().unwrap_or_else(|p| p.into_inner());
        if let Some(fs) = map.get(main) {
            return Ok(Arc::clone(fs));
        }
        let fs = Arc::new(
            self.db
                .keyspace(&filters_name(main))
                .map_err(|e| e.to_string())?,
        );
        map.insert(main.to_string(), Arc::clone(&fs));
        Ok(fs)
    }

    /// `FLUSHDB` (`which` is the session's database) and `FLUSHALL` (every one): the
    /// databases emptied, with one map write; their keyspaces dropped before this returns,
    /// or, with `background`, by a thread (Redis's `ASYNC`).
    pub fn flush(&self, which: &[usize], background: bool) -> Result<(), String> {
        let retired = {
            let mut map = self.write_map();
            let before = map.slots.clone();
            let retired: Vec<Arc<Keyspace>> = which
                .iter()
                .filter_map(|&n| map.slots.get_mut(n).and_then(Option::take))
                .collect();
            if retired.is_empty() {
                return Ok(());
            }
            if let Err(e) = self.save(&map) {
                map.slots = before;
                return Err(e);
            }
            let mut filters = self.filters.write().unwrap_or_else(|p| p.into_inner());
            let sides: Vec<Arc<Keyspace>> = retired
                .iter()
                .filter_map(|ks| filters.remove(ks.name()))
                .collect();
            retired.into_iter().chain(sides).collect::<Vec<_>>()
        };
        let db = Arc::clone(&self.db);
        let work = move || {
            for ks in retired {
                retire(&db, ks);
            }
        };
        if background {
            std::thread::spawn(work);
        } else {
            work();
        }
        Ok(())
    }

    /// `SWAPDB a b`: the two databases' contents exchanged, at once for every connection.
    pub fn swap(&self, a: usize, b: usize) -> Result<(), String> {
        let mut map = self.write_map();
        if a == b {
            return Ok(());
        }
        map.slots.swap(a, b);
        if let Err(e) = self.save(&map) {
            map.slots.swap(a, b);
            return Err(e);
        }
        Ok(())
    }

    /// Makes every acknowledged write durable and closes the store, once the threads
    /// dropping flushed keyspaces are done with it (each within `DROP_WAIT` and a drop); if
    /// one is not by then, the writes are made durable and the store closes when it ends.
    pub fn close(self) -> lsm_bloom::Result<()> {
        drop(self.map);
        drop(self.meta);
        let mut db = self.db;
        let deadline = Instant::now() + DROP_WAIT + DROP_WAIT;
        loop {
            match Arc::try_unwrap(db) {
                Ok(db) => {
                    db.flush()?;
                    return db.close();
                }
                Err(shared) if Instant::now() < deadline => {
                    db = shared;
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(shared) => {
                    tracing::warn!("a flushed keyspace is still being dropped: the store closes when that ends");
                    return shared.flush();
                }
            }
        }
    }

    fn read_map(&self) -> RwLockReadGuard<'_, Map> {
        self.map.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write_map(&self) -> RwLockWriteGuard<'_, Map> {
        self.map.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes `map`, synced: durable before the change it records is answered.
    fn save(&self, map: &Map) -> Result<(), String> {
        let mut text = format!("{MAP_HEADER}\nnext {}\n", map.next);
        for (n, slot) in map.slots.iter().enumerate() {
            if let Some(ks) = slot {
                text += &format!("{n} {}\n", ks.name());
            }
        }
        let mut b = WriteBatch::new();
        b.put_in(&self.meta, MAP_KEY, text);
        self.db
            .write_opt(b, WriteOptions::synced())
            .map_err(|e| format!("the database map was not written: {e}"))
    }

    /// Drops the database keyspaces the map does not name (a flush or a creation a crash
    /// interrupted), and resumes clearing the default keyspace if no database holds it.
    fn tidy(&self, live: &[String]) {
        let map = self.read_map();
        let named = |name: &str| map.slots.iter().flatten().any(|ks| ks.name() == name);
        let side_of_named = |name: &str| {
            map.slots
                .iter()
                .flatten()
                .any(|ks| filters_name(ks.name()) == name)
        };
        let unnamed = |n: &&String| {
            (n.starts_with(PREFIX) && !named(n))
                || (n.starts_with(FILTERS_PREFIX) && !side_of_named(n))
        };
        for name in live.iter().filter(unnamed) {
            match self.db.drop_keyspace(name) {
                Ok(_) => tracing::info!(keyspace = %name, "dropped a keyspace no database names"),
                Err(e) => {
                    tracing::warn!(keyspace = %name, error = %e, "leftover keyspace not dropped")
                }
            }
        }
        if !named(DEFAULT_KEYSPACE) && self.db.iter().next().is_some() {
            let db = Arc::clone(&self.db);
            std::thread::spawn(move || clear_default(&db));
        }
    }
}

/// Drops `ks` (a keyspace no database names any more) once no command holds it, or after
/// `DROP_WAIT` (a command still on it then fails with the store's "keyspace dropped" error,
/// having changed nothing); the default keyspace is cleared instead.
fn retire(db: &Db, ks: Arc<Keyspace>) {
    let deadline = Instant::now() + DROP_WAIT;
    while Arc::strong_count(&ks) > 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    if ks.name() == DEFAULT_KEYSPACE {
        clear_default(db);
        return;
    }
    if let Err(e) = db.drop_keyspace(ks.name()) {
        // Left for the next start, which drops every keyspace no database names.
        tracing::warn!(keyspace = ks.name(), error = %e, "flushed keyspace not dropped");
    }
}

/// Deletes every key of the default keyspace, a batch at a time (it was database 0 of an
/// earlier kv_server's store, and has been flushed; nothing reads or writes it any more).
fn clear_default(db: &Db) {
    let mut from: Vec<u8> = Vec::new();
    loop {
        let keys: Result<Vec<Vec<u8>>, _> = db
            .scan(from.clone()..)
            .map(|it| it.take(CLEAR_BATCH).map(|e| e.map(|(k, _)| k)).collect())
            .and_then(|r| r);
        let keys = match keys {
            Ok(keys) => keys,
            Err(e) => {
                tracing::warn!(error = %e, "clearing the flushed default keyspace stopped; the next start resumes it");
                return;
            }
        };
        let Some(last) = keys.last().cloned() else {
            tracing::info!("the flushed default keyspace is cleared");
            return;
        };
        let mut b = WriteBatch::new();
        for k in keys {
            b.delete(k);
        }
        if let Err(e) = db.write(b) {
            tracing::warn!(error = %e, "clearing the flushed default keyspace stopped; the next start resumes it");
            return;
        }
        from = last;
        from.push(0);
    }
}

/// The map's entries (database, keyspace name) and next generation, from its text; an error
/// names the line that is wrong.
fn parse(text: &[u8]) -> Result<(Vec<(usize, String)>, u64), String> {
    let bad =
        |what: &str| format!("the database map (key {META_KEYSPACE}/databases) is damaged: {what}");
    let text = std::str::from_utf8(text).map_err(|_| bad("not UTF-8"))?;
    let mut lines = text.lines();
    if lines.next() != Some(MAP_HEADER) {
        return Err(bad("its first line is not the header"));
    }
    let next = lines
        .next()
        .and_then(|l| l.strip_prefix("next "))
        .and_then(|n| n.parse::<u64>().ok())
        .ok_or_else(|| bad("its second line is not `next <number>`"))?;
    let mut named: Vec<(usize, String)> = Vec::new();
    for line in lines {
        let (n, name) = line
            .split_once(' ')
            .and_then(|(n, name)| Some((n.parse::<usize>().ok()?, name)))
            .ok_or_else(|| bad(&format!("line {line:?} is not `<database> <keyspace>`")))?;
        if n >= MAX_DATABASES || named.iter().any(|(m, _)| *m == n) {
            return Err(bad(&format!(
                "database {n} is out of range or listed twice"
            )));
        }
        if name != DEFAULT_KEYSPACE && !name.starts_with(PREFIX) {
            return Err(bad(&format!("keyspace {name:?} is not a database's")));
        }
        named.push((n, name.to_string()));
    }
    Ok((named, next))
}

#[cfg(test)]
#[path = "databases_tests.rs"]
mod tests;
