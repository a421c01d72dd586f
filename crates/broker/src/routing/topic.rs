//! Topic exchange routing: binding keys are dot-separated words where `*` matches exactly one
//! word and `#` matches zero or more words, with RabbitMQ's rules for empty keys and words.
//!
//! [`TopicIndex`] is a trie over binding-key words; [`topic_matches`] is the reference
//! definition the trie is tested against. Pure data structures: must not depend on anything
//! outside `broker` (no I/O, no clock, no logging).

use std::cell::RefCell;
use std::collections::HashMap;

/// Splits a routing or binding key into words the way RabbitMQ does
/// (`rabbit_db_topic_exchange:split_topic_key_binary/1`, and `split_topic_key/1` in 3.x):
/// the empty key has **zero** words, every other key is split on each `.`, keeping empty
/// words (`"a..b"` is `["a", "", "b"]`, `".a"` is `["", "a"]`, `"a."` is `["a", ""]`).
///
/// So `*` never matches the empty routing key (zero words), while `*.*` matches `"."`.
fn words(key: &str) -> impl Iterator<Item = &str> {
    // `str::split` yields one empty word for "", which RabbitMQ does not: skip it.
    key.split('.')
        .take(if key.is_empty() { 0 } else { usize::MAX })
}

/// Index of a node in `TopicIndex::nodes`.
type NodeId = usize;

/// The root: the node reached by zero words. It is never freed.
const ROOT: NodeId = 0;

/// Once the free list holds more than this many slots *and* more slots than there are live
/// nodes, `unbind` renumbers the arena, so memory follows the live bindings, not the peak.
const FREE_SLOTS_COMPACT_MIN: usize = 64;

/// `check_invariants` looks for duplicate destinations only on nodes with at most this many.
const DUPLICATE_CHECK_DESTS_MAX: usize = 64;

/// One trie node: the binding-key prefix spelled by the edges from the root to it.
#[derive(Debug, Clone)]
struct Node<D> {
    /// Edges for literal words (never `*` or `#`, which have their own edges).
    children: HashMap<Box<str>, NodeId>,
    /// The `*` edge.
    star: Option<NodeId>,
    /// The `#` edge.
    hash: Option<NodeId>,
    /// Destinations whose binding key ends exactly here; no duplicates.
    dests: Vec<D>,
    /// True when this node was reached through a `#` edge: it may absorb further words.
    via_hash: bool,
    /// How many `#` edges lie on the path from the root, saturated at 2. Only nodes with two
    /// or more can be reached twice in one routing step (see `TopicIndex::route_with`).
    hashes_on_path: u8,
}

impl<D> Node<D> {
    fn new(via_hash: bool, hashes_on_path: u8) -> Self {
        Self {
            children: HashMap::new(),
            star: None,
            hash: None,
            dests: Vec::new(),
            via_hash,
            hashes_on_path,
        }
    }

    /// True when the node holds no binding and leads to none: it can be removed.
    fn is_empty(&self) -> bool {
        self.dests.is_empty()
            && self.children.is_empty()
            && self.star.is_none()
            && self.hash.is_none()
    }

    /// Every child id, in no particular order.
    fn child_ids(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.children
            .values()
            .copied()
            .chain(self.star)
            .chain(self.hash)
    }
}

/// Which edge leads from a node to the next one for a binding-key word.
#[derive(Debug, Clone, Copy)]
enum Edge<'a> {
    Literal(&'a str),
    Star,
    Hash,
}

impl<'a> Edge<'a> {
    fn of(word: &'a str) -> Self {
        match word {
            "*" => Edge::Star,
            "#" => Edge::Hash,
            literal => Edge::Literal(literal),
        }
    }
}

