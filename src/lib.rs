//! # lsm-bloom
//!
//! Bloom filter blocks for SSTables, in a versioned, checksummed on-disk format
//! (see `FORMAT.md`), usable on their own by any LSM.
#![deny(missing_docs)]

pub mod error;
pub mod filter;
pub mod inspect;

pub use error::{Error, Result};
