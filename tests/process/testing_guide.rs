//! The README's "Testing your service against wharf" examples, run as tests (the same code is
//! in `wharf::testing`'s docs, run as doctests), and the Python (pika) example run through the
//! fixture binary when python3 and pika are installed.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::time::Duration;

use lapin::{
    BasicProperties, Confirmation, Connection, ConnectionProperties, options::*, types::*,
};
use wharf::testing::TestBroker;

#[rustfmt::skip] // laid out as in the README and the doctest, which it must match
#[tokio::test]
async fn guide_order_is_dead_lettered_after_30_minutes() -> Result<(), Box<dyn std::error::Error>> {
    let broker = TestBroker::builder().manual_clock(1_767_225_600_000).start().await?;
    let conn = Connection::connect(&broker.amqp_url(), ConnectionProperties::default()).await?;
    let ch = conn.create_channel().await?;
    ch.confirm_select(ConfirmSelectOptions::default()).await?;
    ch.queue_declare("orders.dead".into(), QueueDeclareOptions::default(), FieldTable::default())
        .await?;
    let mut args = FieldTable::default();
    args.insert("x-message-ttl".into(), AMQPValue::LongInt(30 * 60 * 1000));
    args.insert("x-dead-letter-exchange".into(), AMQPValue::LongString("".into()));
    args.insert("x-dead-letter-routing-key".into(), AMQPValue::LongString("orders.dead".into()));
    ch.queue_declare("orders".into(), QueueDeclareOptions::default(), args).await?;
    // Confirmed: the broker holds the message before the clock moves.
    ch.basic_publish("".into(), "orders".into(), BasicPublishOptions::default(), b"order-1",
        BasicProperties::default()).await?.await?;

    broker.clock().advance(Duration::from_secs(29 * 60)).await?;
    let get = ch.basic_get("orders.dead".into(), BasicGetOptions { no_ack: true }).await?;
    assert!(get.is_none(), "not dead-lettered a minute early");

    broker.clock().advance(Duration::from_secs(60)).await?;
    let dead = ch.basic_get("orders.dead".into(), BasicGetOptions { no_ack: true }).await?;
    assert_eq!(dead.expect("dead-lettered at 30 minutes").delivery.data, b"order-1");
    Ok(())
}

#[rustfmt::skip] // laid out as in the README and the doctest, which it must match
#[tokio::test]
async fn guide_power_cut_in_a_publish_batch() -> Result<(), Box<dyn std::error::Error>> {
    let mut broker = TestBroker::start().await?;
    let conn = Connection::connect(&broker.amqp_url(), ConnectionProperties::default()).await?;
    let ch = conn.create_channel().await?;
    ch.confirm_select(ConfirmSelectOptions::default()).await?;
    let durable = QueueDeclareOptions { durable: true, ..Default::default() };
    ch.queue_declare("jobs".into(), durable, FieldTable::default()).await?;
    let persistent = BasicProperties::default().with_delivery_mode(2);
    let mut confirmed = Vec::new();
    for i in 0..10 {
        let body = format!("job-{i}");
        let confirm = ch.basic_publish("".into(), "jobs".into(), BasicPublishOptions::default(),
            body.as_bytes(), persistent.clone()).await?;
        if i < 5 {
            // The first half is confirmed: on stable storage.
            assert!(matches!(confirm.await?, Confirmation::Ack(None)));
            confirmed.push(body);
        }
    }
    broker.power_loss().await?; // the rest of the batch may or may not have made it
    broker.restart().await?;

    let conn = Connection::connect(&broker.amqp_url(), ConnectionProperties::default()).await?;
    let ch = conn.create_channel().await?;
    let mut recovered = Vec::new();
    while let Some(m) = ch.basic_get("jobs".into(), BasicGetOptions { no_ack: true }).await? {
        recovered.push(String::from_utf8(m.delivery.data.clone())?);
    }
    assert!(recovered.starts_with(&confirmed), "every confirmed message, in order");
    Ok(())
}

/// The Python example, through the fixture binary. Skipped (with the reason printed) when
/// python3 or pika is missing: CI may have only Rust.
#[test]
fn guide_python_example_through_the_fixture_binary() {
    let pika = std::process::Command::new("python3")
        .args(["-c", "import pika"])
        .output();
    if !pika.is_ok_and(|o| o.status.success()) {
        println!("skipped: python3 with pika is not installed (pip install pika)");
        return;
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/guide_example.py");
    let out = std::process::Command::new("python3")
        .arg(script)
        .env("WHARF_BIN", env!("CARGO_BIN_EXE_wharf"))
        .env("WHARF_LOG", "warn")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{script} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok"));
}

/// The code blocks of the README's section "Testing your service against wharf".
fn readme_blocks(lang: &str) -> Vec<Vec<String>> {
    let readme = include_str!("../../README.md");
    let start = readme
        .find("## Testing your service against wharf")
        .expect("the README has the section");
    let section = &readme[start..];
    let end = section[3..].find("\n## ").map_or(section.len(), |e| e + 3);
    let mut blocks = Vec::new();
    let mut current: Option<Vec<String>> = None;
    for line in section[..end].lines() {
        match &mut current {
            None if line == format!("```{lang}") => current = Some(Vec::new()),
            Some(block) if line == "```" => {
                blocks.push(std::mem::take(block));
                current = None;
            }
            Some(block) => block.push(line.to_owned()),
            None => {}
        }
    }
    blocks
}

/// Non-empty lines, trimmed: the comparison ignores indentation.
fn trimmed<'a>(lines: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    lines.map(str::trim).filter(|l| !l.is_empty()).collect()
}

fn contains_run(haystack: &[&str], needle: &[&str]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn readme_rust_examples_are_the_doctests_and_these_tests() {
    let doc: Vec<&str> = include_str!("../../src/testing.rs")
        .lines()
        .filter_map(|l| l.strip_prefix("//!"))
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("# "))
        .collect();
    let tests = trimmed(include_str!("testing_guide.rs").lines());
    let blocks = readme_blocks("rust");
    assert_eq!(blocks.len(), 2, "two Rust examples in the guide");
    for block in &blocks {
        let lines = trimmed(block.iter().map(String::as_str));
        let body_start = lines
            .iter()
            .position(|l| l.starts_with("async fn"))
            .expect("an async test fn")
            + 1;
        let body = &lines[body_start..lines.len() - 2]; // without `Ok(())` and `}`
        assert!(body.len() > 10, "{body:?}");
        assert!(
            contains_run(&doc, body),
            "README example differs from the doctest:\n{body:#?}"
        );
        assert!(
            contains_run(&tests, body),
            "README example differs from the test:\n{body:#?}"
        );
        for import in lines.iter().filter(|l| l.starts_with("use ")) {
            assert!(doc.contains(import), "the doctest imports {import}");
        }
    }
}

#[test]
fn readme_python_example_is_in_the_script() {
    let script = include_str!("../python/guide_example.py");
    let script_lines = trimmed(script.lines());
    let blocks = readme_blocks("python");
    assert_eq!(blocks.len(), 1);
    for line in trimmed(blocks[0].iter().map(String::as_str)) {
        if line.starts_with("WHARF_BIN") {
            continue; // the script reads it from the environment
        }
        assert!(script_lines.contains(&line), "not in the script: {line}");
    }
}
