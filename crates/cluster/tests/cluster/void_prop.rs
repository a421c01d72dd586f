//! S-CLU-60, fuzz-style: a committed entry's events, whatever they are, apply whole or not at
//! all, and never panic the state machine. The batches come from live brokers that drifted
//! apart: each ran its own random commands, so the events have real shapes, and some fit the
//! committed state while others name queues, messages or exchanges it lacks.

use openraft::storage::RaftStateMachine;
use openraft::{CommittedLeaderId, EntryPayload};
use proptest::prelude::*;
use wharf_broker::{Broker, Command, Event};
use wharf_cluster::{Entry, LogId, Proposal, QueueStateMachine};

use crate::commands::{bind, declare_classic, declare_quorum, get, open, publish, publish_to};

const QUEUES: [&str; 3] = ["a", "b", "c"];

/// A command on one of a few queues, so that two brokers' commands overlap.
fn command() -> impl Strategy<Value = Command> {
    let queue = prop::sample::select(QUEUES.to_vec());
    prop_oneof![
        queue.clone().prop_map(|q| declare_quorum(q, None)),
        queue.clone().prop_map(declare_classic),
        queue.clone().prop_map(|q| publish(q, "x", None)),
        queue.clone().prop_map(|q| bind(q, "amq.fanout")),
        Just(publish_to("amq.fanout", "", "fan", None)),
        queue.clone().prop_map(get),
        queue.prop_map(|q| Command::QueueDelete {
            vhost: "/".into(),
            queue: q.into(),
            if_unused: false,
            if_empty: false,
            owner: None,
        }),
    ]
}

/// The durable events `cmds` produce on `broker` at `now_ms` (refused commands produce none).
fn run(broker: &mut Broker, cmds: &[Command], now_ms: u64) -> Vec<Event> {
    let mut events = Vec::new();
    for cmd in open().into_iter().chain(cmds.iter().cloned()) {
        if let Ok(out) = broker.handle(cmd, now_ms) {
            events.extend(out.events);
        }
    }
    events
}

fn entry(index: u64, events: Vec<Event>) -> Entry {
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
        payload: EntryPayload::Normal(Proposal {
            now_ms: 1_000 + index,
            events: events.into(),
            origin: None,
        }),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// S-CLU-60: the committed state gets entry 1 (commands `committed` decided); entry 2 is a
    /// batch a drifted broker decided (the same `committed` commands, then `drifted` ones whose
    /// events the group never got, then `batch` commands), its events
    /// possibly dropped or reordered (`keep`, `rotate`). Entry 2 applies whole exactly when each
    /// of its events fits in turn; otherwise it is voided and the state is as before it. An
    /// entry after it (entry 3, the first broker's next decisions) applies as if entry 2
    /// never existed, and no apply panics.
    #[test]
    fn s_clu_60_an_entry_applies_whole_or_not_at_all(
        committed in prop::collection::vec(command(), 0..8),
        drifted in prop::collection::vec(command(), 0..8),
        batch in prop::collection::vec(command(), 1..6),
        next in prop::collection::vec(command(), 0..4),
        keep in prop::collection::vec(any::<bool>(), 0..12),
        rotate in 0usize..6,
    ) {
        let mut first = Broker::new();
        let setup = run(&mut first, &committed, 1_000);
        let mut other = Broker::new();
        run(&mut other, &committed, 1_000);
        run(&mut other, &drifted, 1_000);
        let mut events: Vec<Event> = run(&mut other, &batch, 2_000)
            .into_iter()
            .enumerate()
            .filter(|(i, _)| keep.get(*i).copied().unwrap_or(true))
            .map(|(_, e)| e)
            .collect();
        if !events.is_empty() {
            let by = rotate % events.len();
            events.rotate_left(by);
        }
        let after = run(&mut first, &next, 3_000);

        // What applying entry 2 event by event gives, on a copy of the committed state.
        let mut reference = Broker::new();
        for e in &setup {
            reference.apply(e).unwrap();
        }
        let before = reference.durable_state();
        let fits = events.iter().all(|e| reference.apply(e).is_ok());

        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let mut machine = QueueStateMachine::new();
        let applied = rt
            .block_on(machine.apply(vec![entry(1, setup.clone()), entry(2, events.clone())]))
            .unwrap();
        prop_assert!(!applied[0].voided);
        prop_assert_eq!(applied[1].voided, !fits);
        let state = machine.with(wharf_cluster::Machine::durable_state);
        if fits {
            prop_assert_eq!(applied[1].events, events.len());
            prop_assert_eq!(state, reference.durable_state());
        } else {
            prop_assert_eq!(applied[1].events, 0);
            prop_assert_eq!(&state, &before, "nothing of a voided entry stays");
            let third = rt.block_on(machine.apply(vec![entry(3, after.clone())])).unwrap();
            let mut without = Broker::new();
            let fits_without = setup.iter().chain(&after).all(|e| without.apply(e).is_ok());
            prop_assert!(fits_without, "the first broker's own decisions fit its state");
            prop_assert!(!third[0].voided);
            prop_assert_eq!(
                machine.with(wharf_cluster::Machine::durable_state),
                without.durable_state()
            );
        }
        prop_assert_eq!(machine.with(wharf_cluster::Machine::voided), u64::from(!fits));
    }
}
