//! Topic exchange routing: binding keys are dot-separated words where `*` matches exactly one
//! word and `#` matches zero or more words.
//!
//! FOUNDATION STUB: a correct but linear index. The routing work replaces it with an index whose
//! cost grows with the routing key, not with the number of bindings; the API stays.

/// Bindings of one topic exchange, from binding key to destination `D`.
#[derive(Debug, Clone)]
pub struct TopicIndex<D> {
    bindings: Vec<(String, D)>,
}

impl<D> Default for TopicIndex<D> {
    fn default() -> Self {
        Self {
            bindings: Vec::new(),
        }
    }
}

impl<D: Copy + Eq> TopicIndex<D> {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the binding `pattern -> dest`; returns false if it was already there.
    pub fn bind(&mut self, pattern: &str, dest: D) -> bool {
        if self
            .bindings
            .iter()
            .any(|(p, d)| p == pattern && *d == dest)
        {
            return false;
        }
        self.bindings.push((pattern.to_owned(), dest));
        true
    }

    /// Removes the binding `pattern -> dest`; returns false if it was not there.
    pub fn unbind(&mut self, pattern: &str, dest: D) -> bool {
        let before = self.bindings.len();
        self.bindings.retain(|(p, d)| !(p == pattern && *d == dest));
        self.bindings.len() != before
    }

    /// Appends to `out` every destination with a binding that matches `routing_key`. A
    /// destination bound by several matching patterns is appended once per pattern; callers
    /// deduplicate.
    pub fn route(&self, routing_key: &str, out: &mut Vec<D>) {
        for (pattern, dest) in &self.bindings {
            if topic_matches(pattern, routing_key) {
                out.push(*dest);
            }
        }
    }

    /// Number of bindings.
    pub fn len(&self) -> usize {
        self.bindings.len()
    }

    /// True when there are no bindings.
    pub fn is_empty(&self) -> bool {
        self.bindings.is_empty()
    }
}

/// True when the binding key `pattern` matches `routing_key`: the reference definition.
pub fn topic_matches(pattern: &str, routing_key: &str) -> bool {
    let pattern: Vec<&str> = pattern.split('.').collect();
    let key: Vec<&str> = routing_key.split('.').collect();
    matches_words(&pattern, &key)
}

fn matches_words(pattern: &[&str], key: &[&str]) -> bool {
    match pattern.split_first() {
        None => key.is_empty(),
        Some((&"#", rest)) => {
            (0..=key.len()).any(|skip| matches_words(rest, key.get(skip..).unwrap_or(&[])))
        }
        Some((word, rest)) => match key.split_first() {
            Some((first, key_rest)) => {
                (*word == "*" || word == first) && matches_words(rest, key_rest)
            }
            None => false,
        },
    }
}
