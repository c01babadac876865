//! The file descriptor limit, and what to do when accepting fails for want of descriptors.
//!
//! A process starts with the soft `RLIMIT_NOFILE` its parent gave it, often 1,024, while the
//! hard limit (what an unprivileged process may raise it to) is much higher: every socket
//! counts, so a proxy with 1,024 descriptors tops out near 500 connections whatever
//! `--max-connections` says. Long-running commands raise the soft limit to the hard one at
//! start, as Go's runtime has done since 1.19.

use std::io;
use std::time::Duration;

use rustix::io::Errno;
use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

use crate::LogLimiter;

/// How long an accept loop pauses after a failure: long enough not to spin on a backlog
/// that cannot be accepted (out of descriptors, the pending connection stays queued and the
/// listener stays readable), short enough to take it soon after a descriptor is freed.
pub const ACCEPT_BACKOFF: Duration = Duration::from_millis(20);

/// The descriptor limit after [`raise_nofile_limit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NofileLimit {
    /// The soft limit before (`None`: unlimited).
    pub before: Option<u64>,
    /// The soft limit now (`None`: unlimited).
    pub now: Option<u64>,
}

impl NofileLimit {
    /// Roughly how many sockets fit, leaving `reserved` descriptors for everything else (log
    /// files, the runtime's own, the admin server).
    pub fn sockets(&self, reserved: u64) -> Option<u64> {
        self.now.map(|limit| limit.saturating_sub(reserved))
    }
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit and returns both values. When the hard
/// limit is unlimited, the soft one goes to the kernel's `fs.nr_open` (the most it accepts).
/// Never fails: a limit that cannot be raised is simply kept.
pub fn raise_nofile_limit() -> NofileLimit {
    let limit = getrlimit(Resource::Nofile);
    let target = limit.maximum.or_else(nr_open);
    if let (Some(current), Some(target)) = (limit.current, target)
        && target > current
    {
        let raised = Rlimit {
            current: Some(target),
            maximum: limit.maximum,
        };
        if let Err(err) = setrlimit(Resource::Nofile, raised) {
            tracing::debug!(error = %err, "cannot raise the file descriptor limit");
        }
    }
    NofileLimit {
        before: limit.current,
        now: getrlimit(Resource::Nofile).current,
    }
}

/// Descriptors set aside for everything but the connections a command serves: the admin
/// server's connections (see [`crate::AdminLimits`]), listeners, the runtime's own, files and
/// API clients.
pub const RESERVED: u64 = 128;

/// Raises the limit as [`raise_nofile_limit`] does and logs the connection ceiling it gives,
/// with `per_connection` descriptors per connection and `also_reserved` more set aside (on
/// top of [`RESERVED`]); warns when `max_connections` (named after its flag) is above it,
/// since beyond the ceiling accepting fails until a connection ends.
pub fn raise_and_report(
    per_connection: u64,
    also_reserved: u64,
    max_connections: u64,
    flag: &str,
) -> NofileLimit {
    let limit = raise_nofile_limit();
    let ceiling = limit
        .sockets(RESERVED + also_reserved)
        .map(|sockets| sockets / per_connection.max(1));
    let show = |limit: Option<u64>| limit.map_or_else(|| "unlimited".to_owned(), |n| n.to_string());
    tracing::info!(
        before = %show(limit.before),
        now = %show(limit.now),
        connection_ceiling = %show(ceiling),
        "file descriptor limit (the soft RLIMIT_NOFILE is raised to the hard one)"
    );
    if let Some(ceiling) = ceiling
        && max_connections > ceiling
    {
        tracing::warn!(
            connection_ceiling = ceiling,
            "{flag} {max_connections} is above what the file descriptor limit allows: beyond about {ceiling} connections, accepting fails and pauses until one ends (raise the hard limit, e.g. the container runtime's LimitNOFILE)"
        );
    }
    limit
}

fn nr_open() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// True for the errors of `accept` that mean "no descriptor (or memory) left": the pending
/// connection stays in the backlog, and accepting again at once fails the same way.
pub fn is_resource_exhaustion(err: &io::Error) -> bool {
    matches!(
        Errno::from_io_error(err),
        Some(Errno::MFILE | Errno::NFILE | Errno::NOBUFS | Errno::NOMEM)
    )
}

/// What an accept loop does after `accept` failed: logs it (at most what `log` lets
/// through, with the count of lines left out) and pauses for [`ACCEPT_BACKOFF`]. A
/// connection reset before it was accepted is not worth a line or a pause.
pub async fn accept_failed(err: &io::Error, what: &str, log: &LogLimiter) {
    if Errno::from_io_error(err) == Some(Errno::CONNABORTED) {
        return;
    }
    if let Some(suppressed) = log.check() {
        if is_resource_exhaustion(err) {
            tracing::warn!(
                listener = what,
                error = %err,
                suppressed,
                "accept failed: out of file descriptors or memory; pausing before the next accept (raise the limit or lower the connection cap)"
            );
        } else {
            tracing::warn!(listener = what, error = %err, suppressed, "accept failed");
        }
    }
    tokio::time::sleep(ACCEPT_BACKOFF).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exhaustion_errors_are_recognised() {
        for errno in [Errno::MFILE, Errno::NFILE, Errno::NOBUFS, Errno::NOMEM] {
            assert!(is_resource_exhaustion(&io::Error::from(errno)), "{errno:?}");
        }
        assert!(!is_resource_exhaustion(&io::Error::from(
            Errno::CONNABORTED
        )));
        assert!(!is_resource_exhaustion(&io::Error::other("no errno")));
    }

    #[test]
    fn sockets_leave_the_reserve() {
        let limit = NofileLimit {
            before: Some(1024),
            now: Some(4096),
        };
        assert_eq!(limit.sockets(64), Some(4032));
        assert_eq!(limit.sockets(10_000), Some(0));
        let unlimited = NofileLimit {
            before: None,
            now: None,
        };
        assert_eq!(unlimited.sockets(64), None);
    }
}
