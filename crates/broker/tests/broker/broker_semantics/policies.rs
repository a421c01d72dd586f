//! Policies (S-POL): docs/SEMANTICS.md, one or more tests per rule, each named after its id.

use super::*;

#[test]
fn s_pol_1_policy_definitions_are_checked() {
    let mut h = H::new();
    for (def, key) in [
        (r#"{"bogus": 1}"#, "bogus"),
        (r#"{"max-length": "ten"}"#, "max-length"),
        (r#"{"expires": 0}"#, "expires"),
        (r#"{"dead-letter-exchange": 5}"#, "dead-letter-exchange"),
    ] {
        let e = h.policy("p", ".*", def, 0, false).unwrap_err();
        assert!(e.text.contains(key), "{}", e.text);
    }
    let e = h
        .policy("p", "(unclosed", r#"{"max-length": 1}"#, 0, false)
        .unwrap_err();
    assert!(e.text.contains("regular expression"));
    assert!(h.b.policies("/").is_empty());
    // apply-to exchanges does not touch queues.
    h.queue("q", &[]);
    h.ok(Command::PolicySet {
        vhost: "/".into(),
        policy: wharf_broker::PolicySpec {
            name: "x".into(),
            pattern: ".*".into(),
            apply_to: wharf_broker::ApplyTo::Exchanges,
            priority: 0,
            definition: r#"{"max-length": 0}"#.into(),
        },
        operator: false,
    });
    h.send("q", Properties::default());
    assert_eq!(h.ready("q"), 1);
    assert_eq!(h.info("q").unwrap().policy, None);
}

#[test]
fn s_pol_2_highest_priority_applies_and_operator_policies_only_lower() {
    let mut h = H::new();
    h.queue("q", &[]);
    h.policy("low", "^q", r#"{"max-length": 1}"#, 1, false)
        .unwrap();
    h.policy("high", "q", r#"{"max-length": 3}"#, 5, false)
        .unwrap();
    assert_eq!(h.info("q").unwrap().policy.as_deref(), Some("high"));
    for _ in 0..4 {
        h.send("q", Properties::default());
    }
    assert_eq!(h.ready("q"), 3, "only the higher-priority policy applies");
    h.policy("op", ".*", r#"{"max-length": 10}"#, 0, true)
        .unwrap();
    h.send("q", Properties::default());
    assert_eq!(h.ready("q"), 3, "an operator policy cannot raise a limit");
    h.policy("op", ".*", r#"{"max-length": 2}"#, 0, true)
        .unwrap();
    assert_eq!(h.ready("q"), 2, "but it lowers it, at once");
    assert_eq!(h.info("q").unwrap().operator_policy.as_deref(), Some("op"));
}

#[test]
fn s_pol_3_policy_changes_are_logged_and_recovered() {
    let mut h = H::new();
    let t0 = h.now;
    h.durable_queue("q", &[]);
    h.send("q", persistent());
    h.policy("ttl", "^q$", r#"{"message-ttl": 5000}"#, 0, false)
        .unwrap();
    h.policy("gone", "^x$", r#"{"max-length": 1}"#, 0, false)
        .unwrap();
    h.ok(Command::PolicyClear {
        vhost: "/".into(),
        name: "gone".into(),
        operator: false,
    });
    let mut b = h.replay();
    assert_eq!(b.policies("/").len(), 1);
    assert_eq!(b.durable_state(), h.b.durable_state());
    b.recovered(t0 + 1000);
    assert_eq!(
        b.next_deadline(),
        Some(t0 + 5000),
        "the recovered policy TTL applies"
    );
}

#[test]
fn s_pol_4_policy_spec_mirrors_set_policy() {
    let mut h = H::new();
    h.policy("name", "^amq\\.", r#"{"max-length": 7}"#, 3, false)
        .unwrap();
    let p = &h.b.policies("/")[0];
    assert_eq!(p.policy.name, "name");
    assert_eq!(p.policy.pattern, "^amq\\.");
    assert_eq!(p.policy.priority, 3);
    assert_eq!(p.policy.apply_to, wharf_broker::ApplyTo::Queues);
    let e = h.err(Command::PolicyClear {
        vhost: "/".into(),
        name: "nope".into(),
        operator: false,
    });
    assert_eq!(e.kind.reply_code(), 404);
}
