//! RedisBloom's filters as exact sets in the store: a filter's items are keys of its
//! database's filters keyspace (`databases::filters_name`), so `BF.EXISTS` is a point lookup
//! that the store's own Bloom filters answer without a disk read for an absent item, and
//! never answers "maybe" wrongly.
//!
//! A filter named `key` is (bytes: FORMAT.md §10.1):
//! - its header, under `header_key(key)`: the parameters it was made with, its item count
//!   and its generation; the filter's expiry is the header's;
//! - one empty value per item, under `item_key(generation, item)`.
//!
//! Items are keyed by generation, not by name: removing a filter removes its header and
//! range-deletes its generation's items (two writes, whatever its size), and a filter made
//! later under the same name takes the next generation (`GENERATION_KEY`), so it starts
//! empty even where items were left behind: those of a filter that expired stay on disk,
//! unreachable, until a sweep range-deletes them (`bloom_sweep.rs`). RENAME moves the
//! header alone.
//!
//! The changes (`BfChange`) run like every other read-modify-write (`rmw.rs`): on a single
//! server under the exclusive write order, in a cluster as one call decided at apply, so
//! `BF.ADD`'s "newly added" is exact across nodes.

#[cfg(feature = "replication")]
use super::call_codec::{put_bytes, Cursor};
use super::resp::Reply;
use super::rmw_view::{wrong_type, Place, Rmw};
use super::store::StoreResult;

/// `TYPE`'s answer for a filter, RedisBloom's type name.
pub const TYPE_NAME: &str = "MBbloom--";
/// Where the last generation number given is kept, in the filters keyspace.
pub const GENERATION_KEY: &[u8] = b"g";
/// A header's bytes: version, error rate, capacity, expansion, items, item bytes,
/// generation.
const HEADER_LEN: usize = 1 + 8 + 8 + 4 + 8 + 8 + 8;
const HEADER_VERSION: u8 = 1;
/// RedisBloom's bounds on a filter's parameters.
pub const MAX_CAPACITY: u64 = 1 << 30;
pub const MAX_EXPANSION: u32 = 32768;

/// The end (excluded) of every header: a header is `h…`, and nothing else starts with `h`.
pub const HEADERS_END: &[u8] = b"i";

/// The key of `key`'s header in the filters keyspace.
pub fn header_key(key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(1 + key.len());
    k.push(b'h');
    k.extend_from_slice(key);
    k
}

/// The key of `item` of the filter of generation `generation`.
pub fn item_key(generation: u64, item: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(9 + item.len());
    k.push(b'i');
    k.extend_from_slice(&generation.to_be_bytes());
    k.extend_from_slice(item);
    k
}

/// The keys of every item of the filter of generation `generation`: from, and up to
/// (excluded).
pub fn items_range(generation: u64) -> (Vec<u8>, Vec<u8>) {
    let end = match generation.checked_add(1) {
        Some(next) => item_key(next, b""),
        None => b"j".to_vec(),
    };
    (item_key(generation, b""), end)
}

/// What a filter is made with (`BF.RESERVE`, `BF.INSERT`, or the defaults of `BF.ADD`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Params {
    /// Recorded and reported; the answers are exact, so it is met with room.
    pub error_rate: f64,
    /// Items a non-scaling filter takes; reported as given otherwise.
    pub capacity: u64,
    /// 0: non-scaling (refuses new items past `capacity`).
    pub expansion: u32,
}

/// RedisBloom's defaults: error rate 0.01, capacity 100, expansion 2.
pub const DEFAULTS: Params = Params {
    error_rate: 0.01,
    capacity: 100,
    expansion: 2,
};

/// A filter's header.
#[derive(Clone, Debug, PartialEq)]
pub struct Header {
    pub params: Params,
    /// Items added.
    pub items: u64,
    /// Their bytes, summed (for `BF.INFO`'s size).
    pub item_bytes: u64,
    pub generation: u64,
}

