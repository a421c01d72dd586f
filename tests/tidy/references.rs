//! Every reference the sources make to the project's documents resolves inside the
//! repository: a behaviour rule (`S-TTL-7`) to docs/SEMANTICS.md, a convention (`STYLE 3.8`)
//! to a section of docs/STYLE.md, a design section (`DESIGN "Memory"`) to docs/DESIGN.md, and
//! a file named by path (`storage-format.md`, `crates/wal/src/record.rs`) to a file.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use super::{packages, root, rust_files};

/// Every Rust source and manifest of the workspace, and its Markdown (not docs/, which is
/// what they refer to, but README and storage-format.md).
fn sources() -> Vec<PathBuf> {
    let mut files = Vec::new();
    for (dir, _) in packages() {
        for sub in ["src", "tests", "benches"] {
            rust_files(&dir.join(sub), &mut files);
        }
        files.push(dir.join("Cargo.toml"));
    }
    rust_files(&root().join("fuzz"), &mut files);
    files.push(root().join("README.md"));
    files.push(root().join("storage-format.md"));
    files.retain(|f| !f.starts_with(root().join("tools/inspect/tests/golden")));
    files.retain(|f| !f.starts_with(root().join("tests/tidy"))); // its examples
    files
}

/// The file's text with comment markers gone and lines joined by a space, so a citation
/// wrapped over two comment lines reads as one.
fn read(path: &Path) -> String {
    fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| {
            l.trim_start()
                .trim_start_matches('/')
                .trim_start_matches('!')
        })
        .map(str::trim)
        .collect::<Vec<_>>()
        .join(" ")
}

/// `S-TTL-7` style ids defined in docs/SEMANTICS.md: `## Title (S-TTL)` then `7. ...`.
fn defined_rules() -> BTreeSet<String> {
    let mut defined = BTreeSet::new();
    let mut family = None;
    for line in fs::read_to_string(root().join("docs/SEMANTICS.md"))
        .unwrap()
        .lines()
    {
        if line.starts_with("## ") {
            family = line
                .rsplit_once("(S-")
                .and_then(|(_, f)| f.strip_suffix(')'))
                .map(|f| format!("S-{f}"));
        } else if let (Some(family), Some((number, _))) = (&family, line.split_once(". "))
            && !number.is_empty()
            && number.chars().all(|c| c.is_ascii_digit())
        {
            defined.insert(format!("{family}-{number}"));
        }
    }
    defined
}

/// Words of the text that look like `S-ABC-12`.
fn rule_ids(text: &str) -> Vec<String> {
    let mut ids = Vec::new();
    for (at, _) in text.match_indices("S-") {
        let before = text[..at].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric()) {
            continue;
        }
        let rest = &text[at + 2..];
        let family: String = rest.chars().take_while(char::is_ascii_uppercase).collect();
        let tail = &rest[family.len()..];
        let Some(digits) = tail.strip_prefix('-') else {
            continue;
        };
        let number: String = digits.chars().take_while(char::is_ascii_digit).collect();
        if family.len() >= 2 && !number.is_empty() {
            ids.push(format!("S-{family}-{number}"));
        }
    }
    ids
}

#[test]
fn every_rule_cited_is_in_docs_semantics() {
    let defined = defined_rules();
    assert!(defined.len() > 30, "{defined:?}");
    let mut missing = Vec::new();
    for file in sources() {
        for id in rule_ids(&read(&file)) {
            if !defined.contains(&id) {
                missing.push(format!("{}: {id}", file.display()));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "not in docs/SEMANTICS.md:\n{}",
        missing.join("\n")
    );
}

/// `STYLE 3.8` and `STYLE.md 3.8`: the numbers cited.
fn style_sections(text: &str) -> Vec<String> {
    let mut cited = Vec::new();
    for (at, _) in text.match_indices("STYLE") {
        let rest = text[at + 5..].trim_start_matches(".md");
        let rest = rest.trim_start_matches([' ', ',', '§']);
        let rest = rest.strip_prefix("section ").unwrap_or(rest);
        let number: String = rest
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        let number = number.trim_end_matches('.');
        if number.contains('.') {
            cited.push(number.to_owned());
        }
    }
    cited
}

#[test]
fn every_style_section_cited_is_in_docs_style() {
    let style = read(&root().join("docs/STYLE.md"));
    let headings: Vec<&str> = style.lines().filter(|l| l.starts_with('#')).collect();
    let mut missing = Vec::new();
    for file in sources() {
        for number in style_sections(&read(&file)) {
            let heading = format!(" {number} ");
            if !headings.iter().any(|h| h.contains(&heading)) {
                missing.push(format!("{}: STYLE {number}", file.display()));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "no such section in docs/STYLE.md:\n{}",
        missing.join("\n")
    );
}

/// `DESIGN "Memory"`, `DESIGN.md, "Memory"`, `DESIGN.md: "..."`: the quoted words.
fn design_quotes(text: &str) -> Vec<String> {
    let mut quotes = Vec::new();
    for (at, _) in text.match_indices("DESIGN") {
        let rest = text[at + 6..].trim_start_matches(".md");
        let rest = rest.trim_start_matches([',', ':', ' ', '(']);
        let Some(inside) = rest.strip_prefix('"') else {
            continue;
        };
        if let Some((words, _)) = inside.split_once('"') {
            quotes.push(words.to_owned());
        }
    }
    quotes
}

#[test]
fn every_design_section_cited_is_in_docs_design() {
    let design = read(&root().join("docs/DESIGN.md")).to_lowercase();
    let mut missing = Vec::new();
    for file in sources() {
        for quote in design_quotes(&read(&file)) {
            if !design.contains(&quote.to_lowercase()) {
                missing.push(format!("{}: DESIGN \"{quote}\"", file.display()));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "not in docs/DESIGN.md:\n{}",
        missing.join("\n")
    );
}

/// Paths named in the text: `name.md`, and `src/..`, `tests/..`, `crates/..`, `tools/..`,
/// `benches/..` paths ending in `.rs`.
fn named_paths(text: &str) -> Vec<String> {
    let is_path_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/');
    text.split(|c: char| !is_path_char(c))
        .map(|w| w.trim_end_matches('.'))
        .filter(|w| {
            let ext = Path::new(w).extension().and_then(|e| e.to_str());
            let is_md = ext == Some("md") && w.len() > 3;
            let roots = ["src/", "tests/", "crates/", "tools/", "benches/", "docs/"];
            let is_rs = ext == Some("rs") && roots.iter().any(|r| w.starts_with(r));
            (is_md || is_rs) && !w.contains("://")
        })
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_file_named_exists() {
    let mut missing = Vec::new();
    for file in sources() {
        let package = file
            .ancestors()
            .find(|d| d.join("Cargo.toml").exists())
            .unwrap_or(&root())
            .to_owned();
        let here = file.parent().unwrap().to_owned();
        for name in named_paths(&read(&file)) {
            let relative = name.trim_start_matches('/');
            let found = [root(), package.clone(), here.clone()]
                .iter()
                .any(|base| base.join(relative).exists());
            if !found {
                missing.push(format!("{}: {name}", file.display()));
            }
        }
    }
    assert!(missing.is_empty(), "no such file:\n{}", missing.join("\n"));
}
