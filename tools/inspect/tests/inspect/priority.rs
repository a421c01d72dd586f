//! The inspector on a priority queue (S-PRIO): `export` lists its messages in delivery order
//! (by priority, then oldest first), each with the priority the queue files it under (a
//! missing property counts as 0, one above the maximum as the maximum), and `queues` names
//! the queue's highest priority.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is the test failing"
)]

use crate::common;

use common::{T0_MS, inspect};
use serde_json::Value as Json;
use wharf_broker::{FieldTable, Properties, Value};
use wharf_inspect::workload::Driver;

#[test]
fn s_prio_2_export_shows_each_message_priority_in_delivery_order() {
    let tmp = tempfile::tempdir().unwrap();
    let mut d = Driver::create(tmp.path(), 4096, false, T0_MS).unwrap();
    let mut args = FieldTable::new();
    args.insert("x-max-priority", Value::I32(4));
    d.queue("pq", args).unwrap();
    d.queue("plain", FieldTable::new()).unwrap();
    for (body, priority) in [("a", None), ("b", Some(3)), ("c", Some(9)), ("d", Some(3))] {
        let props = Properties {
            priority,
            message_id: Some(body.to_owned()),
            ..Properties::default()
        };
        d.publish("", "pq", props.clone(), body.as_bytes()).unwrap();
        d.publish("", "plain", props, body.as_bytes()).unwrap();
    }
    d.close().unwrap();
    let dir = tmp.path().to_str().unwrap();
    let now = (T0_MS + 1).to_string();
    let export = |queue: &str| -> Vec<(String, Json)> {
        let (code, out) = inspect(&["export", dir, "--queue", queue, "--now", &now]);
        assert_eq!(code, 0, "{out}");
        out.lines()
            .map(|l| serde_json::from_str::<Json>(l).unwrap())
            .map(|m| {
                let id = m["properties"]["message-id"].as_str().unwrap().to_owned();
                (id, m["priority"].clone())
            })
            .collect()
    };
    let p = |n: u64| Json::from(n);
    assert_eq!(
        export("pq"),
        [
            ("c".to_owned(), p(4)),
            ("b".to_owned(), p(3)),
            ("d".to_owned(), p(3)),
            ("a".to_owned(), p(0)),
        ]
    );
    let plain: Vec<_> = export("plain");
    assert_eq!(
        plain.iter().map(|m| m.0.as_str()).collect::<Vec<_>>(),
        ["a", "b", "c", "d"]
    );
    assert!(
        plain.iter().all(|m| m.1.is_null()),
        "a plain queue has none"
    );
    let (code, out) = inspect(&["--json", "queues", dir, "--now", &now]);
    assert_eq!(code, 0);
    let rows: Vec<Json> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let row = |q: &str| rows.iter().find(|r| r["queue"] == q).unwrap().clone();
    assert_eq!(row("pq")["max_priority"], p(4));
    assert!(row("plain").get("max_priority").is_none());
}
