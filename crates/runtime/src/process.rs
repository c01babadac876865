//! Metrics every `hairpin` process exports next to its own: `hairpin_build_info` and the
//! standard `process_*` series (CPU, memory, file descriptors, start time).
//!
//! prometheus-client has no process collector of its own; the figures come from /proc through
//! the `procfs` crate, read at each scrape. Names follow Prometheus' client conventions, so
//! existing dashboards and alerts for `process_*` work unchanged.

use procfs::process::{LimitValue, Process};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric as _};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;

/// The version every crate of the workspace shares.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The commit the release workflow builds (`HAIRPIN_GIT_COMMIT` at compile time), if any.
pub const GIT_COMMIT: &str = match option_env!("HAIRPIN_GIT_COMMIT") {
    Some(commit) => commit,
    None => "unknown",
};

/// A registry holding `hairpin_build_info` and the process collector; the admin server
/// encodes it after the command's own registry.
pub fn standard_registry() -> Registry {
    let mut registry = Registry::default();
    registry.register(
        "hairpin_build",
        "The running hairpin build",
        Info::new(vec![
            ("version", VERSION),
            ("commit", GIT_COMMIT),
            ("arch", std::env::consts::ARCH),
        ]),
    );
    registry.register_collector(Box::new(ProcessCollector));
    registry
}

/// Reads /proc/self at each scrape; a figure /proc cannot give is left out, not faked.
#[derive(Debug)]
struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Ok(me) = Process::myself() else {
            return Ok(());
        };
        if let Ok(stat) = me.stat() {
            let ticks = procfs::ticks_per_second() as f64;
            let cpu = ConstCounter::new((stat.utime + stat.stime) as f64 / ticks);
            cpu.encode(encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds",
                None,
                cpu.metric_type(),
            )?)?;
            gauge(
                &mut encoder,
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                stat.rss.saturating_mul(procfs::page_size()),
            )?;
            gauge(
                &mut encoder,
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes",
                stat.vsize,
            )?;
            if let Ok(boot) = procfs::boot_time_secs() {
                let start = ConstGauge::new(boot as f64 + stat.starttime as f64 / ticks);
                start.encode(encoder.encode_descriptor(
                    "process_start_time_seconds",
                    "Start time of the process since unix epoch in seconds",
                    None,
                    start.metric_type(),
                )?)?;
            }
        }
        if let Ok(count) = me.fd_count() {
            gauge(
                &mut encoder,
                "process_open_fds",
                "Number of open file descriptors",
                count as u64,
            )?;
        }
        if let Ok(limits) = me.limits()
            && let LimitValue::Value(max) = limits.max_open_files.soft_limit
        {
            gauge(
                &mut encoder,
                "process_max_fds",
                "Maximum number of open file descriptors",
                max,
            )?;
        }
        Ok(())
    }
}

fn gauge(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: u64,
) -> Result<(), std::fmt::Error> {
    let gauge = ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX));
    gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scrape() -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &standard_registry()).unwrap();
        text
    }

    fn value(text: &str, name: &str) -> f64 {
        text.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("{name} missing from:\n{text}"))
            .parse()
            .unwrap()
    }

    #[test]
    fn build_info_names_this_version() {
        let text = scrape();
        assert!(
            text.contains(&format!(
                "hairpin_build_info{{version=\"{VERSION}\",commit=\"{GIT_COMMIT}\",arch=\"{}\"}} 1",
                std::env::consts::ARCH
            )),
            "{text}"
        );
    }

    #[test]
    fn process_metrics_follow_the_process() {
        let before = scrape();
        let files: Vec<_> = (0..40)
            .map(|_| std::fs::File::open("/proc/self/stat").unwrap())
            .collect();
        let after = scrape();
        let opened = value(&after, "process_open_fds") - value(&before, "process_open_fds");
        // Other tests of this binary open and close files concurrently: allow some slack.
        assert!(opened >= 30.0, "40 files opened, fds grew by {opened}");
        drop(files);
        assert!(value(&after, "process_resident_memory_bytes") > 1_000_000.0);
        assert!(value(&after, "process_max_fds") >= value(&after, "process_open_fds"));
        let start = value(&after, "process_start_time_seconds");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert!(
            start <= now + 1.0 && start > now - 3600.0,
            "start {start}, now {now}"
        );
        // Burn some CPU: the counter must move.
        let cpu_before = value(&after, "process_cpu_seconds_total");
        let mut x = 0u64;
        let deadline = std::time::Instant::now() + std::time::Duration::from_millis(300);
        while std::time::Instant::now() < deadline {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let cpu_after = value(&scrape(), "process_cpu_seconds_total");
        assert!(cpu_after > cpu_before, "{cpu_before} -> {cpu_after}");
    }
}
