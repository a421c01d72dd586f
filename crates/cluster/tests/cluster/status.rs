//! The status text `wharfctl cluster_status` prints (docs/CLUSTER-WIRE.md, "Status"): what
//! `render` writes, `parse` and `parse_amqp` read back, a leader's line included (its state
//! word `leader` is not its key `leader`).

use std::collections::BTreeSet;

use wharf_cluster::status::{GroupStatus, parse, parse_amqp, render};

fn group(group: u64, state: &str, leader: Option<u64>, in_sync: Option<&[u64]>) -> GroupStatus {
    GroupStatus {
        group,
        state: state.to_owned(),
        term: 3,
        leader,
        last_log: Some(12),
        applied: Some(11),
        members: [1, 2, 3].into(),
        learners: BTreeSet::new(),
        in_sync: in_sync.map(|s| s.iter().copied().collect::<BTreeSet<u64>>()),
    }
}

/// S-CLU-13: a node's status names its AMQP address; every group line reads back as written.
#[test]
fn s_clu_13_status_text_round_trips_with_the_amqp_address() {
    let groups = vec![
        group(0, "leader", Some(1), Some(&[1, 2, 3])),
        group(1, "follower", Some(2), None),
        group(2, "candidate", None, None),
    ];
    let text = render(1, 1, "127.0.0.1:25672", Some("127.0.0.1:5672"), &groups);
    assert!(
        text.starts_with("node 1 127.0.0.1:25672 member 1 amqp 127.0.0.1:5672\n"),
        "{text}"
    );
    assert_eq!(parse(&text), Some((1, groups.clone())));
    assert_eq!(parse_amqp(&text).as_deref(), Some("127.0.0.1:5672"));
    // Before its server listens, a node names no AMQP address.
    let text = render(2, 0, "127.0.0.1:25673", None, &groups);
    assert_eq!(parse_amqp(&text), None);
    assert_eq!(parse(&text), Some((2, groups)));
}
