//! docs/reference/metrics.md: every metric of the operator and of the node agent, from the text
//! exposition of their real registries. Two crates each write their own section of the one page
//! (neither depends on the other); shared by operator/tests/reference.rs and
//! agent/tests/reference.rs by `#[path]`, as markdown.rs.
use std::collections::BTreeSet;
use std::path::Path;

use super::markdown::{cell, check_or_bless, code, head, row};

pub const PAGE: &str = "docs/reference/metrics.md";

/// A section of the page, written by one crate's test.
pub struct Section {
    /// Its markers' name: `<!-- begin ID -->` … `<!-- end ID -->`.
    pub id: &'static str,
    pub title: &'static str,
    pub source: &'static str,
    pub command: &'static str,
}

pub const OPERATOR: Section = Section {
    id: "sandbox-operator",
    title: "Operator",
    source: "operator/src/metrics.rs",
    command: "cargo test -p sandbox-operator --test reference metrics_page",
};

pub const AGENT: Section = Section {
    id: "sandbox-agent",
    title: "Node agent",
    source: "agent/src/metrics.rs",
    command: "cargo test -p sandbox-agent --test reference metrics_page",
};

const SECTIONS: [&Section; 2] = [&OPERATOR, &AGENT];

/// Checks (or, with SPO_BLESS=1, writes) `section` of the page from `text`, a text exposition
/// with a sample in every family; the other section is taken as committed.
pub fn check_section(root: &Path, section: &Section, text: &str) {
    let committed = std::fs::read_to_string(root.join(PAGE)).unwrap_or_default();
    let commands: Vec<String> = SECTIONS
        .iter()
        .map(|s| format!("`SPO_BLESS=1 {}` ({})", s.command, s.title))
        .collect();
    let mut page = format!(
        "<!-- Generated from the sources by {}: do not edit by hand. -->\n\
         # Metrics\n\n\
         Every metric the operator and the node agent export on `/metrics`, read from the text \
         exposition (OpenMetrics) of their registries. A counter's series ends in `_total`; a \
         histogram's are `_bucket` (label `le`), `_sum` and `_count`.\n",
        commands.join(" and ")
    );
    for s in SECTIONS {
        let body = if s.id == section.id {
            section_body(s, text)
        } else {
            committed_body(&committed, s)
        };
        page += &format!("\n<!-- begin {} -->\n{body}<!-- end {} -->\n", s.id, s.id);
    }
    check_or_bless(root, PAGE, &page, section.command);
}

fn committed_body(committed: &str, s: &Section) -> String {
    let begin = format!("<!-- begin {} -->\n", s.id);
    let end = format!("<!-- end {} -->", s.id);
    committed
        .split_once(&begin)
        .and_then(|(_, rest)| rest.split_once(&end))
        .map(|(body, _)| body.to_string())
        .unwrap_or_else(|| format!("Not generated yet: `SPO_BLESS=1 {}`.\n", s.command))
}

fn section_body(s: &Section, text: &str) -> String {
    let mut out = format!("## {}\n\nFrom the registry in `{}`.\n\n", s.title, s.source);
    out += &head(&["Metric", "Type", "Labels", "Help"]);
    for f in families(text) {
        assert!(
            !f.series.is_empty(),
            "metric {} has no sample in the exposition, so its labels are unknown: record one \
             where the {} test builds the registry",
            f.name,
            s.id
        );
        let labels: Vec<String> = f.labels.iter().map(|l| code(l)).collect();
        out += &row(&[
            cell(&code(&f.name)),
            cell(&f.kind),
            cell(&labels.join(", ")),
            cell(&f.help),
        ]);
    }
    out
}

/// One metric family of the exposition: `# TYPE` and `# HELP`, and its samples' label names.
struct Family {
    name: String,
    kind: String,
    help: String,
    series: BTreeSet<String>,
    labels: BTreeSet<String>,
}

/// The families of a text exposition, sorted by name.
fn families(text: &str) -> Vec<Family> {
    let mut out: Vec<Family> = vec![];
    for line in text.lines().filter(|l| !l.is_empty()) {
        let mut words = line.splitn(4, ' ');
        match (words.next(), words.next(), words.next(), words.next()) {
            (Some("#"), Some("TYPE"), Some(name), kind) => {
                family(&mut out, name).kind = kind.unwrap_or_default().into();
            }
            (Some("#"), Some("HELP"), Some(name), help) => {
                family(&mut out, name).help = unescape(help.unwrap_or_default());
            }
            (Some("#"), ..) => {}
            _ => {
                let f = out.last_mut().expect("a sample after its # TYPE");
                let series = line.split(['{', ' ']).next().unwrap_or_default();
                f.series.insert(series.to_string());
                // `le` is the histogram's bucket bound, not a label of the metric.
                f.labels
                    .extend(label_names(line).into_iter().filter(|l| l != "le"));
            }
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// The family being read when it is `name`'s (its `# HELP`, `# TYPE` and `# UNIT` come
/// together), else a new one.
fn family<'a>(out: &'a mut Vec<Family>, name: &str) -> &'a mut Family {
    if out.last().is_none_or(|f| f.name != name) {
        out.push(Family {
            name: name.into(),
            kind: String::new(),
            help: String::new(),
            series: BTreeSet::new(),
            labels: BTreeSet::new(),
        });
    }
    out.last_mut().expect("pushed")
}

/// The label names of a sample line `name{a="x",b="y"} 1`.
fn label_names(line: &str) -> Vec<String> {
    let Some((_, rest)) = line.split_once('{') else {
        return vec![];
    };
    let mut names = vec![];
    let mut chars = rest.chars();
    loop {
        let name: String = chars.by_ref().take_while(|c| *c != '=').collect();
        names.push(name.trim_start_matches(',').to_string());
        // The quoted value, with its escapes.
        assert_eq!(chars.next(), Some('"'), "a quoted label value in {line}");
        let mut escaped = false;
        for c in chars.by_ref() {
            match c {
                '"' if !escaped => break,
                '\\' => escaped = !escaped,
                _ => escaped = false,
            }
        }
        if chars.clone().next() == Some('}') {
            return names;
        }
    }
}

fn unescape(help: &str) -> String {
    help.replace("\\n", "\n")
        .replace("\\\"", "\"")
        .replace("\\\\", "\\")
}
