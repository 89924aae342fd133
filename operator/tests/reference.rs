//! The generated reference pages this crate owns (docs/reference/): the SandboxProcess CRD, the
//! chart's values and the operator's section of the metrics page. Each test fails when its
//! committed page differs from what the sources give, naming the command that rewrites it: the
//! same test with SPO_BLESS=1.
use sandbox_operator::metrics::Metrics;

#[path = "reference/chart.rs"]
mod chart;
#[path = "reference/crd.rs"]
mod crd;
#[path = "reference/exposition.rs"]
mod exposition;
#[path = "reference/markdown.rs"]
mod markdown;
#[path = "reference/schema.rs"]
mod schema;

const COMMAND: &str = "cargo test -p sandbox-operator --test reference";

fn root() -> std::path::PathBuf {
    markdown::root(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn sandboxprocess_page() {
    let command = format!("{COMMAND} sandboxprocess_page");
    markdown::check_or_bless(&root(), crd::PAGE, &crd::page(&command), &command);
}

#[test]
fn chart_values_page() {
    let command = format!("{COMMAND} chart_values_page");
    let page = chart::page(&root(), &command);
    markdown::check_or_bless(&root(), chart::PAGE, &page, &command);
}

#[test]
fn metrics_page() {
    let m = Metrics::new();
    // A sample in each labelled family, so that the page shows its labels (the section fails
    // on a family without one: add it here).
    m.error("example");
    m.status_write_failed("example");
    m.certificate_expires("serving", None);
    exposition::check_section(&root(), &exposition::OPERATOR, &m.encode());
}
