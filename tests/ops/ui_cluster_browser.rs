//! The dashboard of a node in a cluster, in a real browser (S-CLU-40, S-CLU-41, S-CLU-61):
//! three servers in one group on the in-memory network; node 2's dashboard (a follower's)
//! lists every node with its Raft role and term, and the entries its own member voided (the
//! other nodes' entries do not carry that count, so their cells say "–"); a quorum queue's
//! page shows the group's replication with the voided count in its heading, and its time
//! section and browse view, read from the group's committed state. Skips loudly
//! without Chromium, as the other browser tests do.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use lapin::BasicProperties;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::types::ShortString;

use crate::support::group_servers::{Cluster, declare_quorum};
use crate::support::within;
use crate::ui_browser::{browser, browser_missing, click, login, until};

/// The cell of column `col` (1-based among the data cells) in node `name`'s row of the
/// overview's Cluster table.
fn cluster_cell(name: &str, col: usize) -> String {
    format!("//table[caption='Cluster']//tr[th[text()='{name}']]/td[{col}]")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_clu_61_the_dashboard_shows_the_cluster_and_the_voided_entries() {
    if browser_missing("s_clu_61 cluster dashboard") {
        return;
    }
    let cluster = Cluster::start(3).await;
    let (_conn, ch) = cluster.channel(1).await;
    within(20, ch.confirm_select(ConfirmSelectOptions::default()))
        .await
        .unwrap();
    declare_quorum(&ch, "ui-qq").await;
    for i in 0..2 {
        let props = BasicProperties::default()
            .with_delivery_mode(2)
            .with_message_id(ShortString::from(format!("qq-{i}")));
        let confirm = within(
            20,
            ch.basic_publish(
                "".into(),
                "ui-qq".into(),
                BasicPublishOptions::default(),
                b"replicated",
                props,
            ),
        )
        .await
        .unwrap();
        assert!(within(20, confirm).await.unwrap().is_ack());
    }
    cluster.wait_applied(2, 1).await;

    let profile = tempfile::tempdir().unwrap();
    let (_driver, client) = browser(profile.path()).await;
    login(&client, &cluster.mgmt_base(2)).await;

    // Columns after the node's name: running, AMQP address, role, term, voided entries.
    until(
        &client,
        &format!("{}[text()='leader']", cluster_cell("wharf-1@member-1", 3)),
    )
    .await;
    until(
        &client,
        &format!("{}[text()='follower']", cluster_cell("wharf-2@member-2", 3)),
    )
    .await;
    until(
        &client,
        &format!("{}[text()='follower']", cluster_cell("wharf-3@member-3", 3)),
    )
    .await;
    until(
        &client,
        &format!("{}[text()='0']", cluster_cell("wharf-2@member-2", 5)),
    )
    .await;
    until(
        &client,
        &format!("{}[text()='–']", cluster_cell("wharf-1@member-1", 5)),
    )
    .await;

    // The quorum queue's page, as the follower shows it (S-CLU-42).
    click(&client, "//nav//a[text()='Queues']").await;
    click(&client, "//table[@id='listing']//tr/th/a[text()='ui-qq']").await;
    until(&client, "//h1/q[text()='ui-qq']").await;
    until(
        &client,
        "//table/caption[starts-with(text(), 'Replication (group 1') \
         and contains(text(), 'this node follower') \
         and contains(text(), 'voided entries 0)')]",
    )
    .await;
    // Its time section and browse read the committed state too.
    until(&client, "//table[@id='expiry-table']").await;
    click(&client, "//button[@id='browse']").await;
    until(&client, "//table[@id='browse-table']//td[text()='qq-0']").await;
    until(&client, "//table[@id='browse-table']//td[text()='qq-1']").await;
    client.close().await.unwrap();
    cluster.shutdown().await;
}
