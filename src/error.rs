//! The crate's error type. Variants say what was found, so a message read in a log or printed
//! by the dump tool is enough to know what went wrong and where.

use std::fmt;
use std::path::PathBuf;

use crate::filter::FilterError;

/// Everything that can go wrong in this crate.
#[derive(Debug)]
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
    /// A caller passed something out of range.
    InvalidArgument(String),
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
            Error::InvalidArgument(reason) => write!(f, "invalid argument: {reason}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            Error::Filter(e) => Some(e),
            _ => None,
        }
    }
}

impl From<FilterError> for Error {
    fn from(e: FilterError) -> Self {
        Error::Filter(e)
    }
}
