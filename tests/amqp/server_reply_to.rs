//! Direct reply-to (S-DRT) as lapin sees it: an RPC client consumes `amq.rabbitmq.reply-to`
//! with no-ack and publishes requests with `reply_to` set to it; the server side answers to
//! the reply name it received, through the default exchange. Every refusal is checked
//! against RabbitMQ's code and text (RabbitMQ 3.10, see docs/SEMANTICS.md "S-DRT"). The pika
//! client's own habits are in `server_reply_to_pika.rs`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use crate::support;

use futures_lite::StreamExt;
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Confirmation, Consumer};
use support::{TestServer, reply_code, reply_text, within};

const PSEUDO: &str = "amq.rabbitmq.reply-to";

/// Consumes the pseudo-queue on `ch` with no-ack, as RPC clients do.
async fn reply_consumer(ch: &Channel) -> Consumer {
    ch.basic_consume(
        PSEUDO.into(),
        "replies".into(),
        BasicConsumeOptions {
            no_ack: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .unwrap()
}

/// `queue.declare` of `name` with `passive` (lapin's queue, or the refusal).
async fn declare(ch: &Channel, name: &str, passive: bool) -> Result<lapin::Queue, lapin::Error> {
    let options = QueueDeclareOptions {
        passive,
        ..Default::default()
    };
    ch.queue_declare(name.into(), options, FieldTable::default())
        .await
}

/// Checks a refusal's reply code and its whole text.
fn assert_refused(err: &lapin::Error, code: u16, text: &str) {
    assert_eq!(reply_code(err), Some(code), "{err:?}");
    assert_eq!(reply_text(err), text);
}

/// Publishes `body` to the default exchange with `key` and waits for its confirm.
async fn publish_confirmed(
    ch: &Channel,
    key: &str,
    mandatory: bool,
    body: &[u8],
    props: BasicProperties,
) -> Confirmation {
    ch.basic_publish(
        "".into(),
        key.into(),
        BasicPublishOptions {
            mandatory,
            ..Default::default()
        },
        body,
        props,
    )
    .await
    .unwrap()
    .await
    .unwrap()
}

/// A request sent with `reply_to = amq.rabbitmq.reply-to` from `client` to the queue `rpc`
/// (declared here), as the server side receives it: its `reply_to`.
async fn send_request(client: &Channel, server: &Channel) -> String {
    server
        .queue_declare(
            "rpc".into(),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    client
        .basic_publish(
            "".into(),
            "rpc".into(),
            BasicPublishOptions::default(),
            b"question",
            BasicProperties::default()
                .with_reply_to(PSEUDO.into())
                .with_correlation_id("c-1".into()),
        )
        .await
        .unwrap();
    let request = within(5, async {
        loop {
            let got = server
                .basic_get("rpc".into(), BasicGetOptions { no_ack: true })
                .await
                .unwrap();
            if let Some(m) = got {
                return m;
            }
        }
    })
    .await;
    request
        .delivery
        .properties
        .reply_to()
        .as_ref()
        .expect("the request carries a reply name")
        .to_string()
}

#[tokio::test]
async fn s_drt_2_rpc_round_trip_through_the_reply_name() {
    let server = TestServer::start().await;
    let (_c1, client) = server.channel().await;
    let (_c2, responder) = server.channel().await;
    let mut replies = reply_consumer(&client).await;
    let reply_to = send_request(&client, &responder).await;
    assert!(
        reply_to.starts_with("amq.rabbitmq.reply-to.") && reply_to.len() > PSEUDO.len() + 1,
        "reply_to rewritten to the channel's reply name, got {reply_to}"
    );
    // S-DRT-5: the reply name exists while its consumer does.
    let q = declare(&responder, &reply_to, true).await.unwrap();
    assert_eq!((q.message_count(), q.consumer_count()), (0, 1));
    responder
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let props = BasicProperties::default().with_correlation_id("c-1".into());
    let confirm = publish_confirmed(&responder, &reply_to, false, b"answer", props).await;
    assert!(matches!(confirm, Confirmation::Ack(None)), "{confirm:?}");
    let reply = within(5, replies.next()).await.unwrap().unwrap();
    assert_eq!(reply.data, b"answer");
    assert_eq!(reply.routing_key.as_str(), reply_to);
    assert_eq!(reply.exchange.as_str(), "");
    assert!(!reply.redelivered);
    assert_eq!(
        reply.properties.correlation_id().as_ref().unwrap().as_str(),
        "c-1"
    );
    server.handle.shutdown().await.unwrap();
}

#[tokio::test]
async fn s_drt_1_a_reply_consumer_cannot_acknowledge() {
    let server = TestServer::start().await;
    let (_conn, ch) = server.channel().await;
    let err = ch
        .basic_consume(
            PSEUDO.into(),
            "acking".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap_err();
    assert_refused(
        &err,
        406,
        "PRECONDITION_FAILED - reply consumer cannot acknowledge",
    );
}

#[tokio::test]
async fn s_drt_1_one_reply_consumer_per_channel() {
    let server = TestServer::start().await;
    let (_conn, ch) = server.channel().await;
    let _replies = reply_consumer(&ch).await;
    let err = ch
        .basic_consume(
            PSEUDO.into(),
            "second".into(),
            BasicConsumeOptions {
                no_ack: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap_err();
    assert_refused(
        &err,
        406,
        "PRECONDITION_FAILED - reply consumer already set",
    );
}

#[tokio::test]
async fn s_drt_3_reply_to_without_a_reply_consumer_closes_the_channel() {
    let server = TestServer::start().await;
    let conn = server.connect().await;
    for cancel_first in [false, true] {
        let ch = conn.create_channel().await.unwrap();
        if cancel_first {
            let _replies = reply_consumer(&ch).await;
            ch.basic_cancel("replies".into(), BasicCancelOptions::default())
                .await
                .unwrap();
        }
        ch.confirm_select(ConfirmSelectOptions::default())
            .await
            .unwrap();
        let published = ch
            .basic_publish(
                "".into(),
                "anywhere".into(),
                BasicPublishOptions::default(),
                b"request",
                BasicProperties::default().with_reply_to(PSEUDO.into()),
            )
            .await
            .unwrap()
            .await;
        let err = match published {
            Err(err) => err,
            Ok(_) => ch
                .queue_declare(
                    "".into(),
                    QueueDeclareOptions::default(),
                    FieldTable::default(),
                )
                .await
                .unwrap_err(),
        };
        assert_eq!(
            reply_code(&err),
            Some(406),
            "cancelled={cancel_first}: {err:?}"
        );
        assert_eq!(
            reply_text(&err),
            "PRECONDITION_FAILED - fast reply consumer does not exist"
        );
    }
    // A channel error: the connection stays usable.
    let ch = conn.create_channel().await.unwrap();
    ch.queue_declare(
        "".into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn s_drt_4_a_reply_to_a_gone_consumer_is_dropped_or_returned() {
    let server = TestServer::start().await;
    let (client_conn, client) = server.channel().await;
    let (_c2, responder) = server.channel().await;
    let _replies = reply_consumer(&client).await;
    let reply_to = send_request(&client, &responder).await;
    client_conn.close(200, "bye".into()).await.unwrap();
    responder
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let props = BasicProperties::default;
    let dropped = publish_confirmed(&responder, &reply_to, false, b"late", props()).await;
    assert!(matches!(dropped, Confirmation::Ack(None)), "{dropped:?}");
    let returned = publish_confirmed(&responder, &reply_to, true, b"late", props()).await;
    let Confirmation::Ack(Some(returned)) = returned else {
        panic!("a mandatory reply to a gone consumer is returned, got {returned:?}");
    };
    assert_eq!(returned.reply_code, 312);
    // S-DRT-5: the reply name is gone with its consumer.
    let err = declare(&responder, &reply_to, true).await.unwrap_err();
    assert_refused(
        &err,
        404,
        &format!("NOT_FOUND - no queue '{reply_to}' in vhost '/'"),
    );
}

#[tokio::test]
async fn s_drt_4_a_mandatory_reply_is_delivered_and_returned_as_rabbitmq_does() {
    let server = TestServer::start().await;
    let (_c1, client) = server.channel().await;
    let (_c2, responder) = server.channel().await;
    let mut replies = reply_consumer(&client).await;
    let reply_to = send_request(&client, &responder).await;
    responder
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let props = BasicProperties::default();
    let confirm = publish_confirmed(&responder, &reply_to, true, b"both", props).await;
    assert!(
        matches!(&confirm, Confirmation::Ack(Some(r)) if r.reply_code == 312),
        "{confirm:?}"
    );
    let reply = within(5, replies.next()).await.unwrap().unwrap();
    assert_eq!(reply.data, b"both");
}

#[tokio::test]
async fn s_drt_5_declares_of_reply_names_are_passive() {
    let server = TestServer::start().await;
    let (conn, ch) = server.channel().await;
    for passive in [true, false] {
        let q = declare(&ch, PSEUDO, passive).await.unwrap();
        assert_eq!(q.name().as_str(), PSEUDO);
        assert_eq!((q.message_count(), q.consumer_count()), (0, 1));
    }
    let err = declare(&ch, "amq.rabbitmq.reply-to.bogus", true)
        .await
        .unwrap_err();
    assert_refused(
        &err,
        404,
        "NOT_FOUND - no queue 'amq.rabbitmq.reply-to.bogus' in vhost '/'",
    );
    let ch = conn.create_channel().await.unwrap();
    let err = ch
        .basic_get(PSEUDO.into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap_err();
    assert_refused(
        &err,
        404,
        "NOT_FOUND - no queue 'amq.rabbitmq.reply-to' in vhost '/'",
    );
}

/// pika's RPC habits (the tutorial's client, a responder thread) through direct reply-to,
/// and the `direct_reply_to` capability as pika reads it. Skipped, saying so, when python3 or
/// pika is missing (`.ci/run` installs pika).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_drt_2_pika_rpc_client_and_server_work_unchanged() {
    let pika = tokio::process::Command::new("python3")
        .args(["-c", "import pika"])
        .output()
        .await;
    if !pika.is_ok_and(|o| o.status.success()) {
        println!(
            "SKIPPED s_drt_2 pika test: python3 with pika is not installed (pip install pika)"
        );
        return;
    }
    let server = TestServer::start().await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/rpc_reply_to.py");
    let out = within(
        60,
        tokio::process::Command::new("python3")
            .arg(script)
            .env("WHARF_URL", server.url())
            .output(),
    )
    .await
    .unwrap();
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("ok"),
        "{script} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    server.handle.shutdown().await.unwrap();
}
