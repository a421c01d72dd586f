//! replay(log(ops)) == live state: random broker workloads (durable and transient queues and
//! exchanges, bindings, persistent and transient publishes with and without TTLs, gets, acks,
//! rejects, consumers, purges, deletes, policies, clock advances with expiry) are logged through
//! a `Store` on a simulated disk; the store is closed, the power cut, and the broker recovered
//! from the log must hold exactly the live broker's durable state (S-DUR-1, S-DUR-2, S-DUR-5).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test: a failed step is a failed test"
)]

use crate::store_common;

use proptest::prelude::*;
use store_common::{Driver, Op, log, op, open, replay, setup};
use wharf_wal::SimStorage;

fn run_workload(seed: u64, ops: &[Op]) {
    let sim = SimStorage::new(seed);
    let (store, fresh, summary) = open(&sim).unwrap();
    assert_eq!(summary.events, 0);
    assert_eq!(fresh.durable_state(), Driver::new().broker.durable_state());
    let mut live = Driver::new();
    for op in setup().iter().chain(ops) {
        let events = live.apply(op);
        log(&store, &events).unwrap();
    }
    let logged = live.events.len() as u64;
    store.close().unwrap();
    // Everything was made durable by close: a power loss now loses nothing.
    let sim = sim.power_loss();
    let (store, mut recovered, summary) = open(&sim).unwrap();
    assert_eq!(summary.events, logged);
    assert_eq!(summary.torn_tail_bytes, 0);
    recovered.check_invariants();
    let want = live.broker.durable_state();
    // The model alone (no store) must agree first; then the store must add nothing.
    assert_eq!(replay(&live.events).durable_state(), want, "Broker::apply");
    assert_eq!(recovered.durable_state(), want, "store replay");

    // End recovery, log what it did, and recover once more: the log continues correctly.
    let end = recovered.recovered(live.now_ms + 1);
    recovered.check_invariants();
    store
        .wait_durable(log(&store, &end.events).unwrap())
        .unwrap();
    let after = recovered.durable_state();
    drop(store);
    let sim = sim.power_loss();
    let (_store, again, _) = open(&sim).unwrap();
    assert_eq!(again.durable_state(), after, "second recovery");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn s_dur_1_2_replay_of_logged_events_equals_live_durable_state(
        seed in any::<u64>(),
        ops in prop::collection::vec(op(), 1..80),
    ) {
        run_workload(seed, &ops);
    }
}
