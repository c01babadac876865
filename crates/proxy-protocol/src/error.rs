//! The codec's errors.

/// Why a header could not be encoded. Nothing usable is left in the buffer then.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// The caller's buffer cannot hold the header.
    #[error(
        "buffer too small: the PROXY header needs {needed} bytes, the buffer holds {available}"
    )]
    BufferTooSmall {
        /// Bytes the header (so far) needs.
        needed: usize,
        /// Length of the caller's buffer.
        available: usize,
    },
}

impl EncodeError {
    /// A short, stable label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            EncodeError::BufferTooSmall { .. } => "buffer_too_small",
        }
    }
}
