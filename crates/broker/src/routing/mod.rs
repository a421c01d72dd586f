//! Routing decisions for each exchange type, as pure functions and indexes over bindings.
//! `direct` and `fanout` need nothing beyond a map; `topic` and `headers` live here. Must not
//! depend on anything outside `broker` (no I/O, no clock, no logging).
//!
//! # AMQP topic and headers routing
//!
//! Both follow RabbitMQ (checked against `rabbit_db_topic_exchange.erl`,
//! `rabbit_exchange_type_topic.erl`, `rabbit_exchange_type_headers.erl` and
//! `mc_amqpl.erl`, 3.13 and later); the details and their sources are in each module.
//!
//! **Topic** ([`topic::TopicIndex`], reference [`topic::topic_matches`]). Routing and binding
//! keys are split into words on every `.`; the empty key has zero words and every other key
//! keeps its empty words (`"a..b"` is three words). In a binding key `*` matches exactly one
//! word and `#` zero or more; in a routing key they are ordinary words. So `#` matches every
//! key including `""`, `*` does not match `""` but `*.*` matches `"."`, and the empty binding
//! key matches only the empty routing key.
//!
//! The index is a trie: one node per binding-key prefix, with a hash map of literal-word edges
//! and one `*` and one `#` edge. `route` reads the key word by word and keeps the set of nodes
//! the words so far can reach (a node entered through `#` stays in the set), so it costs
//! O(words x active nodes) hash lookups plus one copy per match, independent of the number of
//! bindings; it does not allocate beyond growing the output (its two buffers are reused per
//! thread). Each matching binding is reported once: a destination bound by several matching
//! patterns appears once per pattern, and callers deduplicate. `bind` and `unbind` cost
//! O(pattern words + destinations on that exact pattern); `unbind` prunes nodes left empty
//! and renumbers the arena once free slots outnumber live nodes, so memory follows the live
//! bindings. `benches/routing.rs` measures it over 10,000 bindings.
//!
//! **Headers** ([`headers::headers_match`], [`headers::validate_binding_args`]). `x-match` is
//! `all` (default), `any`, `all-with-x` or `any-with-x`; anything else is refused at bind time
//! with 406 and RabbitMQ's text, and an unvalidated value routes as `all`. `all`/`any` ignore
//! binding keys starting with `x-`; the `-with-x` modes compare them too (only `x-match` is
//! always skipped). A void binding value asks for the header's presence. Otherwise values are
//! compared as RabbitMQ does after dropping their type: every integer type by value (`I32(1)`
//! equals `I64(1)`), floats with floats only, strings and byte arrays by bytes, arrays and
//! tables with their types; a timestamp *header* counts in milliseconds (RabbitMQ 3.13+). With
//! no key left to compare, `all` matches everything and `any` nothing. Cost: O(binding keys x
//! headers) per binding, as field tables are searched linearly.

mod headers;
mod topic;

pub(crate) use headers::{headers_match, validate_binding_args};
pub use topic::{TopicIndex, topic_matches};
