use super::*;

fn status(cure: &str, native: Option<&str>) -> HairpinStatus {
    HairpinStatus {
        cure: cure.into(),
        native_cure: native.map(Into::into),
        cure_reason: "why".into(),
        ..HairpinStatus::default()
    }
}

/// Each native progress gives its condition, and on the native cure `Ready` follows it.
#[test]
fn native_cure_condition_and_ready_per_progress() {
    for (cure, native, value, reason, ready) in [
        ("native", Some("proven"), Some(true), "Proven", Some(true)),
        ("native", Some("probing"), None, "Probing", None),
        ("native", Some("failed"), Some(false), "Failed", Some(false)),
        ("dns", Some("to-prove"), None, "ToProve", None),
        ("dns", Some("failed"), Some(false), "Failed", Some(false)),
        ("dns", None, Some(false), "NotEligible", Some(false)),
    ] {
        let status = status(cure, native);
        let part = native_cure(&status);
        assert_eq!(
            (part.value, part.reason.as_str()),
            (value, reason),
            "{native:?}"
        );
        assert_eq!(part.message, "why");
        assert_eq!(on_native(&status), cure == "native");
        assert_eq!(native_ready(&part).value, ready, "{native:?}");
    }
}