/// The two active-node sets `route` swaps between, kept per thread so that routing does not
/// allocate once they have grown to the largest set seen.
#[derive(Debug, Default)]
struct Scratch {
    current: Vec<NodeId>,
    next: Vec<NodeId>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// Bindings of one topic exchange, from binding key to destination `D`, as a trie over words.
///
/// Each node stands for a binding-key prefix and has a hash map of literal-word edges plus
/// one `*` and one `#` edge. Routing simulates the trie as an automaton over the routing
/// key's words, keeping the set of nodes the words read so far can have reached, so its cost
/// grows with the number of words times the number of live branches, never with the number
/// of bindings. Each binding is found at most once per `route` call.
///
/// Invariants (checked by [`TopicIndex::check_invariants`]): every node except the root is
/// reachable from the root and is non-empty (holds a binding or leads to one); `len` is the
/// total number of destinations held; a node's `dests` has no duplicates; free slots are
/// unreachable and empty.
#[derive(Debug, Clone)]
pub struct TopicIndex<D> {
    /// Node arena; `nodes[ROOT]` always exists.
    nodes: Vec<Node<D>>,
    /// Unused slots of `nodes`, reused before the arena grows.
    free: Vec<NodeId>,
    /// Number of bindings.
    len: usize,
}

impl<D> Default for TopicIndex<D> {
    fn default() -> Self {
        Self {
            nodes: vec![Node::new(false, 0)],
            free: Vec::new(),
            len: 0,
        }
    }
}

impl<D: Copy + Eq> TopicIndex<D> {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the binding `pattern -> dest`; returns false if it was already there.
    ///
    /// Costs one hash-map lookup (or insert) per word of `pattern`, plus a scan of the
    /// destinations already bound with exactly this pattern.
    pub fn bind(&mut self, pattern: &str, dest: D) -> bool {
        let mut node = ROOT;
        for word in words(pattern) {
            node = self.child_or_insert(node, Edge::of(word));
        }
        let dests = &mut self.nodes[node].dests;
        if dests.contains(&dest) {
            return false;
        }
        dests.push(dest);
        self.len += 1;
        true
    }