impl Header {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(HEADER_LEN);
        b.push(HEADER_VERSION);
        b.extend_from_slice(&self.params.error_rate.to_bits().to_le_bytes());
        b.extend_from_slice(&self.params.capacity.to_le_bytes());
        b.extend_from_slice(&self.params.expansion.to_le_bytes());
        b.extend_from_slice(&self.items.to_le_bytes());
        b.extend_from_slice(&self.item_bytes.to_le_bytes());
        b.extend_from_slice(&self.generation.to_le_bytes());
        b
    }

    /// A header's bytes, checked: a damaged one is an error naming what is wrong.
    pub fn decode(b: &[u8]) -> Result<Header, String> {
        let bad = |what: &str| format!("a damaged Bloom filter header: {what}");
        if b.len() != HEADER_LEN {
            return Err(bad(&format!("{} bytes, not {HEADER_LEN}", b.len())));
        }
        if b[0] != HEADER_VERSION {
            return Err(bad(&format!("version {}", b[0])));
        }
        let u64_at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(a)
        };
        let params = Params {
            error_rate: f64::from_bits(u64_at(1)),
            capacity: u64_at(9),
            expansion: u32::from_le_bytes([b[17], b[18], b[19], b[20]]),
        };
        params.check().map_err(|e| bad(&e))?;
        Ok(Header {
            params,
            items: u64_at(21),
            item_bytes: u64_at(29),
            generation: u64_at(37),
        })
    }

    /// `BF.INFO`'s size: the bytes the filter's keys take before compression (header, and
    /// per item its key: 9 bytes and the item) plus what the store's filters spend on them
    /// at their defaults (10 bits a key, rounded up to 2 bytes).
    pub fn size(&self) -> u64 {
        (HEADER_LEN as u64 + 1)
            .saturating_add(self.item_bytes)
            .saturating_add(self.items.saturating_mul(9 + 2))
    }
}

impl Params {
    /// Whether the parameters are within RedisBloom's bounds.
    pub fn check(&self) -> Result<(), String> {
        if !(self.error_rate > 0.0 && self.error_rate < 1.0) {
            return Err(format!("error rate {}", self.error_rate));
        }
        if !(1..=MAX_CAPACITY).contains(&self.capacity) {
            return Err(format!("capacity {}", self.capacity));
        }
        if self.expansion > MAX_EXPANSION {
            return Err(format!("expansion {}", self.expansion));
        }
        Ok(())
    }
}

/// A write to a filter, decided like every change (`rmw.rs`).
#[derive(Clone, Debug, PartialEq)]
pub enum BfChange {
    /// `BF.RESERVE`: a new empty filter.
    Reserve { key: Vec<u8>, params: Params },
    /// `BF.ADD` (`many` false), `BF.MADD`, `BF.INSERT`: the items added, the filter made
    /// with `create` if there is none (`None`: `NOCREATE`).
    Add {
        key: Vec<u8>,
        items: Vec<Vec<u8>>,
        create: Option<Params>,
        many: bool,
    },
    /// Range-deletes the items no live filter names (`bloom_sweep.rs`).
    Sweep,
}

/// A store failure or a damaged header, as the reply.
fn damaged(e: String) -> Reply {
    Reply::err(e)
}

/// The filter `key`, if there is one (and no string of that name); `WRONGTYPE` for a
/// string.
fn filter_of(rmw: &mut dyn Rmw, key: &[u8]) -> StoreResult<Option<(Header, Option<u64>)>> {
    if rmw.contains(Place::Values, key)? {
        return Err(wrong_type());
    }
    match rmw.read(Place::Filters, &header_key(key))? {
        None => Ok(None),
        Some((b, expires)) => Ok(Some((Header::decode(&b).map_err(damaged)?, expires))),
    }
}

/// The generation after the last one given (`GENERATION_KEY`'s value, if any).
pub fn next_generation(last: Option<&[u8]>) -> StoreResult<u64> {
    match last {
        None => Ok(1),
        Some(b) => match <[u8; 8]>::try_from(b) {
            Ok(a) => Ok(u64::from_le_bytes(a).wrapping_add(1)),
            Err(_) => Err(damaged("a damaged Bloom filter generation".into())),
        },
    }
}

/// Takes the database's next generation (`GENERATION_KEY`) for a new filter.
pub fn take_generation(rmw: &mut dyn Rmw) -> StoreResult<u64> {
    let last = rmw.read(Place::Filters, GENERATION_KEY)?;
    let generation = next_generation(last.as_ref().map(|(b, _)| b.as_slice()))?;
    rmw.write(
        Place::Filters,
        GENERATION_KEY,
        Some((generation.to_le_bytes().to_vec(), None)),
    )?;
    Ok(generation)
}

/// A new filter's header: the next generation taken.
fn made(rmw: &mut dyn Rmw, params: Params) -> StoreResult<Header> {
    Ok(Header {
        params,
        items: 0,
        item_bytes: 0,
        generation: take_generation(rmw)?,
    })
}

