//! A route table source that follows a JSON file.
//!
//! The file is read again every poll interval and on SIGHUP, and compared by content: a
//! Kubernetes ConfigMap volume updates by swapping a symlink, so neither the inode nor the
//! path's mtime can be trusted. A file that does not parse keeps the previous table in force.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::watch;

use crate::routes::RouteTable;
use crate::{Error, ProxyMetrics};

/// A routes file and the content last read from it.
#[derive(Debug)]
pub struct RoutesFile {
    path: PathBuf,
    last: Vec<u8>,
}

impl RoutesFile {
    /// Reads and parses the file.
    ///
    /// # Errors
    /// [`Error::ReadRoutes`], [`Error::ParseRoutes`] or [`Error::InvalidRoutes`]; the message
    /// names the file.
    pub fn load(path: &Path) -> Result<(Self, RouteTable), Error> {
        let content = std::fs::read(path).map_err(|source| Error::ReadRoutes {
            path: path.to_owned(),
            source,
        })?;
        let table = parse(path, &content)?;
        Ok((
            Self {
                path: path.to_owned(),
                last: content,
            },
            table,
        ))
    }

    /// Starts following the file: every new valid table is sent to `routes`, until all
    /// receivers are gone. Reads every `interval` and on SIGHUP (the handler is installed before
    /// this returns, so a SIGHUP from then on never kills the process). Invalid content is
    /// logged and counted in `metrics`, once per distinct content. Must be called inside a
    /// tokio runtime.
    pub fn spawn(
        self,
        interval: Duration,
        routes: watch::Sender<RouteTable>,
        metrics: ProxyMetrics,
    ) -> tokio::task::JoinHandle<()> {
        use tokio::signal::unix::{SignalKind, signal};
        let hangup = signal(SignalKind::hangup())
            .inspect_err(|err| {
                tracing::warn!(error = %err, "cannot listen for SIGHUP; polling the routes file only");
            })
            .ok();
        // The file was read by `load`: the first poll is one interval from now. (An interval's
        // first tick is immediate, and the task may first run only after a change made since
        // the proxy reported ready, which must wait for its SIGHUP or poll.)
        let tick = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
        tokio::spawn(self.follow(tick, hangup, routes, metrics))
    }

    async fn follow(
        mut self,
        mut tick: tokio::time::Interval,
        mut hangup: Option<tokio::signal::unix::Signal>,
        routes: watch::Sender<RouteTable>,
        metrics: ProxyMetrics,
    ) {
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                Some(()) = async { match hangup.as_mut() { Some(h) => h.recv().await, None => std::future::pending().await } } => {
                    tracing::info!(path = %self.path.display(), "SIGHUP: reading the routes file");
                }
                () = routes.closed() => return,
            }
            let content = match tokio::fs::read(&self.path).await {
                Ok(content) => content,
                Err(err) => {
                    tracing::debug!(path = %self.path.display(), error = %err, "cannot read the routes file; keeping the current routes");
                    continue;
                }
            };
            if content == self.last {
                continue;
            }
            match parse(&self.path, &content) {
                Ok(table) => {
                    tracing::info!(path = %self.path.display(), routes = table.len(), "routes file changed");
                    routes.send_if_modified(|current| {
                        let changed = *current != table;
                        *current = table;
                        changed
                    });
                }
                Err(err) => {
                    metrics.route_error();
                    tracing::error!(error = %err, "routes file ignored; keeping the current routes");
                }
            }
            self.last = content;
        }
    }
}

fn parse(path: &Path, content: &[u8]) -> Result<RouteTable, Error> {
    RouteTable::from_json(content).map_err(|err| match err {
        Error::ParseRoutes(why) => Error::ParseRoutes(format!("{}: {why}", path.display())),
        Error::InvalidRoutes(why) => Error::InvalidRoutes(format!("{}: {why}", path.display())),
        other => other,
    })
}
