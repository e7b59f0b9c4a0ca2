//! No module of a library crate imports a module that imports it back (a parent and its children
//! aside: a child's `super::` is how a type's impl blocks are split into files). A circle means
//! two files that cannot be read, or moved, one without the other.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module path of a file under `src` (`lib.rs` and `main.rs` are the root, `a/mod.rs` is `a`).
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).expect("under src").with_extension("");
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib" | "main")) {
        parts.pop();
    }
    parts
}

/// The modules `text` names by a `crate::` or `super::` path, resolved to the deepest module of
/// `modules` each path reaches (an item's path ends in its module).
fn imports(own: &[String], text: &str, modules: &BTreeSet<Vec<String>>) -> BTreeSet<Vec<String>> {
    let mut found = BTreeSet::new();
    for line in text.lines().map(|l| l.split("//").next().unwrap_or_default()) {
        for (at, _) in line.match_indices("crate::").chain(line.match_indices("super::")) {
            let preceded = line[..at].chars().last().is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':');
            if preceded {
                continue; // `leasehold_core::…`, or the second `super::` of `super::super::`
            }
            let mut path: Vec<String> = if line[at..].starts_with("crate::") { Vec::new() } else { own.to_vec() };
            let mut rest = &line[at..];
            while let Some(next) = rest.strip_prefix("super::") {
                path.pop();
                rest = next;
            }
            rest = rest.strip_prefix("crate::").unwrap_or(rest);
            let mut reached = path.clone();
            for segment in rest.split("::") {
                let name: String = segment.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                path.push(name);
                if !modules.contains(&path) {
                    break;
                }
                reached = path.clone();
            }
            found.insert(reached);
        }
    }
    found
}

fn is_ancestor(a: &[String], b: &[String]) -> bool {
    b.starts_with(a)
}

#[test]
fn no_module_imports_a_module_that_imports_it_back() {
    let mut circles = Vec::new();
    let mut crates_seen = 0;
    for group in ["shared", "services"] {
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(repo().join(group))
            .expect("the group exists")
            .map(|e| e.expect("an entry").path().join("src"))
            .filter(|src| src.is_dir())
            .collect();
        dirs.sort();
        for src in dirs {
            crates_seen += 1;
            let mut files = Vec::new();
            rust_files(&src, &mut files);
            let modules: BTreeSet<Vec<String>> = files.iter().map(|f| module_of(&src, f)).collect();
            let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
            for f in &files {
                let own = module_of(&src, f);
                let text = std::fs::read_to_string(f).expect("a readable source file");
                let named = imports(&own, &text, &modules);
                edges.entry(own.clone()).or_default().extend(named.into_iter().filter(|m| *m != own));
            }
            for (a, named) in &edges {
                for b in named.iter().filter(|b| *a < **b && !is_ancestor(a, b) && !is_ancestor(b, a)) {
                    if edges.get(b).is_some_and(|back| back.contains(a)) {
                        circles.push(format!("{}: {} <-> {}", src.display(), a.join("::"), b.join("::")));
                    }
                }
            }
        }
    }
    assert!(crates_seen >= 10, "found only {crates_seen} crates under shared/ and services/");
    assert!(circles.is_empty(), "modules importing each other:\n{}", circles.join("\n"));
}

/// The check sees a circle where there is one, and none between a parent and its child.
#[test]
fn the_import_check_finds_a_circle_and_spares_a_parent_and_child() {
    let modules: BTreeSet<Vec<String>> =
        [vec![], vec!["a".into()], vec!["b".into()], vec!["a".into(), "c".into()]].into_iter().collect();
    let a = imports(&["a".into()], "use crate::b::Thing;\nmod c;", &modules);
    let b = imports(&["b".into()], "pub fn f() { crate::a::c::g() }", &modules);
    let c = imports(&["a".into(), "c".into()], "use super::Thing; // crate::b::not_this\n", &modules);
    assert!(a.contains(&vec!["b".to_string()]));
    assert!(b.contains(&vec!["a".to_string(), "c".to_string()]), "the deepest module: {b:?}");
    assert_eq!(c, BTreeSet::from([vec!["a".to_string()]]), "super:: resolved, comments skipped");
    let outside = imports(&["a".into()], "use leasehold_core::x; let y = self::z;", &modules);
    assert!(outside.is_empty(), "{outside:?}");
}
