//! The one duration format of every `hairpin` flag and environment variable.
//!
//! Parsing is humantime's (maintained, widely used): it reads the Go/Kubernetes form users
//! know from kubectl and manifests (`300ms`, `1m30s`, `1.5s`, `2h`), spaced units
//! (`1m 30s`) and long unit names (`5min`, `2hours`). A bare number is seconds (`30`, `2.5`),
//! as the older flags took it. Negative values and overflow are errors.

use std::time::Duration;

/// What every duration error says is accepted.
const EXPECTED: &str =
    "expected a duration such as 500ms, 30s, 1m30s, 1.5h, or a number of seconds";

/// Parses a duration (see the module documentation).
///
/// # Errors
/// A message naming the value and what is accepted; clap prefixes the flag.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let trimmed = text.trim();
    if !trimmed.is_empty() && trimmed.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        let seconds: f64 = trimmed
            .parse()
            .map_err(|_| format!("invalid duration {text:?}: {EXPECTED}"))?;
        return Duration::try_from_secs_f64(seconds)
            .map_err(|_| format!("invalid duration {text:?}: too large"));
    }
    humantime::parse_duration(trimmed).map_err(|err| match err {
        humantime::DurationError::NumberOverflow => {
            format!("invalid duration {text:?}: too large")
        }
        _ => format!("invalid duration {text:?}: {EXPECTED}"),
    })
}

/// [`parse_duration`], for durations that must not be zero (intervals, timeouts).
///
/// # Errors
/// As [`parse_duration`], and for zero.
pub fn parse_positive_duration(text: &str) -> Result<Duration, String> {
    let duration = parse_duration(text)?;
    if duration.is_zero() {
        return Err(format!("invalid duration {text:?}: must be more than zero"));
    }
    Ok(duration)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_style_and_spaced_forms_and_bare_seconds() {
        let ms = Duration::from_millis;
        for (text, expected) in [
            ("500ms", ms(500)),
            ("5s", ms(5_000)),
            ("2m", ms(120_000)),
            ("1h", ms(3_600_000)),
            ("1m30s", ms(90_000)),
            ("1m 30s", ms(90_000)),
            ("1h2m3s", ms(3_723_000)),
            ("1.5s", ms(1_500)),
            ("1.5h", ms(5_400_000)),
            ("2.5", ms(2_500)),
            ("30", ms(30_000)),
            ("0", ms(0)),
            ("250us", Duration::from_micros(250)),
            (" 10s ", ms(10_000)),
        ] {
            assert_eq!(parse_duration(text), Ok(expected), "{text:?}");
        }
    }

    #[test]
    fn bad_values_say_what_is_accepted() {
        for bad in ["", "s", "5x", "-1s", "1..5s", "5 parsecs", "1m30", "."] {
            let err = parse_duration(bad).unwrap_err();
            assert!(err.contains(&format!("{bad:?}")), "{bad:?}: {err}");
            assert!(err.contains("1m30s"), "{bad:?}: {err}");
        }
        for huge in ["9999999999999999h", "99999999999999999999999"] {
            let err = parse_duration(huge).unwrap_err();
            assert!(err.contains("too large"), "{huge}: {err}");
        }
    }

    #[test]
    fn zero_is_refused_where_a_positive_duration_is_needed() {
        assert!(
            parse_positive_duration("0s")
                .unwrap_err()
                .contains("more than zero")
        );
        assert_eq!(parse_positive_duration("1ms"), Ok(Duration::from_millis(1)));
    }
}
