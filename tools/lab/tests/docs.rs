//! The documents name only what exists: every repository path and relative link in README.md,
//! DEVELOPERS.md and docs/*.md is there (or is one an operator's command creates), and every `leasehold …` or
//! `leasehold-lab …` command they print names real subcommands and flags (asked of the binary's
//! own `--help`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
/// The directories a repository path in the documents starts with.
const TOP_DIRS: [&str; 8] = ["services/", "shared/", "tools/", "deploy/", "docs/", "scripts/", "nats/", "tests/"];
/// Where the documents name files an operator's command writes (`leasehold auth setup --dir
/// nats/prod/auth`), which git ignores.
const WRITTEN_BY_COMMANDS: [&str; 1] = ["nats/prod/auth/"];

fn documents() -> Vec<PathBuf> {
    let root = Path::new(ROOT);
    // Not CHANGELOG.md: history names what is gone.
    let mut docs: Vec<PathBuf> = ["README.md", "DEVELOPERS.md"].iter().map(|f| root.join(f)).collect();
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            docs.push(path);
        }
    }
    docs
}

/// The text between backticks, and each line of a fenced block, in `text`.
fn code_spans(text: &str) -> Vec<String> {
    let mut spans = Vec::new();
    let mut in_block = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_block = !in_block;
            continue;
        }
        if in_block {
            spans.push(line.to_string());
            continue;
        }
        spans.extend(line.split('`').skip(1).step_by(2).map(str::to_string));
    }
    spans
}

/// `services/…`-like words of `span`, without line numbers, items or trailing punctuation;
/// none with placeholders or wildcards.
fn repo_paths(span: &str) -> Vec<String> {
    span.split(|c: char| c.is_whitespace() || matches!(c, '(' | ')' | '"' | '\'' | ',' | '=' | '['))
        .filter(|w| TOP_DIRS.iter().any(|d| w.starts_with(d)))
        .map(|w| w.split([':', '#']).next().unwrap().trim_end_matches(['.', ';', ']']).to_string())
        .filter(|w| !w.contains(['<', '*', '{', '$', '…']))
        .collect()
}

/// Relative links (`](path)`) of `text`, without their anchors.
fn relative_links(text: &str) -> Vec<String> {
    text.split("](")
        .skip(1)
        .filter_map(|rest| rest.split(')').next())
        .filter(|l| !l.starts_with("http") && !l.starts_with('#') && !l.starts_with("mailto:"))
        .map(|l| l.split('#').next().unwrap().to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

#[test]
fn every_path_and_link_in_the_documents_exists() {
    let mut missing = BTreeSet::new();
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap();
        let name = doc.file_name().unwrap().to_string_lossy().to_string();
        for path in code_spans(&text).iter().flat_map(|s| repo_paths(s)) {
            if !Path::new(ROOT).join(&path).exists() && !WRITTEN_BY_COMMANDS.iter().any(|d| path.starts_with(d)) {
                missing.insert(format!("{name}: `{path}`"));
            }
        }
        for link in relative_links(&text) {
            if !doc.parent().unwrap().join(&link).exists() {
                missing.insert(format!("{name}: link ({link})"));
            }
        }
    }
    assert!(missing.is_empty(), "the documents name what does not exist:\n{}", Vec::from_iter(missing).join("\n"));
}

/// `leasehold …` and `leasehold-lab …` command lines of `span`: the words after the program.
fn commands(span: &str) -> Vec<(String, Vec<String>)> {
    let words: Vec<&str> = span.split_whitespace().collect();
    let mut found = Vec::new();
    for (i, w) in words.iter().enumerate() {
        let program = w.rsplit('/').next().unwrap();
        if !matches!(program, "leasehold" | "leasehold-lab") || (i > 0 && !matches!(words[i - 1], "$" | "|" | "&&")) {
            continue;
        }
        let args = words[i + 1..].iter().take_while(|a| !matches!(**a, "|" | "&&" | ";" | "#")).map(|a| a.to_string());
        found.push((program.to_string(), args.collect()));
    }
    found
}

/// The subcommand path of `args`: the words before the first flag, until a placeholder.
fn subcommand_path(args: &[String]) -> Vec<String> {
    args.iter()
        .take_while(|a| !a.starts_with('-'))
        .take_while(|a| a.chars().all(|c| c.is_ascii_lowercase() || c == '-'))
        .cloned()
        .collect()
}

#[test]
fn every_command_the_documents_print_has_its_subcommands_and_flags() {
    let production: BTreeSet<String> =
        <leasehold::ServiceCommand as clap::Subcommand>::augment_subcommands(clap::Command::new("leasehold"))
            .get_subcommands()
            .map(|c| c.get_name().to_string())
            .collect();
    let mut wrong = BTreeSet::new();
    let mut checked = 0;
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap();
        let name = doc.file_name().unwrap().to_string_lossy().to_string();
        for span in code_spans(&text) {
            let span = if span.starts_with("leasehold") { format!("$ {span}") } else { span };
            for (program, args) in commands(&span) {
                let path = subcommand_path(&args);
                let Some(first) = path.first() else { continue };
                if program == "leasehold" && !production.contains(first) {
                    wrong.insert(format!("{name}: `leasehold {first}` is not a command of the production binary"));
                    continue;
                }
                let out = Command::new(env!("CARGO_BIN_EXE_leasehold-lab")).args(&path).arg("--help").output().unwrap();
                let help = String::from_utf8_lossy(&out.stdout);
                if !out.status.success() {
                    wrong.insert(format!("{name}: `{program} {}` is no command", path.join(" ")));
                    continue;
                }
                checked += 1;
                for flag in args.iter().filter(|a| a.starts_with("--")) {
                    let flag = flag.split('=').next().unwrap();
                    if flag != "--" && !help.contains(&format!("{flag} ")) && !help.contains(&format!("{flag}\n")) {
                        wrong.insert(format!("{name}: `{program} {}` has no {flag}", path.join(" ")));
                    }
                }
            }
        }
    }
    assert!(checked > 20, "only {checked} commands found: is the extraction broken?");
    assert!(wrong.is_empty(), "the documents print commands that do not work:\n{}", Vec::from_iter(wrong).join("\n"));
}
