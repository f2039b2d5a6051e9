//! The HPA rule on hand-computed cases.

use routerlab_core::testing::{self, EndpointsBuilder, create_scaler};
use routerlab_core::{Pool, Scaler, Tick};

use super::HpaScaler;

/// A pool of `ready` serving endpoints with `starting` more, at most 20.
fn pool(endpoints: &EndpointsBuilder, ready: u32, starting: u32) -> Pool<'_> {
    Pool {
        ready,
        starting,
        max_endpoints: 20,
        ..testing::pool(endpoints)
    }
}

fn loaded(n: usize, running: u64) -> EndpointsBuilder {
    (0..n).fold(EndpointsBuilder::new(n), |b, pos| b.running(pos, running))
}

fn decide(hpa: &mut HpaScaler, now_s: u64, endpoints: &EndpointsBuilder, ready: u32) -> u32 {
    let tick = Tick {
        now_ns: now_s * 1_000_000_000,
        interval_ns: 15_000_000_000,
        pools: vec![pool(endpoints, ready, 0)],
    };
    let mut desired = [ready];
    hpa.scale(&tick, &mut desired).unwrap();
    desired[0]
}

#[test]
fn a_step_in_load_scales_as_the_hpa_documents() {
    let mut hpa: HpaScaler = create_scaler("{metric: running, target: 10}").unwrap();
    // 2 endpoints at 10 each: on target.
    assert_eq!(decide(&mut hpa, 0, &loaded(2, 10), 2), 2);
    // Within the tolerance (10.9 / 10 = 1.09): no change.
    let near = EndpointsBuilder::new(2).running(0, 11).running(1, 10);
    assert_eq!(decide(&mut hpa, 15, &near, 2), 2);
    // A step to 35 each: ceil(3.5 × 2) = 7, but at most max(2 × 2, 2 + 4) = 6 per 15 s.
    assert_eq!(decide(&mut hpa, 30, &loaded(2, 35), 2), 6);
    // 15 s later still loaded (6 × 35 ⇒ ratio 3.5 ⇒ 21), from the period's start of 6:
    // at most max(12, 10) = 12.
    assert_eq!(decide(&mut hpa, 45, &loaded(6, 35), 6), 12);
    // The load falls to 1 each on 12: 2 recommended, but the down window (300 s) holds the
    // highest recent recommendation (21 is capped by `current` 12): stays 12.
    assert_eq!(decide(&mut hpa, 60, &loaded(12, 1), 12), 12);
    // 301 s after the last high recommendation (at 45 s) the window has let go.
    assert_eq!(decide(&mut hpa, 346, &loaded(12, 1), 12), 2);
}

#[test]
fn a_starting_endpoint_counts_as_idle_on_a_scale_up() {
    let hpa: HpaScaler = create_scaler("{metric: running, target: 10}").unwrap();
    let endpoints = loaded(2, 12);
    // 24 over 2 ready is 1.2 (out of tolerance), but over 3 with one starting 0.8: hold.
    let tick = Tick {
        now_ns: 0,
        interval_ns: 15_000_000_000,
        pools: vec![pool(&endpoints, 2, 1)],
    };
    let mut hpa = hpa;
    let mut desired = [3];
    hpa.scale(&tick, &mut desired).unwrap();
    assert_eq!(desired, [3]);
}

#[test]
fn bad_settings_are_refused_by_name() {
    for (config, key) in [
        ("{target: 0}", "target"),
        ("{tolerance: 1.5}", "tolerance"),
        ("{metric: gpu}", "metric"),
        ("{scale_up_period_s: 0}", "scale_up_period_s"),
    ] {
        let err = create_scaler::<HpaScaler>(config).err().unwrap();
        assert!(err.contains(key), "{config}: {err}");
    }
}
