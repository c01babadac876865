//! The one start-up path of every command that needs an async runtime: logging, the file
//! descriptor limit, the tokio runtime, shutdown signals, the admin server and the API client,
//! in that order.
//!
//! ```text
//! Builder::new().with_log(&log).with_admin(&admin).with_client(connect).build()?
//!     .run(|started| async move { /* register metrics, serve admin, do the work */ })
//! ```
//!
//! [`Builder::build`] does what needs no async runtime (logging, the descriptor limit);
//! [`Runtime::run`] starts the tokio runtime, installs the signal handlers, binds the admin
//! address (so a busy port is reported before anything else starts), builds the client and
//! then runs the command's own work with what was started ([`Started`]). The admin server is
//! bound but not served until the command has registered its metrics and readiness conditions
//! ([`Admin::serve`]), so `/readyz` never answers ready before the conditions exist.
//!
//! The one-shot commands (`plan`, `doctor`, `uninstall`) start the same way, with
//! [`OnSignal::Abort`]: Ctrl-C ends them at once instead of starting a drain.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::registry::Registry;
use tokio::task::JoinHandle;

use crate::admin::{AdminArgs, AdminError, AdminServer, Readiness, ReadyCondition};
use crate::logging::LogArgs;
use crate::shutdown::Shutdown;

/// A failure to start: nothing of the command's own work has run yet.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The log filter does not parse; the message names the flag.
    #[error("{0}")]
    Log(String),
    /// The tokio runtime could not be started.
    #[error("cannot start the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// The SIGTERM/SIGINT handlers could not be installed.
    #[error("cannot install signal handlers: {0}")]
    Signals(#[source] std::io::Error),
    /// The admin address could not be bound (in use, not local, not permitted).
    #[error(transparent)]
    Admin(#[from] AdminError),
    /// The API client could not be built (no kubeconfig, a bad context...).
    #[error(transparent)]
    Client(Box<dyn std::error::Error + Send + Sync>),
}

/// How many threads the tokio runtime has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Threads {
    /// Everything on the calling thread; at most `max_blocking` threads for blocking work
    /// (tokio's default when `None`).
    Current {
        /// The blocking pool's size (name resolution, file reads).
        max_blocking: Option<usize>,
    },
    /// A pool of `workers` threads.
    Multi {
        /// Worker threads.
        workers: usize,
    },
}

/// What the first SIGTERM or SIGINT (Ctrl-C) does to the command.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnSignal {
    /// It starts the drain of [`Started::shutdown`] (the command finishes what is under way
    /// and exits); a second one forces it.
    #[default]
    Drain,
    /// It ends the process at once: no handler is installed, so the signal's default action
    /// applies, for a one-shot command that has nothing to finish (its
    /// [`Started::shutdown`] never drains).
    Abort,
}

/// The descriptors a command needs per connection, for [`crate::fdlimit::raise_and_report`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FdBudget {
    /// Descriptors per connection.
    pub per_connection: u64,
    /// Descriptors set aside besides [`crate::fdlimit::RESERVED`].
    pub also_reserved: u64,
    /// The command's connection cap.
    pub max_connections: u64,
    /// The flag that sets the cap, named in the warning when it is above the ceiling.
    pub flag: &'static str,
}

type Connect<C> = Box<dyn FnOnce() -> Pin<Box<dyn Future<Output = Result<C, BuildError>>>>>;

/// Collects what a command starts with; [`Builder::build`] checks it.
///
/// `C` is the client handed to the command (`()` without [`Builder::with_client`]), `A` the
/// admin server (`()` without [`Builder::with_admin`]).
pub struct Builder<C = (), A: AdminSlot = ()> {
    log: Option<LogArgs>,
    fds: Option<FdBudget>,
    threads: Threads,
    signals: OnSignal,
    admin: A::Addr,
    connect: Connect<C>,
    shutdown_timeout: Option<Duration>,
    on_exit: Option<Box<dyn FnOnce()>>,
}

/// A built start-up, ready to [`Runtime::run`] the command.
pub struct Runtime<C = (), A: AdminSlot = ()> {
    builder: Builder<C, A>,
}

/// What was started, handed to the command's work.
#[derive(Debug)]
pub struct Started<C = (), A = ()> {
    /// The drain (first signal) and force (second signal) of this process.
    pub shutdown: Shutdown,
    /// The command's metrics go here; [`Admin::serve`] serves them.
    pub registry: Registry,
    /// The API client ([`Builder::with_client`]).
    pub client: C,
    /// The bound admin server ([`Builder::with_admin`]).
    pub admin: A,
}

