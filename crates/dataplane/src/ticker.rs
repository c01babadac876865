//! Coarse deadlines for the connect and idle timeouts: one ticker per worker instead of a
//! timer per connection.
//!
//! A tokio timer per connection costs a timer-wheel insertion and removal, and an insertion
//! that falls before the worker's next planned wake-up also makes the runtime write its own
//! eventfd to wake itself: with one request per connection, about half of all connections
//! paid that write, plus the event it raises (measured with `perf record -e
//! syscalls:sys_enter_write -g`). These timeouts need no such precision. Each worker runs one
//! ticker; a waiting connection registers with it (a list insertion, no syscall) and checks
//! its own deadline on each tick. A connect timeout fires at most one tick (an eighth of
//! it) late; idleness is noticed on ticks too, so an idle timeout fires at most two ticks
//! late. Half-closed connections watch a third tick, at an eighth of the half-close timeout,
//! so that the idle connections are not woken more often for their sake.

use std::future::Future;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::config::ProxyConfig;

/// The shortest and longest tick.
const MIN_PERIOD: Duration = Duration::from_millis(5);
const MAX_CONNECT_PERIOD: Duration = Duration::from_secs(1);
const MAX_IDLE_PERIOD: Duration = Duration::from_secs(10);

/// A worker's ticker: connections waiting for a connect or watching for idleness wait on it.
#[derive(Debug)]
pub(crate) struct Ticker {
    connect: Notify,
    idle: Notify,
    half_closed: Notify,
    period: Duration,
    idle_every: u32,
    half_closed_every: u32,
    connect_timeout: Duration,
    idle_timeout: Duration,
    half_close_timeout: Duration,
}

impl Ticker {
    /// Ticks at an eighth of the connect timeout for connects, of the idle timeout for
    /// idleness and of the half-close timeout for half-closed connections (each within
    /// bounds).
    pub(crate) fn new(config: &ProxyConfig) -> Arc<Self> {
        let period = (config.connect_timeout / 8).clamp(MIN_PERIOD, MAX_CONNECT_PERIOD);
        // In connect ticks; the ratio is at most 2,000 (10 s over 5 ms), so the cast cannot
        // truncate.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let every = |timeout: Duration| {
            let own = (timeout / 8).clamp(MIN_PERIOD, MAX_IDLE_PERIOD);
            (own.as_secs_f64() / period.as_secs_f64()).round().max(1.0) as u32
        };
        Arc::new(Self {
            connect: Notify::new(),
            idle: Notify::new(),
            half_closed: Notify::new(),
            period,
            idle_every: every(config.idle_timeout),
            half_closed_every: every(config.half_close_timeout),
            connect_timeout: config.connect_timeout,
            idle_timeout: config.idle_timeout,
            half_close_timeout: config.half_close_timeout,
        })
    }

    /// The ticking task, to spawn on the runtime whose connections use this ticker. It ends
    /// once the ticker is dropped.
    pub(crate) fn run(self: &Arc<Self>) -> impl Future<Output = ()> + Send + 'static {
        let ticker: Weak<Self> = Arc::downgrade(self);
        let period = self.period;
        async move {
            let mut interval = tokio::time::interval(period);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut ticks = 0u32;
            loop {
                interval.tick().await;
                let Some(ticker) = ticker.upgrade() else {
                    return;
                };
                ticker.connect.notify_waiters();
                ticks = ticks.wrapping_add(1);
                if ticks.is_multiple_of(ticker.idle_every) {
                    ticker.idle.notify_waiters();
                }
                if ticks.is_multiple_of(ticker.half_closed_every) {
                    ticker.half_closed.notify_waiters();
                }
            }
        }
    }

    /// Runs `future` to its end, or gives up (`None`) on the first tick after `deadline`.
    pub(crate) async fn until<F: Future>(&self, deadline: Instant, future: F) -> Option<F::Output> {
        tokio::pin!(future);
        let tick = self.connect.notified();
        tokio::pin!(tick);
        tick.as_mut().enable();
        loop {
            tokio::select! {
                biased;
                output = &mut future => return Some(output),
                () = &mut tick => {
                    tick.set(self.connect.notified());
                    tick.as_mut().enable();
                    if Instant::now() >= deadline {
                        return None;
                    }
                }
            }
        }
    }

    /// The connect timeout.
    pub(crate) fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// The idle timeout, or the half-close timeout for a half-closed connection.
    pub(crate) fn idle_timeout(&self, half_closed: bool) -> Duration {
        if half_closed {
            self.half_close_timeout
        } else {
            self.idle_timeout
        }
    }

    /// What connections watching for idleness wait on, or half-closed ones (pin and `enable`
    /// the `notified()` future before checking, so that no tick is missed).
    pub(crate) fn watch(&self, half_closed: bool) -> &Notify {
        if half_closed {
            &self.half_closed
        } else {
            &self.idle
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(connect_ms: u64, idle_ms: u64) -> ProxyConfig {
        ProxyConfig {
            connect_timeout: Duration::from_millis(connect_ms),
            idle_timeout: Duration::from_millis(idle_ms),
            ..ProxyConfig::default()
        }
    }

    #[test]
    fn ticks_at_an_eighth_of_each_timeout_within_bounds() {
        let default = Ticker::new(&ProxyConfig::default());
        // 5 s connect: 625 ms; 600 s idle: capped at 10 s, every 16th tick.
        assert_eq!(default.period, Duration::from_millis(625));
        assert_eq!(default.idle_every, 16);
        // 30 s half-close: 3.75 s, every 6th tick.
        assert_eq!(default.half_closed_every, 6);
        let tiny = Ticker::new(&config(1, 1));
        assert_eq!(tiny.period, MIN_PERIOD);
        assert_eq!(tiny.idle_every, 1);
        let slow = Ticker::new(&config(60_000, 3_600_000));
        assert_eq!(slow.period, MAX_CONNECT_PERIOD);
        assert_eq!(slow.idle_every, 10);
    }

    #[tokio::test]
    async fn until_returns_the_output_or_gives_up_after_the_deadline() {
        let ticker = Ticker::new(&config(80, 80));
        tokio::spawn(ticker.run());
        assert_eq!(
            ticker.until(Instant::now(), async { 7 }).await,
            Some(7),
            "a ready future wins even past its deadline"
        );
        let started = Instant::now();
        let deadline = started + Duration::from_millis(80);
        let gave_up = ticker.until(deadline, std::future::pending::<()>()).await;
        assert_eq!(gave_up, None);
        assert!(Instant::now() >= deadline, "never before the deadline");
    }

    #[tokio::test]
    async fn idle_watchers_are_woken_and_the_task_ends_with_the_ticker() {
        let ticker = Ticker::new(&config(40, 40));
        let task = tokio::spawn(ticker.run());
        for _ in 0..3 {
            tokio::time::timeout(Duration::from_secs(5), ticker.watch(false).notified())
                .await
                .expect("the idle tick comes");
        }
        drop(ticker);
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("the ticking task ends once its ticker is gone")
            .unwrap();
    }
}
