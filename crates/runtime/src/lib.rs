//! Shared runtime pieces: admin server (livez/readyz/metrics), shutdown signals, logging, CLI groups.
