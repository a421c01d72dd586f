//! A crate's modules as files, what each names, and where those names resolve: enough of
//! Rust's path resolution to draw the import graph between a crate's modules.
//!
//! A module "imports" another when its code (not comments, not `#[cfg(test)]` modules) names
//! a path that resolves into it: a `use` (not a `pub use`: a re-export is the API, not a
//! dependency), or a qualified path in code (`crate::a::f()`, `super::X`, `child::Y`). A name
//! re-exported by a module (`pub use a::X`, `pub use a::*`) resolves to where it is defined.
//! Method calls need no path and are not seen.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// A module's path inside its crate (`[]` for the crate root).
pub type ModPath = Vec<String>;

/// One module: its file, what it defines, re-exports and names.
#[derive(Debug, Default)]
pub struct Module {
    pub file: PathBuf,
    defines: BTreeSet<String>,
    /// `pub use` re-exports: exported name -> the path it names (relative to this module).
    reexports: BTreeMap<String, Vec<String>>,
    /// `pub use path::*`.
    globs: Vec<Vec<String>>,
    /// Paths this module names in code, with the line they are on.
    names: Vec<(Vec<String>, usize)>,
}

/// A crate's modules, by path.
#[derive(Debug, Default)]
pub struct Crate {
    pub modules: BTreeMap<ModPath, Module>,
}

impl Crate {
    /// Reads every `.rs` file under `src` (not `src/bin`, whose files are crates of their own;
    /// `main.rs` only where there is no `lib.rs`).
    pub fn read(src: &Path) -> Crate {
        let mut files = Vec::new();
        rust_files(src, &mut files);
        let has_lib = src.join("lib.rs").exists();
        let mut krate = Crate::default();
        for file in files {
            let rel = file.strip_prefix(src).unwrap();
            if rel.starts_with("bin") || (has_lib && rel == Path::new("main.rs")) {
                continue;
            }
            let path = module_path(rel);
            let text = fs::read_to_string(&file).unwrap();
            krate.modules.insert(path, Module::parse(&file, &text));
        }
        krate
    }

    /// The import edges `from -> to` (`from != to`), each with one line as evidence.
    pub fn edges(&self) -> BTreeMap<(ModPath, ModPath), usize> {
        let mut edges = BTreeMap::new();
        for (from, module) in &self.modules {
            for (segs, line) in &module.names {
                let Some(to) = self.resolve(from, segs, 0) else {
                    continue;
                };
                if &to != from {
                    edges.entry((from.clone(), to)).or_insert(*line);
                }
            }
        }
        edges
    }

    /// The module a path named in `at` resolves into, or `None` for another crate's path.
    fn resolve(&self, at: &ModPath, segs: &[String], depth: usize) -> Option<ModPath> {
        if depth > 16 || segs.is_empty() {
            return None;
        }
        let mut cur = match segs[0].as_str() {
            "crate" => Vec::new(),
            "super" | "self" => at.clone(),
            first if self.modules.contains_key(&child(at, first)) => at.clone(),
            _ => return None,
        };
        let mut rest = if segs[0] == "crate" { &segs[1..] } else { segs };
        while let Some(first) = rest.first() {
            match first.as_str() {
                "super" => {
                    cur.pop();
                }
                "self" => {}
                name if self.modules.contains_key(&child(&cur, name)) => cur.push(name.into()),
                _ => break,
            }
            rest = &rest[1..];
        }
        let Some(name) = rest.first() else {
            return Some(cur);
        };
        Some(self.resolve_name(&cur, name, depth).unwrap_or(cur))
    }

    /// Where `name`, looked up in module `at`, is defined (following re-exports).
    fn resolve_name(&self, at: &ModPath, name: &str, depth: usize) -> Option<ModPath> {
        let module = self.modules.get(at)?;
        if module.defines.contains(name) {
            return Some(at.clone());
        }
        if let Some(target) = module.reexports.get(name) {
            return self.resolve(at, target, depth + 1);
        }
        module.globs.iter().find_map(|glob| {
            let source = self.resolve(at, glob, depth + 1)?;
            let found = self.resolve_name(&source, name, depth + 1)?;
            Some(found)
        })
    }
}

fn child(parent: &ModPath, name: &str) -> ModPath {
    let mut path = parent.clone();
    path.push(name.to_owned());
    path
}

