//! When a checkpoint is the one in use (S-DUR-8): exactly once its rename is durable. Before
//! that it is not relied on (nothing it covers is deleted); from then on it is, whatever
//! becomes of the checkpoint it supersedes. Found by the simulation (seeds 126, 146 and 267 of
//! `wharf-sim`): the directory sync that makes the removal of the superseded checkpoint
//! durable failed, the new checkpoint (durable, complete) was reported as failed and never
//! read from, and the store kept reading messages from the one it had just removed.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test: a failed step is a failed test"
)]

use crate::store_common;

use std::sync::Arc;

use store_common::{CH, Driver, Op, log_for, open, setup};
use wharf_broker::{Broker, Command, Message};
use wharf_store::{Store, Ticket, checkpoint};
use wharf_wal::{Lsn, SimStorage, Storage};

const MESSAGES: usize = 6;

fn publish() -> Op {
    Op::Publish {
        exchange: Some(0),
        key: 0,
        persistent: true,
        expiration_ms: None,
        delay_ms: None,
        body_len: 700,
    }
}

/// Runs `ops` on `live` and `plain` (the same broker keeping everything in memory), logs
/// them, waits until durable and pages every durable message out of `live` (a budget of 0).
fn run(store: &Store, live: &mut Driver, plain: &mut Driver, ops: &[Op]) -> Ticket {
    let mut ticket = 0;
    for op in ops {
        let events = live.apply(op);
        plain.apply(op);
        ticket = ticket.max(log_for(store, &mut live.broker, &events).unwrap());
    }
    store.wait_durable(ticket).unwrap();
    live.broker.page_out(ticket, 0);
    ticket
}

/// Every ready message of `q0`, read back from disk where paged out.
fn queued(b: &Broker) -> Vec<(Arc<Message>, bool)> {
    b.ready_messages("/", "q0")
}

fn checkpoints(sim: &SimStorage) -> Vec<String> {
    let dir = store_common::store_config(false).dir;
    let mut names: Vec<String> = sim
        .list(&dir)
        .unwrap()
        .into_iter()
        .filter(|n| checkpoint::parse_file_name(n).is_some())
        .collect();
    names.sort();
    names
}

/// A store on a disk holding a checkpoint, reopened so that its queued messages are read back
/// from that checkpoint (recovery leaves every message's content on disk), with one more
/// message published after it: the live broker, and the same history kept in memory.
fn reopened_after_a_checkpoint(sim: &SimStorage) -> (Store, Driver, Driver, u64) {
    let (mut store, _, _) = open(sim).unwrap();
    let (mut live, mut plain) = (Driver::new(), Driver::new());
    live.broker.set_loader(store.loader());
    let mut ops = setup();
    ops.extend(std::iter::repeat_n(publish(), MESSAGES));
    run(&store, &mut live, &mut plain, &ops);
    let first = store
        .checkpoint_now(live.broker.snapshot())
        .unwrap()
        .unwrap();
    store.close().unwrap();
    let (store, recovered, _) = open(sim).unwrap();
    live.broker = recovered;
    for cmd in [
        Command::ConnectionOpen {
            conn: CH.conn,
            vhost: "/".into(),
        },
        Command::ChannelOpen { chan: CH },
    ] {
        live.run(cmd);
    }
    run(&store, &mut live, &mut plain, &[publish()]);
    (store, live, plain, first.lsn)
}

/// S-DUR-8: the directory sync after removing the superseded checkpoint fails. The new
/// checkpoint is durable and complete: it is the one in use (its Lsn is the store's, its
/// covered segments go), and every queued message is still read back.
#[test]
fn s_dur_8_a_checkpoint_is_in_use_once_its_rename_is_durable_whatever_becomes_of_the_old_one() {
    for seed in 0..4 {
        let sim = SimStorage::new(seed);
        let (mut store, live, plain, first) = reopened_after_a_checkpoint(&sim);
        assert_eq!(queued(&live.broker).len(), MESSAGES + 1);
        // The new checkpoint's file sync, its directory sync, then the directory sync that
        // makes the old one's removal durable: that one fails.
        sim.fail_sync_after(2);
        let second = store
            .checkpoint_now(live.broker.snapshot())
            .expect("a checkpoint whose rename is durable is done")
            .unwrap();
        assert!(second.lsn > first);
        assert_eq!(store.checkpoint_lsn(), Some(second.lsn));
        assert_eq!(checkpoints(&sim), [checkpoint::file_name(Lsn(second.lsn))]);
        assert_eq!(queued(&live.broker), queued(&plain.broker), "seed {seed}");
        assert_eq!(live.broker.storage_failure(), None);
        // And once more, and after a power loss: nothing was lost.
        store
            .checkpoint_now(live.broker.snapshot())
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        drop(store);
        let (_store, recovered, _) = open(&sim.power_loss()).unwrap();
        assert_eq!(recovered.durable_state(), plain.broker.durable_state());
        assert_eq!(queued(&recovered), queued(&plain.broker), "seed {seed}");
    }
}

/// S-DUR-8: the directory sync right after the rename fails. The new checkpoint may vanish
/// in a power loss, so it is not relied on: the store keeps the old one and every segment,
/// messages are read as before, and a power loss recovers everything either way.
#[test]
fn s_dur_8_a_checkpoint_whose_rename_is_not_durable_is_not_relied_on() {
    for seed in 0..8 {
        let sim = SimStorage::new(seed);
        let (mut store, live, plain, first) = reopened_after_a_checkpoint(&sim);
        sim.fail_sync_after(1);
        store.checkpoint_now(live.broker.snapshot()).unwrap_err();
        assert_eq!(store.checkpoint_lsn(), Some(first));
        assert_eq!(queued(&live.broker), queued(&plain.broker), "seed {seed}");
        assert_eq!(live.broker.storage_failure(), None);
        drop(store);
        let (_store, recovered, _) = open(&sim.power_loss()).unwrap();
        assert_eq!(recovered.durable_state(), plain.broker.durable_state());
        assert_eq!(queued(&recovered), queued(&plain.broker), "seed {seed}");
    }
}
