//! Shutdown signalling: the first SIGTERM/SIGINT starts a graceful drain, a second one forces.

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// A cloneable handle on the process's shutdown state.
///
/// `drain` is cancelled by the first signal (stop accepting, finish what is in flight);
/// `force` by the second (give up on draining now). Forcing implies draining.
#[derive(Clone, Debug, Default)]
pub struct Shutdown {
    drain: CancellationToken,
    force: CancellationToken,
}

impl Shutdown {
    /// A handle that only changes when [`Shutdown::trigger`] / [`Shutdown::force`] are called:
    /// for tests and for embedding.
    pub fn new() -> Self {
        Self::default()
    }

    /// A handle driven by SIGTERM and SIGINT (Ctrl-C). Must be called inside a tokio runtime.
    ///
    /// # Errors
    /// When the signal handlers cannot be installed.
    pub fn from_signals() -> std::io::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        let shutdown = Self::new();
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        let handle = shutdown.clone();
        tokio::spawn(async move {
            for count in 0.. {
                let name = tokio::select! {
                    _ = term.recv() => "SIGTERM",
                    _ = int.recv() => "SIGINT",
                };
                if count == 0 {
                    tracing::info!(
                        signal = name,
                        "shutdown requested: draining (send the signal again to force)"
                    );
                    handle.trigger();
                } else {
                    tracing::warn!(signal = name, "second signal: forcing shutdown");
                    handle.force();
                    return;
                }
            }
        });
        Ok(shutdown)
    }

    /// Starts the drain, as a first signal would.
    pub fn trigger(&self) {
        self.drain.cancel();
    }

    /// Forces shutdown, as a second signal would.
    pub fn force(&self) {
        self.drain.cancel();
        self.force.cancel();
    }

    /// True once the drain has started.
    pub fn is_draining(&self) -> bool {
        self.drain.is_cancelled()
    }

    /// True once shutdown was forced.
    pub fn is_forced(&self) -> bool {
        self.force.is_cancelled()
    }

    /// Resolves when the drain starts.
    pub async fn draining(&self) {
        self.drain.cancelled().await;
    }

    /// Resolves when shutdown is forced.
    pub async fn forced(&self) {
        self.force.cancelled().await;
    }

    /// Runs `drain` to completion, unless `grace` passes or shutdown is forced first.
    /// Returns how the drain ended.
    pub async fn drain_within<F: Future<Output = ()>>(
        &self,
        grace: Duration,
        drain: F,
    ) -> DrainOutcome {
        tokio::select! {
            () = drain => DrainOutcome::Completed,
            () = tokio::time::sleep(grace) => DrainOutcome::TimedOut,
            () = self.forced() => DrainOutcome::Forced,
        }
    }
}

/// How [`Shutdown::drain_within`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DrainOutcome {
    /// Everything in flight finished.
    Completed,
    /// The grace period ran out first.
    TimedOut,
    /// A second signal arrived first.
    Forced,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn drain_completes_times_out_or_is_forced() {
        let shutdown = Shutdown::new();
        assert!(!shutdown.is_draining());
        shutdown.trigger();
        assert!(shutdown.is_draining() && !shutdown.is_forced());
        shutdown.draining().await;

        let done = shutdown
            .drain_within(Duration::from_secs(5), async {})
            .await;
        assert_eq!(done, DrainOutcome::Completed);

        let slow = shutdown
            .drain_within(Duration::from_millis(20), std::future::pending())
            .await;
        assert_eq!(slow, DrainOutcome::TimedOut);

        let forcer = shutdown.clone();
        tokio::spawn(async move { forcer.force() });
        let forced = shutdown
            .drain_within(Duration::from_secs(30), std::future::pending())
            .await;
        assert_eq!(forced, DrainOutcome::Forced);
        assert!(shutdown.is_forced());
    }
}