/// Every `.rs` file under `dir`, at any depth.
pub fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `lib.rs` -> `[]`, `a/mod.rs` -> `[a]`, `a/b.rs` -> `[a, b]`.
fn module_path(rel: &Path) -> ModPath {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let file = parts.pop().unwrap();
    let stem = file.trim_end_matches(".rs");
    let is_root = parts.is_empty() && matches!(stem, "lib" | "main");
    if stem != "mod" && !is_root {
        parts.push(stem.to_owned());
    }
    parts
}

impl Module {
    fn parse(file: &Path, text: &str) -> Module {
        let code = without_test_modules(&blank_comments_and_strings(text));
        let mut module = Module {
            file: file.to_owned(),
            ..Module::default()
        };
        module.defines = definitions(&code);
        let mut rest_of_code = code.clone();
        for (start, end) in use_items(&code) {
            let item = &code[start..end];
            let line = line_of(&code, start);
            let public = item.trim_start().starts_with("pub");
            let tree = item[item.find("use").unwrap() + 3..].trim_end_matches(';');
            for (path, alias) in expand_use_tree(tree) {
                match (public, alias.as_deref()) {
                    (true, Some("*")) => module.globs.push(path),
                    (true, Some(alias)) => {
                        module.reexports.insert(alias.to_owned(), path);
                    }
                    (true, None) => {}
                    (false, _) => module.names.push((path, line)),
                }
            }
            // Keep the line count; blank the item so its paths are not read twice.
            let blank: String = item
                .chars()
                .map(|c| if c == '\n' { '\n' } else { ' ' })
                .collect();
            rest_of_code.replace_range(start..end, &blank);
        }
        module.names.extend(code_paths(&rest_of_code));
        module
    }
}

