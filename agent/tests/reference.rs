//! The node agent's section of the generated metrics page (docs/reference/metrics.md), from its
//! real registry: fails when the committed section differs, naming the command that rewrites it
//! (the same test with SPO_BLESS=1). The page's code is the operator's, shared by `#[path]`.
use sandbox_agent::metrics::{Metrics, NodeFacts};

#[path = "../../operator/tests/reference/exposition.rs"]
mod exposition;
#[path = "../../operator/tests/reference/markdown.rs"]
mod markdown;

#[test]
fn metrics_page() {
    let m = Metrics::new();
    // A sample in each labelled family, so that the page shows its labels (the section fails
    // on a family without one: add it here). `processes` gets one per phase from encode.
    m.error("example");
    let text = m.encode(&[], NodeFacts::default());
    let root = markdown::root(env!("CARGO_MANIFEST_DIR"));
    exposition::check_section(&root, &exposition::AGENT, &text);
}
