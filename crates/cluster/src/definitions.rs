//! The cluster-wide definitions of a broker, and the events that bring a node's live broker's
//! definitions to the metadata group's committed ones ([`reconcile`]; DESIGN "Definitions
//! through the metadata group", S-CLU-51).
//!
//! Cluster-wide are the definitions [`shared_definitions`] names: vhosts, exchanges,
//! bindings between exchanges, policies, users, permissions and topic permissions. Classic
//! queues, their bindings and their messages are the node's own and are never touched here
//! (a vhost or an exchange deleted cluster-wide takes them with it, as on a single node).
//!
//! Reconciling compares states, not logs: the committed broker (group 0's state machine) is
//! the truth, however the node came to it (entries applied one by one, a snapshot installed
//! after a wipe or a long absence), so a node converges the same way in every case.

use std::collections::{BTreeMap, BTreeSet};

use wharf_broker::{Broker, DestName, Event};

use crate::split::shared_definitions;

/// Which definition an event is about, and whether it removes it (`None`: not a definition
/// this module keeps).
fn key(event: &Event) -> Option<String> {
    let k = match event {
        Event::ExchangeDeclared {
            vhost, exchange, ..
        } => format!("x\0{vhost}\0{exchange}"),
        Event::PolicySet { vhost, policy, .. } => format!("p\0{vhost}\0{}", policy.name),
        Event::UserPut { name, .. } => format!("u\0{name}"),
        Event::PermissionSet { user, vhost, .. } => format!("r\0{user}\0{vhost}"),
        Event::TopicPermissionSet {
            user,
            vhost,
            exchange,
            ..
        } => format!("t\0{user}\0{vhost}\0{exchange}"),
        // A binding is its whole self: two that differ are two bindings.
        Event::Bound { .. } => format!("b\0{event:?}"),
        _ => return None,
    };
    Some(k)
}

/// The event that removes the definition `event` sets.
fn removal(event: &Event) -> Option<Event> {
    Some(match event.clone() {
        Event::ExchangeDeclared {
            vhost, exchange, ..
        } => Event::ExchangeDeleted { vhost, exchange },
        Event::PolicySet {
            vhost,
            policy,
            operator,
        } => Event::PolicyCleared {
            vhost,
            name: policy.name,
            operator,
        },
        Event::UserPut { name, .. } => Event::UserDeleted { name },
        Event::PermissionSet { user, vhost, .. } => Event::PermissionCleared { user, vhost },
        Event::TopicPermissionSet {
            user,
            vhost,
            exchange,
            ..
        } => Event::TopicPermissionCleared {
            user,
            vhost,
            exchange,
        },
        Event::Bound {
            vhost,
            source,
            destination,
            routing_key,
            arguments,
        } => Event::Unbound {
            vhost,
            source,
            destination,
            routing_key,
            arguments,
        },
        _ => return None,
    })
}

/// The order removals run in: what depends on a definition goes before it.
fn removal_rank(event: &Event) -> u8 {
    match event {
        Event::Unbound { .. } => 0,
        Event::TopicPermissionCleared { .. } => 1,
        Event::PermissionCleared { .. } => 2,
        Event::PolicyCleared { .. } => 3,
        Event::UserDeleted { .. } => 4,
        Event::ExchangeDeleted { .. } => 5,
        _ => 6,
    }
}

/// `broker`'s cluster-wide definitions by key (vhosts apart), in the order its snapshot lists
/// them (an order `Broker::apply` accepts).
fn by_key(broker: &Broker) -> (Vec<String>, BTreeMap<String, Event>) {
    let mut order = Vec::new();
    let mut map = BTreeMap::new();
    for event in shared_definitions(broker.definitions()) {
        if let Some(k) = key(&event) {
            order.push(k.clone());
            map.insert(k, event);
        }
    }
    (order, map)
}

/// The events that make `live`'s cluster-wide definitions those of `committed`, in an order
/// `Broker::apply` takes on `live`: first what `live` has and `committed` does not (or has
/// otherwise: an exchange declared with other properties is deleted and declared again), the
/// dependents first; then vhosts `live` lacks, then every definition `live` lacks or holds
/// otherwise, in `committed`'s order; vhosts `committed` lacks are deleted last. Empty when
/// they agree.
pub fn reconcile(committed: &Broker, live: &Broker) -> Vec<Event> {
    let want_vhosts: BTreeSet<String> = committed.vhost_names().into_iter().collect();
    let have_vhosts: BTreeSet<String> = live.vhost_names().into_iter().collect();
    let (want_order, want) = by_key(committed);
    let (_, have) = by_key(live);
    let mut removals: Vec<Event> = have
        .iter()
        .filter(|(k, e)| {
            let vhost_goes = vhost_of(e).is_some_and(|v| !want_vhosts.contains(v));
            // Within a vhost that goes, its deletion takes the definition along.
            !vhost_goes
                && match want.get(*k) {
                    None => true,
                    // Set again in place (`additions`), but an exchange is only declared anew.
                    Some(w) => w != *e && matches!(e, Event::ExchangeDeclared { .. }),
                }
        })
        .filter_map(|(_, e)| removal(e))
        .collect();
    removals.sort_by_key(removal_rank);
    // An exchange deleted (to be declared anew) takes its bindings with it.
    let redeclared: BTreeSet<(&str, &str)> = removals
        .iter()
        .filter_map(|e| match e {
            Event::ExchangeDeleted { vhost, exchange } => Some((vhost.as_str(), exchange.as_str())),
            _ => None,
        })
        .collect();
    let dropped = |e: &Event| match e {
        Event::Bound {
            vhost,
            source,
            destination,
            ..
        } => {
            redeclared.contains(&(vhost.as_str(), source.as_str()))
                || matches!(destination, DestName::Exchange(d)
                    if redeclared.contains(&(vhost.as_str(), d.as_str())))
        }
        _ => false,
    };
    let mut additions = Vec::new();
    for k in &want_order {
        let (Some(w), h) = (want.get(k), have.get(k)) else {
            continue;
        };
        if h != Some(w) || dropped(w) {
            additions.push(w.clone());
        }
    }
    let mut out = removals;
    out.extend(
        want_vhosts
            .difference(&have_vhosts)
            .map(|vhost| Event::VhostAdded {
                vhost: vhost.clone(),
            }),
    );
    out.extend(additions);
    out.extend(
        have_vhosts
            .difference(&want_vhosts)
            .map(|vhost| Event::VhostDeleted {
                vhost: vhost.clone(),
            }),
    );
    out
}

/// The vhost a definition belongs to (`None` for a user).
fn vhost_of(event: &Event) -> Option<&str> {
    match event {
        Event::ExchangeDeclared { vhost, .. }
        | Event::PolicySet { vhost, .. }
        | Event::PermissionSet { vhost, .. }
        | Event::TopicPermissionSet { vhost, .. }
        | Event::Bound { vhost, .. } => Some(vhost),
        _ => None,
    }
}
