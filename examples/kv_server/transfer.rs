//! MOVE and COPY: a key taken from one database to another (or, for COPY, to another name),
//! decided as one change over the two databases (`TwoRmw`), so the same code serves a single
//! server (`LocalPair`, under the exclusive write order, its writes one batch) and a cluster
//! (`procs::CallPair`, one call decided when its entry is applied, on every node alike).
//!
//! A string goes with its value and expiry. A Bloom filter goes with its header and expiry
//! under a new generation of the destination's (`bloom::take_generation`), and its items:
//! at most `MAX_TRANSFER_ITEMS`, counted from the data the change reads, so a cluster's
//! nodes all refuse alike.

use super::bloom::{header_key, item_key, items_range, take_generation, Header};
use super::resp::Reply;
use super::rmw_view::{Place, Rmw, SpaceRmw};
use super::store::{Space, StoreResult};

/// Most items a MOVE or COPY of a filter takes (its writes are one batch).
pub const MAX_TRANSFER_ITEMS: usize = 100_000;

/// Which of the two databases a view reads and writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Source,
    Dest,
}

/// MOVE, or COPY with or without REPLACE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum How {
    Move,
    Copy { replace: bool },
}

/// Where a transfer reads and writes: two databases (the same one twice for a COPY within a
/// database), its reads seeing its writes.
pub trait TwoRmw {
    /// `side`'s database.
    fn side(&mut self, side: Side) -> &mut dyn Rmw;
}

/// Takes `key` of the source database to `to_key` of the destination: 1 if done; 0 if the
/// source has no `key`, or the destination has `to_key` and `how` does not replace it.
/// Refuses before writing anything.
pub fn transfer(pair: &mut impl TwoRmw, key: &[u8], to_key: &[u8], how: How) -> StoreResult<Reply> {
    let Some((place, value, expires)) = pair.side(Side::Source).locate(key)? else {
        return Ok(Reply::Int(0));
    };
    let items = match place {
        Place::Values => None,
        Place::Filters => {
            let header = Header::decode(&value).map_err(Reply::err)?;
            let (start, end) = items_range(header.generation);
            let range = (start.as_slice(), end.as_slice());
            let (items, more) =
                pair.side(Side::Source)
                    .entries(Place::Filters, range, MAX_TRANSFER_ITEMS)?;
            if more {
                return Ok(Reply::err(format!(
                    "MOVE or COPY of a Bloom filter of more than {MAX_TRANSFER_ITEMS} items \
                     is not supported"
                )));
            }
            let tail = |(k, _): (Vec<u8>, _)| k.get(start.len()..).unwrap_or_default().to_vec();
            Some((header, items.into_iter().map(tail).collect::<Vec<_>>()))
        }
    };
    if pair.side(Side::Dest).exists(to_key)? {
        match how {
            How::Copy { replace: true } => pair.side(Side::Dest).delete(to_key)?,
            How::Move | How::Copy { replace: false } => return Ok(Reply::Int(0)),
        }
    }
    if how == How::Move {
        pair.side(Side::Source).delete(key)?;
    }
    let dest = pair.side(Side::Dest);
    match items {
        None => dest.put(to_key, value, expires)?,
        Some((mut header, items)) => {
            header.generation = take_generation(dest)?;
            let h = header_key(to_key);
            dest.write(Place::Filters, &h, Some((header.encode(), expires)))?;
            for item in items {
                let k = item_key(header.generation, &item);
                dest.write(Place::Filters, &k, Some((Vec::new(), None)))?;
            }
        }
    }
    Ok(Reply::Int(1))
}

/// A single server's two databases (one, for a COPY within a database), each a change's
/// view (`SpaceRmw`); `finish` writes both views' writes as one batch.
pub struct LocalPair<'s, 'a> {
    source: SpaceRmw<'s, 'a>,
    dest: Option<SpaceRmw<'s, 'a>>,
}

impl<'s, 'a> LocalPair<'s, 'a> {
    /// `dest` is `None` when it is the source's database.
    pub fn new(source: &'s Space<'a>, dest: Option<&'s Space<'a>>, now: u64) -> Self {
        LocalPair {
            source: SpaceRmw::new(source, now),
            dest: dest.map(|d| SpaceRmw::new(d, now)),
        }
    }

    fn view(&mut self, side: Side) -> &mut SpaceRmw<'s, 'a> {
        match (side, &mut self.dest) {
            (Side::Dest, Some(d)) => d,
            _ => &mut self.source,
        }
    }

    /// Writes what the transfer wrote, both databases in one batch.
    pub fn finish(self) -> StoreResult<()> {
        let (mut batch, space) = self.source.batch();
        let mut any = self.source.fill(&mut batch)?;
        if let Some(d) = self.dest {
            any |= d.fill(&mut batch)?;
        }
        match any {
            true => space.write(batch),
            false => Ok(()),
        }
    }
}

impl TwoRmw for LocalPair<'_, '_> {
    fn side(&mut self, side: Side) -> &mut dyn Rmw {
        self.view(side)
    }
}
