//! Recovery before serving (S-DUR-5): the store is opened and replayed, what died while the
//! broker was down is expired, and the configured vhosts and users are put into the broker,
//! all before the listener opens.

use std::sync::Arc;

use tracing::warn;

use wharf_broker::{Broker, BrokerError, Command, DeathFate, Effect, Outcome};
use wharf_clock::Clock;
use wharf_store::{Store, StoreConfig};
use wharf_wal::{FileStorage, WalConfig};

use crate::auth;
use crate::error::ServerError;
use crate::server_config::ServerConfig;

/// Puts the configured users into the broker (their passwords hashed), with full
/// permissions on their vhosts, as configured vhosts are created: before any client can
/// connect. A user whose stored hash already matches its configured password and tags is
/// left alone (no new salt, no log record at every start); the default user
/// (`initial_only`) only on a broker whose log never defined a user.
fn put_configured_users(
    broker: &mut Broker,
    users: &crate::users::Users,
    now_ms: u64,
) -> Result<Vec<wharf_broker::Event>, ServerError> {
    let mut events = Vec::new();
    let never_defined = !broker.users_ever_defined();
    for u in &users.0 {
        if u.initial_only && !never_defined {
            continue;
        }
        let failed = |reason: String| ServerError::User {
            name: u.name.clone(),
            reason,
        };
        let unchanged = broker.user(&u.name).is_some_and(|stored| {
            stored.tags == u.tags && auth::verify_password(&stored.password_hash, &u.password)
        });
        let mut cmds = Vec::new();
        if !unchanged {
            cmds.push(Command::UserPut {
                name: u.name.clone(),
                password_hash: auth::hash_password(&u.password).map_err(failed)?,
                tags: u.tags.clone(),
            });
        }
        let vhosts: Vec<String> = if u.vhosts.iter().any(|v| v == "*") {
            broker.vhost_names()
        } else {
            u.vhosts.clone()
        };
        for vhost in vhosts {
            if !broker.vhost_names().contains(&vhost) {
                warn!(user = %u.name, %vhost, "configured vhost of a user does not exist; skipped");
                continue;
            }
            cmds.push(Command::PermissionSet {
                user: u.name.clone(),
                vhost,
                configure: ".*".to_owned(),
                write: ".*".to_owned(),
                read: ".*".to_owned(),
            });
        }
        for cmd in cmds {
            let out = broker
                .handle(cmd, now_ms)
                .map_err(|e: BrokerError| failed(e.text))?;
            events.extend(out.events);
        }
    }
    Ok(events)
}

/// Puts the configured vhosts, then the configured users, into `broker`: the events that
/// changed it. Configured vhosts exist before any client can connect; existing ones are kept
/// (`VhostAdd` of a known vhost changes nothing and logs nothing). In a cluster the same runs
/// against the metadata group's definitions once the node reached them (S-CLU-54).
pub(crate) fn put_configured(
    broker: &mut Broker,
    (vhosts, users): (&[String], &crate::users::Users),
    now_ms: u64,
) -> Result<Vec<wharf_broker::Event>, ServerError> {
    let mut events = Vec::new();
    for vhost in vhosts {
        let added = broker
            .handle(
                Command::VhostAdd {
                    vhost: vhost.clone(),
                },
                now_ms,
            )
            .map_err(|refusal| ServerError::Vhost {
                name: vhost.clone(),
                refusal,
            })?;
        events.extend(added.events);
    }
    events.extend(put_configured_users(broker, users, now_ms)?);
    Ok(events)
}

/// What recovery hands the broker task: the store and the broker rebuilt from it, with the
/// events logged before serving (downtime expiries, configured vhosts and users).
pub(crate) struct Recovered {
    pub(crate) store: Store,
    pub(crate) broker: Broker,
    pub(crate) summary: wharf_store::RecoverySummary,
    pub(crate) events: Vec<wharf_broker::Event>,
    pub(crate) downtime: DowntimeDeaths,
}

/// Opens the store (recovery, S-DUR-5), expires what died while the broker was down, and puts
/// the configured vhosts and users: everything that must hold before any client connects.
pub(crate) async fn recover(
    config: &ServerConfig,
    segment_bytes: u64,
    clock: &dyn Clock,
) -> Result<Recovered, ServerError> {
    let store_config = StoreConfig {
        dir: config.data_dir.clone(),
        salvage: config.salvage,
    };
    let storage = config
        .storage
        .clone()
        .unwrap_or_else(|| Arc::new(FileStorage));
    let wal_config = WalConfig {
        segment_bytes_max: segment_bytes,
        inline_writer: config.inline_store,
        ..WalConfig::default()
    };
    let (mut store, mut broker, summary) = if config.inline_store {
        Store::open_with(&store_config, storage, &wal_config)?
    } else {
        tokio::task::spawn_blocking(move || Store::open_with(&store_config, storage, &wal_config))
            .await
            .map_err(ServerError::Task)??
    };
    let limit = config.disk_free_limit_bytes;
    store.set_checkpoint_trigger(wharf_store::CheckpointTrigger {
        enabled: true,
        log_bytes_min: config.checkpoint_log_bytes_min,
        // S-DISK-3: compaction under space pressure starts a little before the disk alarm
        // (limit and hysteresis, plus the next segment and one more).
        space_floor_bytes: limit
            .saturating_add(limit / 100 * wharf_base::limits::ALARM_HYSTERESIS_PERCENT)
            .saturating_add(2 * segment_bytes),
    });
    broker.set_unacked_per_channel_max(config.unacked_per_channel_max);
    broker.set_flow_marks(
        config.flow_ready_high,
        wharf_base::limits::flow_ready_low(config.flow_ready_high),
    );
    broker.set_consumer_timeout(config.consumer_timeout_ms);
    let mut recovered = broker.recovered(clock.now_ms());
    let downtime = DowntimeDeaths::of(&recovered);
    recovered.events.extend(put_configured(
        &mut broker,
        (&config.vhosts, &config.users),
        clock.now_ms(),
    )?);
    Ok(Recovered {
        store,
        broker,
        summary,
        events: recovered.events,
        downtime,
    })
}

/// What the broker holds after recovery, for the start line.
pub(crate) struct LiveCounts {
    pub(crate) queues: usize,
    pub(crate) messages: u64,
}

impl LiveCounts {
    pub(crate) fn of(broker: &Broker) -> Self {
        // Counted, not listed (issue 18: a start with 10,000 queues).
        let t = broker.totals();
        LiveCounts {
            queues: usize::try_from(t.queues).unwrap_or(usize::MAX),
            messages: t.ready,
        }
    }
}

/// Messages whose deadline passed while the broker was down, from `recovered(now)`'s outcome
/// (S-DUR-5): how many died, and how many of them reached a dead-letter queue.
pub(crate) struct DowntimeDeaths {
    pub(crate) died: u64,
    pub(crate) dead_lettered: u64,
}

impl DowntimeDeaths {
    pub(crate) fn of(recovered: &Outcome) -> Self {
        let mut deaths = DowntimeDeaths {
            died: 0,
            dead_lettered: 0,
        };
        for effect in &recovered.effects {
            if let Effect::MessageDied { fate, .. } = effect {
                if *fate == DeathFate::Held {
                    // It died before the stop and waits on (S-QQ-10); not a downtime death.
                    continue;
                }
                deaths.died += 1;
                if matches!(fate, DeathFate::DeadLettered { targets } if *targets > 0) {
                    deaths.dead_lettered += 1;
                }
            }
        }
        deaths
    }
}
