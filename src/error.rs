//! The crate's error type. Variants say what was found, so a message read in a log or printed
//! by the dump tool is enough to know what went wrong and where.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use crate::filter::FilterError;

/// Everything that can go wrong in this crate.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// An I/O operation failed.
    Io {
        /// What was being done, and to which file.
        context: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A filter block or filter policy is invalid.
    Filter(FilterError),
    /// Data read from disk failed validation.
    Corruption {
        /// The file it was read from.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A file was written by a newer (or unknown) version of this crate.
    UnsupportedVersion {
        /// The file.
        path: PathBuf,
        /// What kind of file.
        what: &'static str,
        /// Version found.
        found: u32,
        /// Newest version this build reads.
        supported: u32,
    },
    /// A file needs something this build was compiled without (e.g. a table compressed with
    /// zstd, read by a build without the `zstd` feature).
    Unsupported {
        /// The file.
        path: PathBuf,
        /// What it needs, and how to get it.
        reason: String,
    },
    /// A caller passed something out of range (a key, value or batch too large, bad options).
    InvalidArgument(String),
    /// Another process, or another `Db` in this one, has the database open.
    Locked {
        /// The database directory.
        path: PathBuf,
    },
    /// There is no database here (no `MANIFEST`), and `Options::create_if_missing` is false
    /// (or the caller only reads, as the dump tool does).
    NotFound {
        /// The directory.
        path: PathBuf,
    },
    /// `Options::error_if_exists` is true and a database is already here.
    AlreadyExists {
        /// The directory.
        path: PathBuf,
    },
    /// The directory holds tables or logs but no manifest: opening it as a new database would
    /// hide (and could delete) that data, so it is refused and nothing is touched.
    MissingManifest {
        /// The directory.
        path: PathBuf,
        /// What was found, e.g. "12 tables (000004.sst ...) and 1 non-empty log".
        found: String,
    },
    /// An earlier write, flush or compaction failed, so the store stopped accepting writes
    /// (reads keep working). Reopening the database recovers. `source` is that first error.
    ReadOnly {
        /// The error that stopped writes.
        source: Arc<Error>,
    },
    /// The background thread panicked (a bug); the store is read-only until reopened.
    Panicked {
        /// The panic message.
        message: String,
    },
    /// The keyspace a handle names was dropped (`Db::drop_keyspace`): a keyspace created
    /// since under the same name is another, reached through a new handle.
    KeyspaceDropped {
        /// The keyspace's name.
        name: String,
    },
    /// A transaction was not committed: a write since its snapshot changed something it read
    /// (or its commit could no longer tell). Nothing of it was written; run it again.
    Conflict {
        /// What changed.
        reason: String,
    },
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An I/O error with what was being done.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    /// A corruption error for `path`.
    pub fn corruption(path: impl Into<PathBuf>, reason: impl Into<String>) -> Self {
        Error::Corruption {
            path: path.into(),
            reason: reason.into(),
        }
    }

    /// An equivalent error (same variant, kind, OS error code and message), for handing one
    /// error to several callers; `Error` is not `Clone` because `std::io::Error` is not.
    pub(crate) fn replicate(&self) -> Error {
        match self {
            Error::Io { context, source } => Error::Io {
                context: context.clone(),
                source: match source.raw_os_error() {
                    Some(code) => std::io::Error::from_raw_os_error(code),
                    None => std::io::Error::new(source.kind(), source.to_string()),
                },
            },
            Error::Filter(e) => Error::Filter(e.clone()),
            Error::Corruption { path, reason } => Error::corruption(path, reason.clone()),
            Error::UnsupportedVersion {
                path,
                what,
                found,
                supported,
            } => Error::UnsupportedVersion {
                path: path.clone(),
                what,
                found: *found,
                supported: *supported,
            },
            Error::Unsupported { path, reason } => Error::Unsupported {
                path: path.clone(),
                reason: reason.clone(),
            },
            Error::InvalidArgument(s) => Error::InvalidArgument(s.clone()),
            Error::Locked { path } => Error::Locked { path: path.clone() },
            Error::NotFound { path } => Error::NotFound { path: path.clone() },
            Error::AlreadyExists { path } => Error::AlreadyExists { path: path.clone() },
            Error::MissingManifest { path, found } => Error::MissingManifest {
                path: path.clone(),
                found: found.clone(),
            },
            Error::ReadOnly { source } => Error::ReadOnly {
                source: Arc::clone(source),
            },
            Error::Panicked { message } => Error::Panicked {
                message: message.clone(),
            },
            Error::KeyspaceDropped { name } => Error::KeyspaceDropped { name: name.clone() },
            Error::Conflict { reason } => Error::Conflict {
                reason: reason.clone(),
            },
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { context, source } => write!(f, "{context}: {source}"),
            Error::Filter(e) => write!(f, "{e}"),
            Error::Corruption { path, reason } => {
                write!(f, "corruption in {}: {reason}", path.display())
            }
            Error::UnsupportedVersion {
                path,
                what,
                found,
                supported,
            } => write!(
                f,
                "{}: unsupported {what} version {found} (this build reads up to {supported})",
                path.display()
            ),
            Error::Unsupported { path, reason } => {
                write!(
                    f,
                    "{}: not supported by this build: {reason}",
                    path.display()
                )
            }
            Error::InvalidArgument(reason) => write!(f, "invalid argument: {reason}"),
            Error::Locked { path } => write!(
                f,
                "{} is already open (in another process, or another Db in this one)",
                path.display()
            ),
            Error::NotFound { path } => write!(
                f,
                "{} holds no lsm-bloom database (no MANIFEST)",
                path.display()
            ),
            Error::AlreadyExists { path } => write!(
                f,
                "{} already holds a database (and error_if_exists is true)",
                path.display()
            ),
            Error::MissingManifest { path, found } => write!(
                f,
                "{} holds {found} but no MANIFEST; refusing to open it as a new database \
                 (nothing was changed): restore the MANIFEST or move those files away",
                path.display()
            ),
            Error::ReadOnly { source } => write!(
                f,
                "the store is read-only after an earlier error (reopen it to recover): {source}"
            ),
            Error::Panicked { message } => {
                write!(f, "the background thread panicked: {message}")
            }
            Error::KeyspaceDropped { name } => write!(
                f,
                "keyspace {name:?} was dropped (a keyspace created since under that name needs \
                 a new handle, Db::keyspace)"
            ),
            Error::Conflict { reason } => write!(
                f,
                "transaction not committed, nothing written: {reason} (run it again)"
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            Error::Filter(e) => Some(e),
            Error::ReadOnly { source } => Some(source.as_ref()),
            _ => None,
        }
    }
}

impl From<FilterError> for Error {
    fn from(e: FilterError) -> Self {
        Error::Filter(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn read_only_carries_the_first_error_as_its_source() {
        let first = Error::io(
            "appending to 000003.wal",
            std::io::Error::from_raw_os_error(28),
        );
        let e = Error::ReadOnly {
            source: Arc::new(first.replicate()),
        };
        let src = e.source().expect("source");
        assert_eq!(src.to_string(), first.to_string());
        assert!(e.to_string().contains("read-only"), "{e}");
        match src.downcast_ref::<Error>() {
            Some(Error::Io { source, .. }) => assert_eq!(source.raw_os_error(), Some(28)),
            other => panic!("unexpected source {other:?}"),
        }
    }
}