impl BfChange {
    /// Decides the change against `rmw` (`Change::run`).
    pub fn run(self, rmw: &mut dyn Rmw) -> StoreResult<Reply> {
        match self {
            BfChange::Sweep => super::bloom_sweep::sweep(rmw),
            BfChange::Reserve { key, params } => {
                if filter_of(rmw, &key)?.is_some() {
                    return Ok(Reply::err("item exists"));
                }
                let header = made(rmw, params)?;
                rmw.write(
                    Place::Filters,
                    &header_key(&key),
                    Some((header.encode(), None)),
                )?;
                Ok(Reply::ok())
            }
            BfChange::Add {
                key,
                items,
                create,
                many,
            } => {
                let (mut header, expires, created) = match (filter_of(rmw, &key)?, create) {
                    (Some((header, expires)), _) => (header, expires, false),
                    (None, Some(params)) => (made(rmw, params)?, None, true),
                    (None, None) => return Ok(Reply::err("not found")),
                };
                let before = header.clone();
                let mut answers = Vec::with_capacity(items.len());
                for item in &items {
                    let k = item_key(header.generation, item);
                    if rmw.contains(Place::Filters, &k)? {
                        answers.push(Reply::Bool(false));
                    } else if header.params.expansion == 0 && header.items >= header.params.capacity
                    {
                        // RedisBloom answers the items before and stops.
                        answers.push(Reply::err("non scaling filter is full"));
                        break;
                    } else {
                        rmw.write(Place::Filters, &k, Some((Vec::new(), None)))?;
                        header.items += 1;
                        header.item_bytes += item.len() as u64;
                        answers.push(Reply::Bool(true));
                    }
                }
                if header != before || created {
                    rmw.write(
                        Place::Filters,
                        &header_key(&key),
                        Some((header.encode(), expires)),
                    )?;
                }
                Ok(match many {
                    true => Reply::Array(answers),
                    false => answers.pop().unwrap_or(Reply::Bool(false)),
                })
            }
        }
    }

    #[cfg(feature = "replication")]
    /// The change's bytes in a call (after its tag, FORMAT.md §7.5): u8 kind (1 reserve,
    /// 2 add), the key; for reserve the parameters (error rate as IEEE bits, capacity u64,
    /// expansion u32); for add u8 flags (1: many, 2: create), the parameters if it creates,
    /// u32 count and that many items.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let params = |out: &mut Vec<u8>, p: &Params| {
            out.extend_from_slice(&p.error_rate.to_bits().to_le_bytes());
            out.extend_from_slice(&p.capacity.to_le_bytes());
            out.extend_from_slice(&p.expansion.to_le_bytes());
        };
        match self {
            BfChange::Reserve { key, params: p } => {
                out.push(1);
                put_bytes(out, key);
                params(out, p);
            }
            BfChange::Add {
                key,
                items,
                create,
                many,
            } => {
                out.push(2);
                put_bytes(out, key);
                out.push(u8::from(*many) | (u8::from(create.is_some()) << 1));
                if let Some(p) = create {
                    params(out, p);
                }
                out.extend_from_slice(&(items.len() as u32).to_le_bytes());
                for item in items {
                    put_bytes(out, item);
                }
            }
            BfChange::Sweep => out.push(3),
        }
    }

    #[cfg(feature = "replication")]
    /// `encode`'s bytes, every length and parameter checked.
    pub fn decode(c: &mut Cursor<'_>) -> Result<BfChange, String> {
        let params = |c: &mut Cursor<'_>| -> Result<Params, String> {
            let p = Params {
                error_rate: f64::from_bits(c.u64()?),
                capacity: c.u64()?,
                expansion: c.u32()?,
            };
            p.check().map(|()| p)
        };
        match c.u8()? {
            1 => Ok(BfChange::Reserve {
                key: c.bytes()?,
                params: params(c)?,
            }),
            2 => {
                let key = c.bytes()?;
                let flags = c.u8()?;
                if flags > 3 {
                    return Err(format!("Bloom filter flags {flags}"));
                }
                let create = match flags & 2 {
                    0 => None,
                    _ => Some(params(c)?),
                };
                let n = c.u32()?;
                let mut items = Vec::new();
                for _ in 0..n {
                    items.push(c.bytes()?);
                }
                Ok(BfChange::Add {
                    key,
                    items,
                    create,
                    many: flags & 1 == 1,
                })
            }
            3 => Ok(BfChange::Sweep),
            k => Err(format!("Bloom filter change kind {k}")),
        }
    }
}

#[cfg(test)]
#[path = "bloom_tests.rs"]
mod tests;
