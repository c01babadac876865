//! Bounded logging for events that a misbehaving peer can trigger at line rate (accept
//! failures, refused connections, bad headers): a few lines per window, then a count.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Lets `burst` events through per `window` and counts the rest.
#[derive(Debug)]
pub struct LogLimiter {
    burst: u32,
    window: Duration,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    window_start: Option<Instant>,
    emitted: u32,
    suppressed: u64,
}

impl LogLimiter {
    /// At most `burst` lines per `window`.
    pub fn new(burst: u32, window: Duration) -> Self {
        Self {
            burst,
            window,
            state: Mutex::new(State::default()),
        }
    }

    /// `Some(n)` when this event may be logged, `n` being how many were suppressed since the
    /// last one that was; `None` when it must not.
    pub fn check(&self) -> Option<u64> {
        let now = Instant::now();
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let expired = state
            .window_start
            .is_none_or(|start| now.duration_since(start) >= self.window);
        if expired {
            state.window_start = Some(now);
            state.emitted = 0;
        }
        if state.emitted < self.burst {
            state.emitted += 1;
            Some(std::mem::take(&mut state.suppressed))
        } else {
            state.suppressed += 1;
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lets_a_burst_through_then_counts() {
        let limiter = LogLimiter::new(2, Duration::from_millis(50));
        assert_eq!(limiter.check(), Some(0));
        assert_eq!(limiter.check(), Some(0));
        assert_eq!(limiter.check(), None);
        assert_eq!(limiter.check(), None);
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(limiter.check(), Some(2));
        assert_eq!(limiter.check(), Some(0));
    }
}