    /// Removes the binding `pattern -> dest`; returns false if it was not there. Nodes left
    /// without bindings below them are removed, so memory stays proportional to the bindings.
    pub fn unbind(&mut self, pattern: &str, dest: D) -> bool {
        // The path from the root, so that emptied nodes can be pruned bottom-up.
        let mut path: Vec<(NodeId, Edge<'_>)> = Vec::new();
        let mut node = ROOT;
        for word in words(pattern) {
            let edge = Edge::of(word);
            let Some(child) = self.child(node, edge) else {
                return false;
            };
            path.push((node, edge));
            node = child;
        }
        let dests = &mut self.nodes[node].dests;
        let Some(position) = dests.iter().position(|d| *d == dest) else {
            return false;
        };
        dests.swap_remove(position);
        self.len -= 1;
        // Prune: walk back up while the node we stand on is empty.
        while let Some((parent, edge)) = path.pop() {
            if !self.nodes[node].is_empty() {
                break;
            }
            self.remove_edge(parent, edge);
            self.free_node(node);
            node = parent;
        }
        if self.free.len() > FREE_SLOTS_COMPACT_MIN && self.free.len() > self.live_nodes() {
            self.compact();
        }
        true
    }

    /// Appends to `out` the destination of every binding whose pattern matches
    /// `routing_key`, each binding once. A destination bound by several matching patterns is
    /// therefore appended once per matching pattern; callers deduplicate. The order of `out`
    /// is unspecified.
    ///
    /// Cost: for each word of the key, one hash lookup per active node (plus the `*` and `#`
    /// edges), where the active nodes are the binding-key prefixes that match the words read so
    /// far; then the matching destinations are copied. It does not allocate beyond growing
    /// `out` (two per-thread buffers are reused).
    pub fn route(&self, routing_key: &str, out: &mut Vec<D>) {
        let routed = SCRATCH.try_with(|cell| {
            if let Ok(mut scratch) = cell.try_borrow_mut() {
                self.route_with(routing_key, &mut scratch, out);
                true
            } else {
                false
            }
        });
        // Only reachable while the thread is being torn down (or re-entered, which routing
        // never does): fall back to buffers of our own.
        if routed != Ok(true) {
            self.route_with(routing_key, &mut Scratch::default(), out);
        }
    }

    /// Number of bindings.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when there are no bindings.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of live trie nodes, the root included (1 when empty). For tests and benches:
    /// it shows that memory follows the bindings.
    pub fn node_count(&self) -> usize {
        self.live_nodes()
    }

    /// Walks the whole trie and checks every invariant (see [`TopicIndex`]). Meant for tests
    /// and debug builds; costs O(nodes + bindings) (the no-duplicates check is made only on
    /// nodes with at most 64 destinations, where its quadratic cost is small).
    ///
    /// # Panics
    /// When an invariant is broken, which is a bug in this module.
    pub fn check_invariants(&self) {
        let mut reached = vec![false; self.nodes.len()];
        let mut stack = vec![ROOT];
        let mut bindings = 0;
        while let Some(id) = stack.pop() {
            assert!(
                !reached[id],
                "node {id} reached twice: the trie has a cycle or a join"
            );
            reached[id] = true;
            let node = &self.nodes[id];
            assert!(
                id == ROOT || !node.is_empty(),
                "empty node {id} was not pruned"
            );
            // Quadratic without `D: Hash`, so only small nodes are checked; `bind` refuses
            // duplicates on every node anyway.
            let checked = if node.dests.len() <= DUPLICATE_CHECK_DESTS_MAX {
                node.dests.as_slice()
            } else {
                &[]
            };
            for (i, dest) in checked.iter().enumerate() {
                assert!(
                    !node.dests[i + 1..].contains(dest),
                    "node {id} holds a destination twice"
                );
            }
            bindings += node.dests.len();
            for (child, via_hash) in node
                .children
                .values()
                .chain(node.star.as_ref())
                .map(|c| (*c, false))
                .chain(node.hash.map(|c| (c, true)))
            {
                let expected = node
                    .hashes_on_path
                    .saturating_add(u8::from(via_hash))
                    .min(2);
                assert_eq!(
                    self.nodes[child].via_hash, via_hash,
                    "node {child} edge kind"
                );
                assert_eq!(
                    self.nodes[child].hashes_on_path, expected,
                    "node {child} hashes"
                );
                stack.push(child);
            }
        }
        assert_eq!(bindings, self.len, "len disagrees with the bindings held");
        for &id in &self.free {
            assert!(!reached[id], "free slot {id} is reachable");
            assert!(self.nodes[id].is_empty(), "free slot {id} holds data");
        }
        let live = reached.iter().filter(|r| **r).count();
        assert_eq!(
            live + self.free.len(),
            self.nodes.len(),
            "a slot is neither live nor free"
        );
    }

    /// The automaton walk behind [`TopicIndex::route`].
    ///
    /// `current` holds the nodes that the words read so far can reach, closed under `#` edges
    /// (a `#` may match zero words). A word moves each active node along its literal edge and
    /// its `*` edge, and keeps every node reached through `#` (which absorbs the word). The
    /// bindings of the nodes active after the last word are the matches, as in RabbitMQ's
    /// `trie_match`, which walks the same edges depth-first.
    ///
    /// A node reached by a literal or `*` edge has one parent, active at most once per step, so
    /// it is added at most once. A `#` node can be added both as a survivor and through its
    /// parent, but only if its path holds two `#` edges (with one, its parent is active at one
    /// step only); just those are checked against `next`, so each binding is reported once
    /// and the walk never repeats work, where a naive backtracking walk is exponential in the
    /// number of `#`s.
    fn route_with(&self, routing_key: &str, scratch: &mut Scratch, out: &mut Vec<D>) {
        let Scratch { current, next } = scratch;
        current.clear();
        self.push_closed(current, ROOT);
        for word in words(routing_key) {
            if current.is_empty() {
                return;
            }
            next.clear();
            for &id in current.iter() {
                let node = &self.nodes[id];
                if node.via_hash {
                    // Its `#` children are in `current` too (closure), so they survive as well.
                    self.push_once(next, id);
                }
                // A routing-key word "*" or "#" is a literal word; no literal edge has that
                // label, so it only follows the wildcard edges, as any other word does.
                if let Some(&child) = node.children.get(word) {
                    self.push_closed(next, child);
                }
                if let Some(child) = node.star {
                    self.push_closed(next, child);
                }
            }
            std::mem::swap(current, next);
        }
        for &id in current.iter() {
            out.extend_from_slice(&self.nodes[id].dests);
        }
    }

    /// Adds `id` and the chain of `#` nodes below it (`a.#.#` matches `a`) to `set`.
    fn push_closed(&self, set: &mut Vec<NodeId>, id: NodeId) {
        self.push_once(set, id);
        let mut node = id;
        while let Some(hash) = self.nodes[node].hash {
            self.push_once(set, hash);
            node = hash;
        }
    }

    /// Adds `id` to `set` unless it is already there. Only a `#` node with another `#` above
    /// it can be offered twice in one step (see `route_with`), so only those pay for the scan.
    fn push_once(&self, set: &mut Vec<NodeId>, id: NodeId) {
        let node = &self.nodes[id];
        let may_repeat = node.via_hash && node.hashes_on_path >= 2;
        if !may_repeat || !set.contains(&id) {
            set.push(id);
        }
    }

    fn child(&self, id: NodeId, edge: Edge<'_>) -> Option<NodeId> {
        let node = &self.nodes[id];
        match edge {
            Edge::Literal(word) => node.children.get(word).copied(),
            Edge::Star => node.star,
            Edge::Hash => node.hash,
        }
    }

    fn child_or_insert(&mut self, id: NodeId, edge: Edge<'_>) -> NodeId {
        if let Some(child) = self.child(id, edge) {
            return child;
        }
        let via_hash = matches!(edge, Edge::Hash);
        let hashes = self.nodes[id]
            .hashes_on_path
            .saturating_add(u8::from(via_hash))
            .min(2);
        let child = self.alloc_node(Node::new(via_hash, hashes));
        let node = &mut self.nodes[id];
        match edge {
            Edge::Literal(word) => {
                node.children.insert(word.into(), child);
            }
            Edge::Star => node.star = Some(child),
            Edge::Hash => node.hash = Some(child),
        }
        child
    }

    fn remove_edge(&mut self, id: NodeId, edge: Edge<'_>) {
        let node = &mut self.nodes[id];
        let removed = match edge {
            Edge::Literal(word) => node.children.remove(word),
            Edge::Star => node.star.take(),
            Edge::Hash => node.hash.take(),
        };
        assert!(removed.is_some(), "pruned an edge that was not there");
        if node.children.is_empty() && node.children.capacity() > 0 {
            // A node that once fanned out widely keeps its table otherwise.
            node.children = HashMap::new();
        }
    }

    fn alloc_node(&mut self, node: Node<D>) -> NodeId {
        if let Some(id) = self.free.pop() {
            self.nodes[id] = node;
            id
        } else {
            self.nodes.push(node);
            self.nodes.len() - 1
        }
    }

    fn free_node(&mut self, id: NodeId) {
        assert_ne!(id, ROOT, "the root is never freed");
        assert!(
            self.nodes[id].is_empty(),
            "freed node {id} still holds data"
        );
        // Replace rather than keep: drops the node's (empty) allocations.
        self.nodes[id] = Node::new(false, 0);
        self.free.push(id);
    }

    fn live_nodes(&self) -> usize {
        self.nodes.len() - self.free.len()
    }

    /// Renumbers the live nodes into a fresh arena (breadth-first from the root) and drops
    /// the free slots.
    fn compact(&mut self) {
        const UNSET: NodeId = NodeId::MAX;
        let mut old = std::mem::take(&mut self.nodes);
        let mut new_id = vec![UNSET; old.len()];
        let mut order = vec![ROOT];
        new_id[ROOT] = 0;
        let mut i = 0;
        while let Some(&id) = order.get(i) {
            for child in old[id].child_ids() {
                new_id[child] = order.len();
                order.push(child);
            }
            i += 1;
        }
        let mut nodes = Vec::with_capacity(order.len());
        for &id in &order {
            let mut node = std::mem::replace(&mut old[id], Node::new(false, 0));
            for child in node.children.values_mut() {
                *child = new_id[*child];
            }
            node.star = node.star.map(|c| new_id[c]);
            node.hash = node.hash.map(|c| new_id[c]);
            nodes.push(node);
        }
        assert!(
            nodes.iter().flat_map(Node::child_ids).all(|c| c != UNSET),
            "compaction lost a node"
        );
        self.nodes = nodes;
        self.free = Vec::new();
    }
}

/// True when the binding key `pattern` matches `routing_key`: the reference definition, with
/// RabbitMQ's word splitting (see `words`: the empty key has zero words, other keys keep
/// their empty words).
///
/// Dynamic programming over (pattern word, key word), so O(pattern words x key words) time
/// even for patterns full of `#`; it allocates. [`TopicIndex::route`] is the fast path.
pub fn topic_matches(pattern: &str, routing_key: &str) -> bool {
    let key: Vec<&str> = words(routing_key).collect();
    // reach[j]: the pattern words seen so far can match exactly the first j key words.
    let mut reach = vec![false; key.len() + 1];
    reach[0] = true;
    for word in words(pattern) {
        if word == "#" {
            // Zero or more words: reach[j] becomes "some i <= j was reachable".
            let mut any = false;
            for r in &mut reach {
                any |= *r;
                *r = any;
            }
        } else {
            // Exactly one word; go right to left so each step reads the old row.
            for j in (1..reach.len()).rev() {
                reach[j] = reach[j - 1] && (word == "*" || word == key[j - 1]);
            }
            reach[0] = false;
        }
    }
    reach[key.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Routes `key` and returns the sorted destinations.
    fn routed(index: &TopicIndex<u32>, key: &str) -> Vec<u32> {
        let mut out = Vec::new();
        index.route(key, &mut out);
        out.sort_unstable();
        out
    }

    /// True when the trie holding only `pattern` routes `key` to it; also checks that it is
    /// reported at most once.
    fn trie_matches(pattern: &str, key: &str) -> bool {
        let mut index = TopicIndex::new();
        assert!(index.bind(pattern, 7_u32));
        index.check_invariants();
        let out = routed(&index, key);
        assert!(
            out.len() <= 1,
            "{pattern:?} reported {} times for {key:?}",
            out.len()
        );
        !out.is_empty()
    }

    /// Asserts the reference and the trie agree with `expected` for `pattern` and `key`.
    fn check(pattern: &str, key: &str, expected: bool) {
        assert_eq!(
            topic_matches(pattern, key),
            expected,
            "reference: {pattern:?} vs {key:?}"
        );
        assert_eq!(
            trie_matches(pattern, key),
            expected,
            "trie: {pattern:?} vs {key:?}"
        );
    }

    /// An independent, deliberately naive definition (backtracking over word slices, with
    /// RabbitMQ's splitting) to cross-check the dynamic-programming reference.
    fn naive_matches(pattern: &str, key: &str) -> bool {
        fn go(pattern: &[&str], key: &[&str]) -> bool {
            match pattern.split_first() {
                None => key.is_empty(),
                Some((&"#", rest)) => (0..=key.len()).any(|skip| go(rest, &key[skip..])),
                Some((word, rest)) => key.split_first().is_some_and(|(first, key_rest)| {
                    (*word == "*" || word == first) && go(rest, key_rest)
                }),
            }
        }
        let split = |s: &str| -> Vec<String> {
            if s.is_empty() {
                Vec::new()
            } else {
                s.split('.').map(str::to_owned).collect()
            }
        };
        let (p, k) = (split(pattern), split(key));
        let p: Vec<&str> = p.iter().map(String::as_str).collect();
        let k: Vec<&str> = k.iter().map(String::as_str).collect();
        go(&p, &k)
    }

    // RabbitMQ splits the routing key with `split_topic_key_binary(<<>>) -> []`: the empty
    // key has zero words, so `*` (exactly one word) cannot match it, while `#` and the empty
    // binding key do.
    #[test]
    fn empty_routing_key_has_zero_words() {
        check("*", "", false);
        check("#", "", true);
        check("", "", true);
        check("#.#", "", true);
        check("#.*", "", false);
        check("a", "", false);
    }

    // The empty binding key is also zero words (`split_topic_key(<<>>, [], []) -> []` in
    // 3.x), so it matches only the empty routing key, not a key of one empty word: no such
    // key exists, since "" is zero words and "." is two empty words.
    #[test]
    fn empty_binding_key_matches_only_the_empty_routing_key() {
        check("", ".", false);
        check("", "a", false);
        check(".", ".", true);
        check(".", "", false);
    }

    // `binary:split(Key, <<".">>, [global])` keeps empty words: "a..b" is three words,
    // ".a" and "a." are two, so `*` matches an empty word like any other.
    #[test]
    fn empty_words_are_words() {
        check("a.*.b", "a..b", true);
        check("a..b", "a..b", true);
        check("a..b", "a.b", false);
        check("a.b", "a..b", false);
        check("*.a", ".a", true);
        check("a.*", "a.", true);
        check("a", "a.", false);
        check("*.*", ".", true);
        check("*", ".", false);
        check("#", ".", true);
        check("#", "..", true);
        check("a.#", "a.", true);
        check("a.#", "a..b", true);
    }

    // `#` matches zero or more words anywhere (`trie_match_skip_any`), `*` exactly one.
    #[test]
    fn hash_matches_zero_or_more_words_and_star_exactly_one() {
        check("#", "a.b.c", true);
        check("a.#", "a", true);
        check("#.a", "a", true);
        check("a.#.b", "a.b", true);
        check("a.#.b", "a.x.y.b", true);
        check("a.#.b", "a.x.y.c", false);
        check("a.*", "a", false);
        check("a.*", "a.b.c", false);
        check("*.b.*", "a.b.c", true);
        check("#.b.#", "b", true);
        check("#.*.#", "", false);
        check("#.*.#", "a.b", true);
        check("a.b", "a.b", true);
        check("a.b", "a.bb", false);
    }

    // A routing key is never a pattern: its words "*" and "#" are literal (RabbitMQ looks
    // them up as edge labels, which only reach nodes the wildcard edges reach anyway).
    #[test]
    fn wildcards_in_routing_keys_are_literal_words() {
        check("a", "*", false);
        check("a", "#", false);
        check("a.b", "a.#", false);
        check("*", "#", true);
        check("a.#", "a.#", true);
        check("#", "*.#", true);
    }

    #[test]
    fn each_matching_binding_is_reported_once() {
        // "#.#" and "a.#.#.b" match "a.b.b.b" along several paths; RabbitMQ (before its memo)
        // returned a destination once per path and deduplicated later.
        let mut index = TopicIndex::new();
        for pattern in ["#.#", "#", "a.#.#.b", "#.b.#", "a.*.#", "#.#.#"] {
            assert!(index.bind(pattern, 1_u32));
        }
        assert!(index.bind("#.b.#", 2));
        assert_eq!(routed(&index, "a.b.b.b"), [1, 1, 1, 1, 1, 1, 2]);
        assert_eq!(routed(&index, ""), [1, 1, 1]);
    }

    // The per-thread scratch keeps `TopicIndex` free of interior mutability, so a broker
    // holding it can still be shared behind an `RwLock` or an `Arc`.
    #[test]
    fn index_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<TopicIndex<u32>>();
    }

    #[test]
    fn bind_and_unbind_report_whether_anything_changed() {
        let mut index = TopicIndex::new();
        assert!(index.bind("a.*", 1_u32));
        assert!(!index.bind("a.*", 1));
        assert!(index.bind("a.*", 2));
        assert!(index.bind("a.#", 1));
        assert_eq!(index.len(), 3);
        assert_eq!(routed(&index, "a.b"), [1, 1, 2]);
        assert!(!index.unbind("a.b", 1));
        assert!(!index.unbind("a.*", 3));
        assert!(!index.unbind("a.*.c", 1));
        assert!(index.unbind("a.*", 1));
        assert!(!index.unbind("a.*", 1));
        assert_eq!(routed(&index, "a.b"), [1, 2]);
        index.check_invariants();
        assert_eq!(index.len(), 2);
    }

    #[test]
    fn unbinding_everything_leaves_only_the_root() {
        let mut index = TopicIndex::new();
        let patterns: Vec<String> = (0..300)
            .map(|i| format!("stock.s{}.#.v{}.*", i % 37, i % 11))
            .collect();
        for (i, pattern) in patterns.iter().enumerate() {
            index.bind(pattern, u32::try_from(i % 5).unwrap());
        }
        index.check_invariants();
        assert!(index.node_count() > 300);
        for (i, pattern) in patterns.iter().enumerate() {
            index.unbind(pattern, u32::try_from(i % 5).unwrap());
            index.check_invariants();
        }
        assert!(index.is_empty());
        assert_eq!(index.node_count(), 1);
        // Compaction ran, so the arena does not keep the peak's slots.
        assert!(
            index.nodes.len() <= FREE_SLOTS_COMPACT_MIN + 1,
            "{}",
            index.nodes.len()
        );
        assert!(routed(&index, "stock.s1.x.v1.y").is_empty());
    }

    #[test]
    fn routing_survives_compaction() {
        let mut index = TopicIndex::new();
        for i in 0..500_u32 {
            index.bind(&format!("k{i}.#"), i);
        }
        index.bind("k7.*", 1000);
        index.bind("#.k7.#", 1001);
        for i in 0..500_u32 {
            if i != 7 {
                index.unbind(&format!("k{i}.#"), i);
            }
        }
        index.check_invariants();
        assert!(index.nodes.len() < 2 * index.node_count() + FREE_SLOTS_COMPACT_MIN);
        assert_eq!(routed(&index, "k7.x"), [7, 1000, 1001]);
        assert_eq!(routed(&index, "k7"), [7, 1001]);
    }

    // RabbitMQ memoises (node, words) once two '#' are taken because the plain walk is
    // exponential; ours keeps a set of nodes per word, so many '#' stay cheap.
    #[test]
    fn many_hashes_do_not_blow_up() {
        let pattern = ["#"; 40].join(".") + ".z";
        let key = ["a"; 60].join(".");
        check(&pattern, &key, false);
        check(&pattern, &(key.clone() + ".z"), true);
    }

    /// Keys and patterns over a small alphabet with empty words, so that collisions are common.
    fn key_strategy() -> impl Strategy<Value = String> {
        prop::collection::vec(prop::sample::select(vec!["a", "b", ""]), 0..5)
            .prop_map(|words| words.join("."))
    }

    fn pattern_strategy() -> impl Strategy<Value = String> {
        prop::collection::vec(prop::sample::select(vec!["a", "b", "", "*", "#"]), 0..5)
            .prop_map(|words| words.join("."))
    }

    #[derive(Debug, Clone)]
    enum Op {
        Bind(usize, u32),
        Unbind(usize, u32),
        Route(String),
    }

    fn op_strategy() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (0..8_usize, 0..4_u32).prop_map(|(p, d)| Op::Bind(p, d)),
            2 => (0..8_usize, 0..4_u32).prop_map(|(p, d)| Op::Unbind(p, d)),
            3 => key_strategy().prop_map(Op::Route),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn trie_agrees_with_reference(pattern in pattern_strategy(), key in key_strategy()) {
            prop_assert_eq!(trie_matches(&pattern, &key), topic_matches(&pattern, &key));
        }

        #[test]
        fn reference_agrees_with_naive_backtracking(
            pattern in pattern_strategy(),
            key in key_strategy(),
        ) {
            prop_assert_eq!(topic_matches(&pattern, &key), naive_matches(&pattern, &key));
        }

        /// Random binds, unbinds and routes against a list of (pattern, destination) pairs;
        /// the invariants are checked after every step.
        #[test]
        fn bind_unbind_route_agree_with_a_list_model(
            patterns in prop::collection::vec(pattern_strategy(), 8),
            ops in prop::collection::vec(op_strategy(), 1..60),
        ) {
            let mut index = TopicIndex::new();
            let mut model: Vec<(String, u32)> = Vec::new();
            for op in ops {
                match op {
                    Op::Bind(p, dest) => {
                        let pattern = &patterns[p];
                        let absent = !model.iter().any(|(mp, md)| mp == pattern && *md == dest);
                        if absent {
                            model.push((pattern.clone(), dest));
                        }
                        prop_assert_eq!(index.bind(pattern, dest), absent);
                    }
                    Op::Unbind(p, dest) => {
                        let pattern = &patterns[p];
                        let before = model.len();
                        model.retain(|(mp, md)| !(mp == pattern && *md == dest));
                        prop_assert_eq!(index.unbind(pattern, dest), model.len() != before);
                    }
                    Op::Route(key) => {
                        let mut expected: Vec<u32> = model
                            .iter()
                            .filter(|(mp, _)| naive_matches(mp, &key))
                            .map(|(_, d)| *d)
                            .collect();
                        expected.sort_unstable();
                        prop_assert_eq!(routed(&index, &key), expected, "key {:?}", key);
                    }
                }
                index.check_invariants();
                prop_assert_eq!(index.len(), model.len());
            }
            for (pattern, dest) in &model {
                prop_assert!(index.unbind(pattern, *dest));
            }
            prop_assert_eq!(index.node_count(), 1);
        }
    }
}
