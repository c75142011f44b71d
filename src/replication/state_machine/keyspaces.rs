//! Keyspaces of the replicated data (`Op::PutIn`, `DeleteIn`, `Clear`, `Swap`), and where the
//! state machine's store keeps each (FORMAT.md §7.2).
//!
//! A replicated keyspace is a name; its data lives in a *place*: `d` + key in the store's
//! default keyspace (where layout versions 1 and 2 kept all data: the default replicated
//! keyspace `""` starts there), or a store keyspace of its own, `r.<generation>` (generations
//! never reused), created by the keyspace's first write. The map from names to places is
//! kept in the store (`m/k/` + name → place) and written in the same batch as the entry that
//! changes it, so it always agrees with the applied position. So:
//! - `Clear` points the name at no place and, once the batch is written, drops its store
//!   keyspace (its tables deleted at once, whatever their size); the default place is
//!   cleared by a local thread deleting its `d` keys instead (nothing resolves to it again);
//! - `Swap` exchanges two names' places: one small write.
//!
//! Every node decides alike from the log; the places' generations may differ between nodes
//! (a snapshot carries its own). A crash between a keyspace's creation and the batch naming
//! it, or between a batch and a drop it ordered, leaves a store keyspace no name points at:
//! dropped when the store opens (`tidy`). Readers resolve a name once per read, from the map
//! of the last written batch; a read that meets a place dropped under it resolves again.

use std::collections::HashMap;
use std::sync::Arc;

use crate::db::{Db, Keyspace, WriteBatch};
use crate::error::{Error, Result};

/// Map keys: this prefix + the replicated keyspace's name.
const MAP_PREFIX: &[u8] = b"m/k/";
/// The next generation (u64).
const NEXT: &[u8] = b"m/knext";
/// Store keyspaces holding replicated keyspaces are named this + a generation.
const OWN_PREFIX: &str = "r.";
/// How the default place is written in the map.
const DEFAULT_PLACE: &str = "default";
/// `d` keys deleted per batch when the default place is cleared.
const CLEAR_BATCH: usize = 1000;

/// Where a replicated keyspace's data lives.
#[derive(Clone, Debug)]
pub(crate) enum Place {
    /// `d` + key in the store's default keyspace.
    Default,
    /// A store keyspace of its own (keys as they are).
    Own(Keyspace),
}

/// The map of one store: each replicated keyspace's place. Immutable once published; an
/// apply that changes it publishes a new one.
#[derive(Clone)]
pub(crate) struct Spaces {
    /// The store the places are in.
    pub(crate) db: Arc<Db>,
    /// Names with an entry; `None`: empty. A name without one is empty, but `""`, whose
    /// data starts in the default place.
    map: HashMap<String, Option<Place>>,
    next: u64,
}

fn corrupt(db: &Db, reason: String) -> Error {
    Error::Corruption {
        path: db.path().to_path_buf(),
        reason: format!("state machine keyspace map: {reason}"),
    }
}

impl Spaces {
    /// The map `db` holds (empty for a store of layout 1 or 2).
    pub(crate) fn load(db: Arc<Db>) -> Result<Spaces> {
        let mut map = HashMap::new();
        let names = db.keyspace_names();
        for e in db.scan_prefix(MAP_PREFIX)? {
            let (k, v) = e?;
            let name = String::from_utf8(k[MAP_PREFIX.len()..].to_vec())
                .map_err(|_| corrupt(&db, "a name is not UTF-8".into()))?;
            let place = match std::str::from_utf8(&v) {
                Ok("") => None,
                Ok(DEFAULT_PLACE) => Some(Place::Default),
                Ok(own) if own.starts_with(OWN_PREFIX) => {
                    if !names.iter().any(|n| n == own) {
                        return Err(corrupt(
                            &db,
                            format!("{name:?} lives in {own:?}, which the store lacks"),
                        ));
                    }
                    Some(Place::Own(db.keyspace(own)?))
                }
                _ => return Err(corrupt(&db, format!("{name:?} has an unknown place"))),
            };
            map.insert(name, place);
        }
        let next = match db.get(NEXT)? {
            None => 0,
            Some(b) => u64::from_le_bytes(
                b.as_slice()
                    .try_into()
                    .map_err(|_| corrupt(&db, format!("{} bytes of generation", b.len())))?,
            ),
        };
        Ok(Spaces { db, map, next })
    }

    /// Where `name`'s data lives; `None`: it is empty.
    pub(crate) fn resolve(&self, name: &str) -> Option<Place> {
        match self.map.get(name) {
            Some(place) => place.clone(),
            None if name.is_empty() => Some(Place::Default),
            None => None,
        }
    }

    /// Whether any name lives in the default place.
    fn default_in_use(&self) -> bool {
        self.resolve("")
            .is_some_and(|p| matches!(p, Place::Default))
            || self.map.values().any(|p| matches!(p, Some(Place::Default)))
    }

    /// Drops the store keyspaces no name points at, and starts clearing the default place if
    /// nothing lives there and it holds keys (a crash interrupted either).
    pub(crate) fn tidy(&self) {
        let named = |n: &str| {
            self.map
                .values()
                .any(|p| matches!(p, Some(Place::Own(k)) if k.name() == n))
        };
        for n in self.db.keyspace_names() {
            if n.starts_with(OWN_PREFIX) && !named(&n) {
                if let Err(e) = self.db.drop_keyspace(&n) {
                    tracing::warn!(keyspace = %n, error = %e, "unnamed state machine keyspace not dropped");
                }
            }
        }
        if !self.default_in_use() {
            clear_default_place(&self.db);
        }
    }
}

