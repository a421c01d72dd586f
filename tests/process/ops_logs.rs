//! The `wharf` binary's log lines for operators (S-OPS-4, S-OPS-5): one info line per
//! connection accepted, opened (user, client-provided name, vhost) and closed, in RabbitMQ's
//! words; a refused login names the user; no line carries a spec id. The binary runs as a
//! child on a temporary directory and its output is read back.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::time::Duration;

use lapin::{Connection, ConnectionProperties};

use crate::support::binary::Broker;

/// Waits (bounded) until the child has logged a line containing every needle.
async fn logged(broker: &Broker, needles: &[&str]) -> String {
    for _ in 0..100 {
        let output = broker.output();
        if let Some(line) = output
            .lines()
            .find(|l| needles.iter().all(|n| l.contains(n)))
        {
            return line.to_owned();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no line with {needles:?} in\n{}", broker.output());
}

#[tokio::test]
async fn s_ops_4_connections_are_logged_opened_and_closed_with_user_name_and_peer() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path());
    let props = ConnectionProperties::default().with_connection_name("orders-service".into());
    let conn = Connection::connect(&broker.url(), props).await.unwrap();
    conn.close(200, "bye".into()).await.unwrap();
    let accepted = logged(&broker, &["INFO", "accepting AMQP connection (127.0.0.1:"]).await;
    let peer = accepted
        .split("accepting AMQP connection (")
        .nth(1)
        .unwrap()
        .trim_end_matches(')')
        .to_owned();
    logged(
        &broker,
        &[
            "INFO",
            &format!(
                "connection {peer} - orders-service: user 'guest' authenticated and granted \
                 access to vhost '/'"
            ),
        ],
    )
    .await;
    logged(
        &broker,
        &[
            "INFO",
            &format!(
                "closing AMQP connection ({peer} - orders-service, vhost: '/', user: 'guest')"
            ),
        ],
    )
    .await;
    broker.terminate();
}

#[tokio::test]
async fn s_ops_5_a_refused_login_names_the_user_and_no_line_carries_a_spec_id() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path());
    let url = format!("amqp://mallory:wrong@{}/%2f", broker.addr);
    assert!(
        Connection::connect(&url, ConnectionProperties::default())
            .await
            .is_err()
    );
    logged(
        &broker,
        &[
            "WARN",
            "PLAIN login refused: user 'mallory' - invalid credentials",
        ],
    )
    .await;
    let output = broker.output();
    assert!(
        !output.contains("wrong"),
        "a password in the log:\n{output}"
    );
    assert!(!has_spec_id(&output), "a spec id in the log:\n{output}");
    broker.terminate();
}

/// Whether `text` holds a spec id such as `S-TTL-4` (`S-`, capitals, `-`, a digit).
fn has_spec_id(text: &str) -> bool {
    text.match_indices("S-").any(|(i, _)| {
        let rest = &text[i + 2..];
        let caps = rest.chars().take_while(char::is_ascii_uppercase).count();
        caps > 0
            && rest[caps..].starts_with('-')
            && rest[caps + 1..].starts_with(|c: char| c.is_ascii_digit())
    })
}

#[test]
fn s_ops_5_spec_ids_are_recognised() {
    assert!(has_spec_id("queue expired (S-QEXP-5)"));
    assert!(!has_spec_id("S-OPS is a family; HTTPS-443 is not an id"));
}
