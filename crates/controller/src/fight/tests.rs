use super::*;

fn params() -> FightParams {
    FightParams {
        threshold: 3,
        window: Duration::from_secs(60),
        initial_backoff: Duration::from_secs(10),
        max_backoff: Duration::from_secs(40),
    }
}

#[test]
fn repeated_identical_writes_become_a_fight_with_growing_backoff() {
    let mut guard = FightGuard::new(params());
    let t0 = Instant::now();
    let v = Some("ours".to_owned());
    assert_eq!(guard.written("cm/key", v.clone(), t0), Observation::Normal);
    assert_eq!(
        guard.written("cm/key", v.clone(), t0 + Duration::from_secs(1)),
        Observation::Reverted { count: 1 }
    );
    assert_eq!(
        guard.written("cm/key", v.clone(), t0 + Duration::from_secs(2)),
        Observation::Reverted { count: 2 }
    );
    let third = guard.written("cm/key", v.clone(), t0 + Duration::from_secs(3));
    assert_eq!(
        third,
        Observation::Fight {
            count: 3,
            backoff: Duration::from_secs(10)
        }
    );
    assert!(matches!(
        guard.decide("cm/key", t0 + Duration::from_secs(5)),
        Decision::BackedOff(_)
    ));
    assert_eq!(
        guard.decide("cm/key", t0 + Duration::from_secs(14)),
        Decision::Write
    );
    let fourth = guard.written("cm/key", v.clone(), t0 + Duration::from_secs(14));
    assert_eq!(
        fourth,
        Observation::Fight {
            count: 4,
            backoff: Duration::from_secs(20)
        }
    );
    let t = t0 + Duration::from_secs(40);
    assert_eq!(
        guard.written("cm/key", v.clone(), t),
        Observation::Fight {
            count: 5,
            backoff: Duration::from_secs(40)
        }
    );
    assert_eq!(
        guard.written("cm/key", v, t + Duration::from_secs(10)),
        Observation::Fight {
            count: 6,
            backoff: Duration::from_secs(40)
        },
        "the backoff is capped"
    );
}

#[test]
fn a_new_value_or_a_calm_window_ends_the_fight() {
    let mut guard = FightGuard::new(params());
    let t0 = Instant::now();
    for i in 0..4 {
        guard.written("cm/key", Some("a".into()), t0 + Duration::from_secs(i));
    }
    assert!(guard.in_fight());
    assert!(!guard.held("cm/key", t0 + Duration::from_secs(30)));
    assert!(guard.held("cm/key", t0 + Duration::from_secs(100)));
    assert!(!guard.in_fight());
    for i in 0..4 {
        guard.written(
            "cm/key",
            Some("a".into()),
            t0 + Duration::from_secs(200 + i),
        );
    }
    assert!(guard.in_fight());
    assert_eq!(
        guard.written("cm/key", Some("b".into()), t0 + Duration::from_secs(205)),
        Observation::Normal
    );
    assert!(!guard.in_fight());
}

#[test]
fn targets_under_a_prefix_take_its_settings_and_stay_apart_from_the_others() {
    let short = FightParams {
        window: Duration::from_secs(5),
        ..params()
    };
    let mut fights = Fights::new(params()).with_prefix("ipMode ", short);
    assert_eq!(
        fights.params_of("ipMode Service a/b").window,
        Duration::from_secs(5)
    );
    assert_eq!(
        fights.params_of("Service a/b").window,
        Duration::from_secs(60)
    );
    let t0 = Instant::now();
    let v = Some("Proxy".to_owned());
    // Reverts 10 s apart: outside the prefix's 5 s window, never a fight there; within the
    // default 60 s window, a fight on the third.
    for target in ["ipMode Service a/b", "Service a/b"] {
        fights.written(target, v.clone(), t0);
    }
    let mut last = Vec::new();
    for n in 1..=3u64 {
        let at = t0 + Duration::from_secs(10 * n);
        last = ["ipMode Service a/b", "Service a/b"]
            .map(|target| fights.written(target, v.clone(), at))
            .to_vec();
    }
    assert_eq!(last[0], Observation::Reverted { count: 1 });
    assert!(matches!(last[1], Observation::Fight { count: 3, .. }));
    assert!(!fights.in_fight("ipMode "));
    assert!(fights.in_fight("Service "));
}
