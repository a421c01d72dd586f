//! A clean restart through a real client (S-DUR-2, S-DISK-9): the stop ends with a checkpoint
//! that refers to the queued messages, and the restart finds every message and ack.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::path::Path;

use wharf_store::checkpoint;

use crate::support;

fn checkpoints_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| checkpoint::parse_file_name(n).is_some())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn s_dur_2_a_clean_restart_keeps_messages_and_acks() {
    use lapin::BasicProperties;
    use lapin::options::{
        BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions,
    };
    use lapin::types::FieldTable as Table;
    let server = support::TestServer::start().await;
    assert!(checkpoints_in(server.dir.path()).is_empty());
    {
        let (conn, ch) = server.channel().await;
        ch.confirm_select(ConfirmSelectOptions::default())
            .await
            .unwrap();
        let durable = QueueDeclareOptions {
            durable: true,
            ..QueueDeclareOptions::default()
        };
        ch.queue_declare("kept".into(), durable, Table::default())
            .await
            .unwrap();
        for i in 0..20u8 {
            let props = BasicProperties::default().with_delivery_mode(2);
            ch.basic_publish(
                "".into(),
                "kept".into(),
                BasicPublishOptions::default(),
                &[i],
                props,
            )
            .await
            .unwrap();
        }
        ch.wait_for_confirms().await.unwrap();
        conn.close(200, "bye".into()).await.unwrap();
    }
    let server = server.restart().await;
    // A clean stop always ends with a checkpoint (S-DISK-9), however little was logged: the
    // next start replays almost nothing.
    assert_eq!(checkpoints_in(server.dir.path()).len(), 1);
    let (conn, ch) = server.channel().await;
    let mut bodies = Vec::new();
    while let Some(m) = ch
        .basic_get("kept".into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
    {
        bodies.push(m.delivery.data.clone());
    }
    assert_eq!(bodies, (0..20u8).map(|i| vec![i]).collect::<Vec<_>>());
    conn.close(200, "bye".into()).await.unwrap();
    let server = server.restart().await;
    let (_conn, ch) = server.channel().await;
    let left = ch
        .basic_get("kept".into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap();
    assert!(left.is_none(), "the queue stays empty across the restart");
}
