//! The worker threads of `hairpin proxy`: one single-threaded tokio runtime per thread, handed
//! to [`crate::Proxy::with_shards`]. A connection stays on the thread that accepted it (each
//! route has one `SO_REUSEPORT` listener per worker), or on the one it was handed to.

use std::io;
use std::time::Duration;

/// Running worker threads, each with its own runtime.
#[derive(Debug)]
pub struct Shards {
    handles: Vec<tokio::runtime::Handle>,
    stop: tokio::sync::watch::Sender<bool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Shards {
    /// Starts `workers` threads (`hairpin-proxy-0`, ...), each running its runtime until
    /// [`Shards::stop`].
    pub fn start(workers: usize) -> io::Result<Self> {
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let mut handles = Vec::with_capacity(workers);
        let mut threads = Vec::with_capacity(workers);
        for i in 0..workers {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|err| {
                    io::Error::new(err.kind(), format!("cannot start a worker runtime: {err}"))
                })?;
            handles.push(runtime.handle().clone());
            let mut stopped = stopped.clone();
            let thread = std::thread::Builder::new()
                .name(format!("hairpin-proxy-{i}"))
                .spawn(move || {
                    runtime.block_on(async move {
                        let _ = stopped.wait_for(|stop| *stop).await;
                    });
                    runtime.shutdown_timeout(Duration::from_millis(100));
                })
                .map_err(|err| {
                    io::Error::new(err.kind(), format!("cannot start a worker thread: {err}"))
                })?;
            threads.push(thread);
        }
        Ok(Self {
            handles,
            stop,
            threads,
        })
    }

    /// The workers' runtimes, for [`crate::Proxy::with_shards`].
    pub fn handles(&self) -> Vec<tokio::runtime::Handle> {
        self.handles.clone()
    }

    /// Stops every worker (tasks still running on them are dropped after at most 100 ms) and
    /// waits for the threads to end.
    pub fn stop(self) {
        let _ = self.stop.send(true);
        for thread in self.threads {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_worker_runs_its_own_thread_until_stopped() {
        let shards = Shards::start(2).unwrap();
        let handles = shards.handles();
        assert_eq!(handles.len(), 2);
        let names: Vec<String> = handles
            .iter()
            .map(|handle| {
                let (tx, rx) = std::sync::mpsc::channel();
                drop(handle.spawn(async move {
                    let _ = tx.send(std::thread::current().name().map(str::to_owned));
                }));
                rx.recv().unwrap().unwrap()
            })
            .collect();
        assert_eq!(names, ["hairpin-proxy-0", "hairpin-proxy-1"]);
        shards.stop();
    }
}