/// The bound, not yet serving, admin server with its readiness conditions.
#[derive(Debug)]
pub struct Admin {
    server: AdminServer,
    readiness: Readiness,
    shutdown: Shutdown,
}

/// The running admin server; dropping it stops serving.
#[derive(Debug)]
pub struct AdminTask(JoinHandle<()>);

/// How the admin slot of a [`Builder`] is filled: bound, or nothing.
pub trait AdminSlot: Sized {
    /// What [`Builder::with_admin`] sets: the address for [`Admin`], nothing for `()`.
    type Addr: Copy + std::fmt::Debug;

    /// Binds `addr`.
    fn bind(
        addr: Self::Addr,
        shutdown: &Shutdown,
    ) -> impl Future<Output = Result<Self, BuildError>>;
}

// === impl Builder ===

impl Builder {
    /// Nothing configured: a current-thread runtime and signal handlers only.
    pub fn new() -> Self {
        Self {
            log: None,
            fds: None,
            threads: Threads::Current { max_blocking: None },
            signals: OnSignal::Drain,
            admin: (),
            connect: Box::new(|| Box::pin(async { Ok(()) })),
            shutdown_timeout: None,
            on_exit: None,
        }
    }
}

impl Default for Builder {
    fn default() -> Self {
        Self::new()
    }
}

impl<A: AdminSlot> Builder<(), A> {
    /// Builds the API client with `connect` once the admin address is bound.
    pub fn with_client<C, E, F>(self, connect: F) -> Builder<C, A>
    where
        C: 'static,
        E: std::error::Error + Send + Sync + 'static,
        F: Future<Output = Result<C, E>> + 'static,
    {
        self.with_connect(Box::new(move || {
            Box::pin(async move {
                connect
                    .await
                    .map_err(|err| BuildError::Client(Box::new(err)))
            })
        }))
    }

    /// As [`Builder::with_client`] when `connect` is given; the command gets `None` otherwise.
    pub fn with_optional_client<C, E, F>(self, connect: Option<F>) -> Builder<Option<C>, A>
    where
        C: 'static,
        E: std::error::Error + Send + Sync + 'static,
        F: Future<Output = Result<C, E>> + 'static,
    {
        self.with_client(async move {
            match connect {
                Some(connect) => connect.await.map(Some),
                None => Ok(None),
            }
        })
    }

    fn with_connect<C>(self, connect: Connect<C>) -> Builder<C, A> {
        Builder {
            log: self.log,
            fds: self.fds,
            threads: self.threads,
            signals: self.signals,
            admin: self.admin,
            connect,
            shutdown_timeout: self.shutdown_timeout,
            on_exit: self.on_exit,
        }
    }
}

impl<C> Builder<C, ()> {
    /// Serves `/livez`, `/readyz` and `/metrics` on the admin address.
    pub fn with_admin(self, args: &AdminArgs) -> Builder<C, Admin> {
        Builder {
            log: self.log,
            fds: self.fds,
            threads: self.threads,
            signals: self.signals,
            admin: args.admin_addr,
            connect: self.connect,
            shutdown_timeout: self.shutdown_timeout,
            on_exit: self.on_exit,
        }
    }
}

impl<C, A: AdminSlot> Builder<C, A> {
    /// Logs to stderr as `args` say ([`crate::logging::init`]).
    #[must_use]
    pub fn with_log(mut self, args: &LogArgs) -> Self {
        self.log = Some(args.clone());
        self
    }

    /// Raises the descriptor limit and reports the connection ceiling it gives.
    #[must_use]
    pub fn with_fd_budget(mut self, budget: FdBudget) -> Self {
        self.fds = Some(budget);
        self
    }

    /// The tokio runtime's threads (default: the current thread, tokio's blocking pool).
    #[must_use]
    pub fn with_threads(mut self, threads: Threads) -> Self {
        self.threads = threads;
        self
    }

    /// What the first SIGTERM or SIGINT does (default: [`OnSignal::Drain`]).
    #[must_use]
    pub fn with_signals(mut self, signals: OnSignal) -> Self {
        self.signals = signals;
        self
    }