/// An apply's changes to the map, staged until its batch is written.
pub(crate) struct Staged {
    spaces: Arc<Spaces>,
    /// The map as the staged operations leave it, once one changed it.
    changed: Option<Spaces>,
    /// Places emptied by the staged operations: dropped once the batch is written.
    emptied: Vec<Place>,
}

impl Staged {
    pub(crate) fn new(spaces: Arc<Spaces>) -> Staged {
        Staged {
            spaces,
            changed: None,
            emptied: Vec::new(),
        }
    }

    /// The store the places are in.
    pub(crate) fn db(&self) -> &Db {
        &self.spaces.db
    }

    fn now(&self) -> &Spaces {
        self.changed.as_ref().unwrap_or(&self.spaces)
    }

    fn edit(&mut self) -> &mut Spaces {
        self.changed
            .get_or_insert_with(|| Spaces::clone(&self.spaces))
    }

    /// Where `name`'s data lives as the staged operations leave it.
    pub(crate) fn resolve(&self, name: &str) -> Option<Place> {
        self.now().resolve(name)
    }

    fn set(&mut self, name: &str, place: Option<Place>, batch: &mut WriteBatch) {
        let value = match &place {
            None => String::new(),
            Some(Place::Default) => DEFAULT_PLACE.to_string(),
            Some(Place::Own(k)) => k.name().to_string(),
        };
        batch.put([MAP_PREFIX, name.as_bytes()].concat(), value);
        self.edit().map.insert(name.to_string(), place);
    }

    /// Where `name`'s data lives, a store keyspace created for it if it is empty (created
    /// now, named in `batch`).
    pub(crate) fn place_for_write(&mut self, name: &str, batch: &mut WriteBatch) -> Result<Place> {
        if let Some(p) = self.resolve(name) {
            return Ok(p);
        }
        let generation = self.now().next;
        let own = self
            .spaces
            .db
            .keyspace(&format!("{OWN_PREFIX}{generation}"))?;
        self.edit().next = generation + 1;
        batch.put(NEXT, (generation + 1).to_le_bytes());
        self.set(name, Some(Place::Own(own.clone())), batch);
        Ok(Place::Own(own))
    }

    /// `Op::Clear`.
    pub(crate) fn clear(&mut self, name: &str, batch: &mut WriteBatch) {
        if let Some(old) = self.resolve(name) {
            self.set(name, None, batch);
            self.emptied.push(old);
        }
    }

    /// `Op::Swap`.
    pub(crate) fn swap(&mut self, a: &str, b: &str, batch: &mut WriteBatch) {
        if a == b {
            return;
        }
        let (pa, pb) = (self.resolve(a), self.resolve(b));
        self.set(a, pb, batch);
        self.set(b, pa, batch);
    }

    /// Once the staged batch is written: the new map is published, if it changed, and
    /// staging goes on from it; the emptied places are dropped after it is published.
    pub(crate) fn written(&mut self, publish: impl FnOnce(Arc<Spaces>)) {
        let emptied = std::mem::take(&mut self.emptied);
        let Some(spaces) = self.changed.take() else {
            return;
        };
        let default_in_use = spaces.default_in_use();
        let spaces = Arc::new(spaces);
        self.spaces = Arc::clone(&spaces);
        let db = Arc::clone(&spaces.db);
        publish(spaces);
        for place in emptied {
            match place {
                Place::Own(k) => {
                    // Readers still on it resolve again (the module comment).
                    if let Err(e) = db.drop_keyspace(k.name()) {
                        tracing::warn!(keyspace = k.name(), error = %e, "cleared keyspace not dropped; the next open drops it");
                    }
                }
                Place::Default if !default_in_use => clear_default_place(&db),
                Place::Default => {}
            }
        }
    }
}

/// Deletes the `d` keys of the default place, a batch at a time, on a thread of its own
/// (nothing resolves to the place any more, so nothing writes it meanwhile). Local: not
/// replicated, and resumed by `tidy` at the next open if it stops.
fn clear_default_place(db: &Arc<Db>) {
    let empty = db
        .scan(vec![super::DATA]..vec![super::DATA + 1])
        .map(|mut it| it.next().is_none())
        .unwrap_or(true);
    if empty {
        return;
    }
    let db = Arc::clone(db);
    let run = move || loop {
        let keys: Result<Vec<Vec<u8>>> = db
            .scan(vec![super::DATA]..vec![super::DATA + 1])
            .and_then(|it| it.take(CLEAR_BATCH).map(|e| e.map(|(k, _)| k)).collect());
        let keys = match keys {
            Ok(k) if k.is_empty() => return,
            Ok(k) => k,
            Err(e) => {
                tracing::warn!(error = %e, "clearing the default place stopped; the next open resumes it");
                return;
            }
        };
        let mut b = WriteBatch::new();
        for k in keys {
            b.delete(k);
        }
        if let Err(e) = db.write(b) {
            tracing::warn!(error = %e, "clearing the default place stopped; the next open resumes it");
            return;
        }
    };
    std::thread::spawn(run);
}