/// The text with comments removed and string/char literal contents blanked (newlines kept),
/// so that braces, `use` and `::` are only ever code.
fn blank_comments_and_strings(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let keep_newlines = |s: &[char]| -> String {
        s.iter()
            .map(|&c| if c == '\n' { '\n' } else { ' ' })
            .collect()
    };
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            let end = (i..chars.len())
                .find(|&j| chars[j] == '\n')
                .unwrap_or(chars.len());
            i = end;
        } else if c == '/' && next == Some('*') {
            let end = (i + 2..chars.len().saturating_sub(1))
                .find(|&j| chars[j] == '*' && chars[j + 1] == '/')
                .map_or(chars.len(), |j| j + 2);
            out.push_str(&keep_newlines(&chars[i..end]));
            i = end;
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && is_raw_start(&chars, i) {
            let hashes = chars[i + 1..].iter().take_while(|&&h| h == '#').count();
            let body = i + 2 + hashes;
            let closing: Vec<char> = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            let end = (body..chars.len())
                .find(|&j| chars[j..].starts_with(&closing))
                .map_or(chars.len(), |j| j + closing.len());
            out.push_str("\"\"");
            out.push_str(&keep_newlines(&chars[i..end]));
            i = end;
        } else if c == '"' {
            let mut j = i + 1;
            while j < chars.len() && chars[j] != '"' {
                j += if chars[j] == '\\' { 2 } else { 1 };
            }
            let end = (j + 1).min(chars.len());
            out.push_str("\"\"");
            out.push_str(&keep_newlines(&chars[i..end]));
            i = end;
        } else if c == '\'' {
            // A char literal ('x', '\n', '\u{..}'), else a lifetime or label.
            let end = if next == Some('\\') {
                (i + 2..chars.len())
                    .find(|&j| chars[j] == '\'')
                    .map(|j| j + 1)
            } else if chars.get(i + 2) == Some(&'\'') {
                Some(i + 3)
            } else {
                None
            };
            if let Some(end) = end {
                out.push_str("' '");
                i = end;
            } else {
                out.push(c);
                i += 1;
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// `r"` or `r#"` starting a raw string (not the end of an identifier such as `for`).
fn is_raw_start(chars: &[char], i: usize) -> bool {
    let after_ident = i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_');
    let hashes = chars[i + 1..].iter().take_while(|&&h| h == '#').count();
    !after_ident && chars.get(i + 1 + hashes) == Some(&'"')
}

/// The code with every `#[cfg(test)] mod name { .. }` blanked out.
fn without_test_modules(code: &str) -> String {
    let mut out = code.to_owned();
    let mut from = 0;
    while let Some(at) = out[from..].find("#[cfg(test)]").map(|p| p + from) {
        let after = &out[at + "#[cfg(test)]".len()..];
        let trimmed = after.trim_start();
        let is_mod = trimmed.starts_with("mod ") || trimmed.starts_with("pub(crate) mod ");
        let open = after.find('{').map(|p| p + at + "#[cfg(test)]".len());
        let semicolon = after.find(';').map(|p| p + at + "#[cfg(test)]".len());
        match (is_mod, open) {
            (true, Some(open)) if semicolon.is_none_or(|s| s > open) => {
                let end = matching_brace(&out, open).unwrap_or(out.len());
                let blank: String = out[at..end]
                    .chars()
                    .map(|c| if c == '\n' { '\n' } else { ' ' })
                    .collect();
                out.replace_range(at..end, &blank);
                from = end;
            }
            _ => from = at + 1,
        }
    }
    out
}

fn matching_brace(code: &str, open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (i, c) in code[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(open + i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Byte ranges of `use` items (`[pub[(..)]] use ...;`).
fn use_items(code: &str) -> Vec<(usize, usize)> {
    let mut items = Vec::new();
    let bytes = code.as_bytes();
    let mut from = 0;
    while let Some(at) = code[from..].find("use ").map(|p| p + from) {
        from = at + 4;
        if at > 0 && is_ident(bytes[at - 1] as char) {
            continue;
        }
        // Include a `pub` / `pub(crate)` before it on the same line.
        let line_start = code[..at].rfind('\n').map_or(0, |p| p + 1);
        let before = code[line_start..at].trim();
        let start = if before.starts_with("pub") && !before.contains(['{', ';', '=']) {
            line_start + code[line_start..].find("pub").unwrap()
        } else if before.is_empty() {
            at
        } else {
            continue;
        };
        let Some(end) = code[at..].find(';').map(|p| p + at + 1) else {
            break;
        };
        items.push((start, end));
        from = end;
    }
    items
}

/// Expands a use tree into `(path, alias)`: the alias is the name it binds (`*` for a glob).
fn expand_use_tree(tree: &str) -> Vec<(Vec<String>, Option<String>)> {
    let spaced = tree.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut compact = String::with_capacity(spaced.len());
    for (i, c) in spaced.char_indices() {
        let punct = |c: Option<char>| c.is_some_and(|c| matches!(c, ':' | '{' | '}' | ','));
        let next = spaced[i + c.len_utf8()..].chars().next();
        if c == ' ' && (punct(compact.chars().last()) || punct(next)) {
            continue;
        }
        compact.push(c);
    }
    let mut out = Vec::new();
    expand(&compact, &[], &mut out);
    out
}

fn expand(tree: &str, prefix: &[String], out: &mut Vec<(Vec<String>, Option<String>)>) {
    let tree = tree.trim().trim_start_matches("::");
    if let Some(open) = tree.find('{') {
        let mut base = prefix.to_vec();
        base.extend(split_path(tree[..open].trim_end_matches("::")));
        let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
        for part in split_top_level(inner) {
            expand(part, &base, out);
        }
        return;
    }
    let (path, alias) = match tree.split_once(" as ") {
        Some((path, alias)) => (path.trim(), Some(alias.trim().to_owned())),
        None => (tree, None),
    };
    let mut full = prefix.to_vec();
    full.extend(split_path(path));
    let last = full.last().cloned();
    match last.as_deref() {
        None | Some("") => {}
        Some("*") => {
            full.pop();
            out.push((full, Some("*".into())));
        }
        Some("self") => {
            full.pop();
            let name = alias.or_else(|| full.last().cloned());
            out.push((full, name));
        }
        Some(name) => {
            let name = alias.unwrap_or_else(|| name.to_owned());
            out.push((full, Some(name)));
        }
    }
}

fn split_path(path: &str) -> Vec<String> {
    path.split("::")
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

fn split_top_level(inner: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts.into_iter().filter(|p| !p.trim().is_empty()).collect()
}

/// Names a module defines at any depth (types, functions, constants, modules, macros).
fn definitions(code: &str) -> BTreeSet<String> {
    let words: Vec<&str> = code
        .split(|c: char| !is_ident(c) && c != '!')
        .filter(|w| !w.is_empty())
        .collect();
    let kinds = [
        "struct",
        "enum",
        "trait",
        "type",
        "fn",
        "const",
        "static",
        "mod",
        "union",
        "macro_rules!",
    ];
    words
        .windows(2)
        .filter(|w| kinds.contains(&w[0]))
        .map(|w| w[1].trim_end_matches('!').to_owned())
        .collect()
}

/// Paths of two or more segments in code: `crate::..`, `super::..`, `self::..`, `name::..`.
fn code_paths(code: &str) -> Vec<(Vec<String>, usize)> {
    let mut paths = Vec::new();
    let chars: Vec<(usize, char)> = code.char_indices().collect();
    let mut i = 0;
    while i < chars.len() {
        let (at, c) = chars[i];
        let starts_word = i == 0 || {
            let p = chars[i - 1].1;
            !is_ident(p) && p != ':' && p != '$' && p != '.'
        };
        if !(starts_word && (c.is_alphabetic() || c == '_')) {
            i += 1;
            continue;
        }
        let mut end = i;
        let mut segs = Vec::new();
        loop {
            let word_end = (end..chars.len())
                .find(|&j| !is_ident(chars[j].1))
                .unwrap_or(chars.len());
            segs.push(chars[end..word_end].iter().map(|(_, c)| c).collect());
            let colons = chars.get(word_end).map(|c| c.1) == Some(':')
                && chars.get(word_end + 1).map(|c| c.1) == Some(':');
            let next_ident = chars
                .get(word_end + 2)
                .is_some_and(|c| c.1.is_alphabetic() || c.1 == '_');
            if colons && next_ident {
                end = word_end + 2;
            } else {
                end = word_end;
                break;
            }
        }
        if segs.len() > 1 {
            paths.push((segs, line_of(code, at)));
        }
        i = end.max(i + 1);
    }
    paths
}

fn line_of(code: &str, byte: usize) -> usize {
    code[..byte].matches('\n').count() + 1
}

/// The strongly connected components of more than one module (Tarjan's algorithm).
pub fn circles(edges: &BTreeMap<(ModPath, ModPath), usize>) -> Vec<Vec<ModPath>> {
    let mut graph: BTreeMap<&ModPath, Vec<&ModPath>> = BTreeMap::new();
    for (from, to) in edges.keys() {
        graph.entry(from).or_default().push(to);
        graph.entry(to).or_default();
    }
    let nodes: Vec<&ModPath> = graph.keys().copied().collect();
    let index_of: BTreeMap<&ModPath, usize> =
        nodes.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    let mut state = Tarjan {
        index: vec![None; nodes.len()],
        low: vec![0; nodes.len()],
        on_stack: vec![false; nodes.len()],
        stack: Vec::new(),
        next: 0,
        components: Vec::new(),
    };
    let adjacency: Vec<Vec<usize>> = nodes
        .iter()
        .map(|n| graph[n].iter().map(|t| index_of[t]).collect())
        .collect();
    for v in 0..nodes.len() {
        if state.index[v].is_none() {
            state.visit(v, &adjacency);
        }
    }
    state
        .components
        .into_iter()
        .filter(|c| c.len() > 1)
        .map(|c| c.into_iter().map(|i| nodes[i].clone()).collect())
        .collect()
}

struct Tarjan {
    index: Vec<Option<usize>>,
    low: Vec<usize>,
    on_stack: Vec<bool>,
    stack: Vec<usize>,
    next: usize,
    components: Vec<Vec<usize>>,
}

impl Tarjan {
    fn visit(&mut self, v: usize, adjacency: &[Vec<usize>]) {
        self.index[v] = Some(self.next);
        self.low[v] = self.next;
        self.next += 1;
        self.stack.push(v);
        self.on_stack[v] = true;
        for &w in &adjacency[v] {
            match self.index[w] {
                None => {
                    self.visit(w, adjacency);
                    self.low[v] = self.low[v].min(self.low[w]);
                }
                Some(iw) if self.on_stack[w] => self.low[v] = self.low[v].min(iw),
                Some(_) => {}
            }
        }
        if Some(self.low[v]) == self.index[v] {
            let mut component = Vec::new();
            while let Some(w) = self.stack.pop() {
                self.on_stack[w] = false;
                component.push(w);
                if w == v {
                    break;
                }
            }
            self.components.push(component);
        }
    }
}