    /// At exit, waits at most `timeout` for tasks still running (default: waits for them).
    #[must_use]
    pub fn with_shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.shutdown_timeout = Some(timeout);
        self
    }

    /// Installs logging and raises the descriptor limit.
    ///
    /// # Errors
    /// [`BuildError::Log`] for a log filter that does not parse.
    pub fn build(self) -> Result<Runtime<C, A>, BuildError> {
        if let Some(log) = &self.log {
            crate::logging::init(log).map_err(BuildError::Log)?;
        }
        if let Some(fds) = self.fds {
            crate::fdlimit::raise_and_report(
                fds.per_connection,
                fds.also_reserved,
                fds.max_connections,
                fds.flag,
            );
        }
        Ok(Runtime { builder: self })
    }
}

impl<C, A: AdminSlot> std::fmt::Debug for Builder<C, A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Builder")
            .field("log", &self.log)
            .field("fds", &self.fds)
            .field("threads", &self.threads)
            .field("signals", &self.signals)
            .field("admin", &self.admin)
            .field("shutdown_timeout", &self.shutdown_timeout)
            .finish_non_exhaustive()
    }
}

// === impl Runtime ===

impl<C, A: AdminSlot> Runtime<C, A> {
    /// Runs `on_exit` once the command's work has returned, before the runtime shuts down
    /// (for what was started between [`Builder::build`] and [`Runtime::run`]).
    #[must_use]
    pub fn on_exit(mut self, on_exit: impl FnOnce() + 'static) -> Self {
        self.builder.on_exit = Some(Box::new(on_exit));
        self
    }

    /// Starts the tokio runtime, the signal handlers (unless [`OnSignal::Abort`]), the admin
    /// server (bound) and the client, then runs `main` with them to completion.
    ///
    /// # Errors
    /// A [`BuildError`] (converted into `E`) when something could not start, before `main`
    /// runs; otherwise what `main` returns.
    pub fn run<T, E, F, Fut>(self, main: F) -> Result<T, E>
    where
        E: From<BuildError>,
        F: FnOnce(Started<C, A>) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let Builder {
            threads,
            signals,
            admin,
            connect,
            shutdown_timeout,
            on_exit,
            ..
        } = self.builder;
        let runtime = match threads {
            Threads::Current { max_blocking } => {
                let mut builder = tokio::runtime::Builder::new_current_thread();
                if let Some(max) = max_blocking {
                    builder.max_blocking_threads(max);
                }
                builder.enable_all().build()
            }
            Threads::Multi { workers } => tokio::runtime::Builder::new_multi_thread()
                .worker_threads(workers)
                .enable_all()
                .build(),
        }
        .map_err(BuildError::Runtime)?;
        let result = runtime.block_on(async move {
            let shutdown = match signals {
                OnSignal::Drain => Shutdown::from_signals().map_err(BuildError::Signals)?,
                OnSignal::Abort => Shutdown::new(),
            };
            let admin = A::bind(admin, &shutdown).await?;
            let client = connect().await?;
            let started = Started {
                shutdown,
                registry: Registry::default(),
                client,
                admin,
            };
            main(started).await
        });
        if let Some(on_exit) = on_exit {
            on_exit();
        }
        if let Some(timeout) = shutdown_timeout {
            runtime.shutdown_timeout(timeout);
        }
        result
    }
}

impl<C, A: AdminSlot> std::fmt::Debug for Runtime<C, A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("builder", &self.builder)
            .finish()
    }
}

// === impl Admin ===

impl Admin {
    /// The bound address (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.server.local_addr()
    }

    /// Adds a readiness condition, initially not met: `/readyz` answers 200 once all hold.
    pub fn condition(&self, name: &'static str) -> ReadyCondition {
        self.readiness.condition(name)
    }

    /// Serves `/livez`, `/readyz` and `/metrics` (`registry`'s, then the standard ones) until
    /// shutdown is forced or the returned task is dropped.
    pub fn serve(self, registry: Registry) -> AdminTask {
        AdminTask(tokio::spawn(self.server.serve(
            Arc::new(registry),
            self.readiness,
            self.shutdown,
        )))
    }
}

impl AdminSlot for Admin {
    type Addr = SocketAddr;

    async fn bind(addr: SocketAddr, shutdown: &Shutdown) -> Result<Self, BuildError> {
        Ok(Self {
            server: AdminServer::bind(addr).await?,
            readiness: Readiness::new(),
            shutdown: shutdown.clone(),
        })
    }
}

impl AdminSlot for () {
    type Addr = ();

    async fn bind((): (), _: &Shutdown) -> Result<Self, BuildError> {
        Ok(())
    }
}

// === impl AdminTask ===

impl Drop for AdminTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}
